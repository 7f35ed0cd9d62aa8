package ledger

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/lily-mq/lily/inbox/pginbox"
	"github.com/lily-mq/lily/runtime"
)

// observe keeps every record, notes the ids whose journey is over, and
// whether consumption has resumed since a fault.
func (r *run) observe(rec runtime.Record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.resumed(rec)
	r.records = append(r.records, rec)
	recs := append(r.byID[rec.MessageID], rec)
	r.byID[rec.MessageID] = recs
	if workAcked(recs) || (rec.Handoff == "confirmed" && rec.Destination == r.spec.Topology.DeadLetterQueue) {
		r.done[rec.MessageID] = true
	}
	if rec.Handoff == "returned" || rec.Handoff == "nacked" {
		r.refused[refusal{rec.Handoff, rec.Destination}]++
	}
}

// workAcked: the message's records show the ACK of the handler's completed
// work: directly, through the inbox's record of it, or from the runtime's
// record after the ACK of a successful run was lost. A settlement from the
// runtime's record of a handoff is not: the copy carries on.
func workAcked(recs []runtime.Record) bool {
	for _, rec := range recs {
		switch {
		case rec.Path != runtime.PathAcked:
		case rec.Commit == "duplicate", handled(rec):
			return true
		case rec.Handler == "completed earlier" && slices.ContainsFunc(recs, func(e runtime.Record) bool { return e.Attempt == rec.Attempt && handled(e) }):
			return true
		}
	}
	return false
}

// handled: the handler succeeded and its work stands (no failed commit).
func handled(rec runtime.Record) bool {
	return rec.Handler == "ok" && rec.Handoff == "" && rec.Commit != "failed" && rec.Commit != "ambiguous"
}

// The run is the consumers' slog.Handler: of their diagnostics it keeps the
// ACKs never proven and the reasons sessions ended, both logged as warnings,
// and the broker's refusals of the topology, logged as errors: at a
// reconnect (which Report.Lost lists too), and declared again while
// consuming (which it does not: intake was not lost).

func (r *run) Enabled(_ context.Context, level slog.Level) bool { return level >= slog.LevelWarn }

func (r *run) Handle(_ context.Context, rec slog.Record) error {
	ev := lineOf(rec)
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case ev.Stage == "ack-ambiguous":
		r.ambiguous[workKey{ev.ID, ev.Attempt}]++
	case lostStage(ev.Stage):
		r.lost = append(r.lost, ev.Detail)
	}
	return nil
}

// lineOf is what the ledger reads of a consumer's diagnostics record: its
// stage, message id, attempt and detail.
func lineOf(rec slog.Record) event {
	ev := event{Kind: evWarning}
	rec.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "stage":
			ev.Stage = a.Value.String()
		case "message_id":
			ev.ID = a.Value.String()
		case "attempt":
			ev.Attempt = int(a.Value.Int64())
		case "detail":
			ev.Detail = a.Value.String()
		}
		return true
	})
	return ev
}

// lostStage says whether a diagnostics line of stage says why a session
// ended or the topology was refused, which the run keeps.
func lostStage(stage string) bool {
	switch stage {
	case "intake-lost", "topology-refused", "topology-drifted":
		return true
	}
	return false
}

func (r *run) WithAttrs([]slog.Attr) slog.Handler { return r }

func (r *run) WithGroup(string) slog.Handler { return r }

// consume runs consumers through the proxy while faults strike, until every
// message's journey is over or the deadline, then shuts the last one down. A
// restart fault shuts the consumer down and starts a new one, whose process
// memory is empty: what the old one left unresolved meets the inbox, or runs
// again. It returns every consumer's report, in order.
func (r *run) consume(ctx context.Context, urls []string) ([]*runtime.Report, error) {
	cfg := runtime.Config{
		URLs: urls, Observe: r.observe, Logger: slog.New(r), AfterDelivery: r.afterDelivery,
		// Long enough for a first connection on a loaded machine (Run fails
		// when that one does), short enough for a stall to outlast it.
		StepTimeout: 2 * time.Second,
		// A forced stop's window is short: the handlers still running at
		// its end meet the final abort (faultForcedUnderBurst).
		ShutdownGrace: 5 * time.Second, ForceWindow: time.Millisecond,
		ReconnectMax: 500 * time.Millisecond,
	}
	if r.pool != nil {
		cfg.Inbox = pginbox.New(r.pool, pginbox.Options{LockTimeout: 500 * time.Millisecond})
	}
	published := make(chan error, 1)
	if r.cfg.PublishOver > 0 {
		// Stopped with the consumers, and waited for: the drain must not
		// race a publisher still sending into the queues it reads.
		pubCtx, stopPublishing := context.WithCancel(ctx)
		pubDone := make(chan struct{})
		go func() {
			defer close(pubDone)
			published <- r.publish(pubCtx)
		}()
		defer func() {
			stopPublishing()
			<-pubDone
		}()
	}
	faultCtx, stopFaults := context.WithCancel(ctx)
	faultsDone := make(chan struct{})
	go func() {
		defer close(faultsDone)
		r.strike(faultCtx)
	}()
	defer func() {
		stopFaults()
		<-faultsDone
	}()
	r.deadline = time.Now().Add(r.cfg.Deadline)
	var reports []*runtime.Report
	for {
		var sealed atomic.Bool
		c, err := runtime.NewConsumer(r.spec, runtime.Routes{{Type: messageTyp, Version: 1, ContentType: "application/json"}: r.handler(&sealed, r.noteSuccess, r.noteEnded)}, cfg)
		if err != nil {
			return reports, err
		}
		runCtx, stop := context.WithCancel(ctx)
		var rep *runtime.Report
		ran := make(chan error, 1)
		go func() {
			var err error
			rep, err = c.Run(runCtx)
			sealed.Store(true)
			if rep == nil && err != nil && !refused(err) {
				err = fmt.Errorf("%w: %w", errNeverConnected, err)
			}
			ran <- err
		}()
		restart, forced, err := r.await(ctx, ran, published)
		if errors.Is(err, errNeverConnected) && ctx.Err() == nil {
			stop()
			if err := r.failedStart(ctx, err); err != nil {
				return reports, err
			}
			continue
		}
		if err != nil {
			stop()
			return reports, fmt.Errorf("ledger: %w", err)
		}
		if !restart {
			stopFaults()
			<-faultsDone
		}
		if forced {
			c.Force()
		}
		stop()
		if err := <-ran; errors.Is(err, errNeverConnected) {
			if err := r.failedStart(ctx, err); err != nil {
				return reports, err
			}
		} else if err != nil {
			return reports, fmt.Errorf("ledger: Run: %w", err)
		} else {
			r.failedInARow = 0
			reports = append(reports, rep)
			if forced {
				select {
				case r.forced <- rep:
				default: // no strike waits for it
				}
			}
		}
		if !restart {
			return reports, nil
		}
	}
}
