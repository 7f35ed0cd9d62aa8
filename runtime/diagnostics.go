package runtime

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/lily-mq/lily/internal/sanitize"
	"github.com/lily-mq/lily/runtime/internal/decide"
	"github.com/lily-mq/lily/runtime/internal/outcome"
)

// The diagnostics are slog records: one per stage of a delivery's journey
// and of the consumer's life, message "lily", with the keys queue and stage,
// then as the event has them message_id and attempt, type and version,
// generation (the consumer channel's), path, handoff, settlement, duration
// and detail. The stage names and keys are stable: dashboards and alerts may
// rely on them (docs/runtime.md lists them).

// stage names a step of a delivery's journey, or of the consumer's life.
type stage string

const (
	stageReceived   stage = "received"    // read from the consumer channel
	stageRejected   stage = "rejected"    // stopped by the guard or at dispatch
	stageHandled    stage = "handled"     // the handler returned (or timed out)
	stageFromRecord stage = "from-record" // a redelivery of completed work, settled without the handler
	stageHandoff    stage = "handoff"     // the handoff publish resolved
	stageParked     stage = "parked"      // an ordered queue's retry waits in line
	stageSettled    stage = "settled"     // the journey ended; path says where
	stageAckProven  stage = "ack-proven"  // a later reply on the channel proved the ACK
	// stageAckAmbiguous: the channel was lost before the ACK's proof.
	stageAckAmbiguous stage = "ack-ambiguous"

	stageConnected stage = "connected"   // consuming on a new channel generation
	stageLost      stage = "intake-lost" // the channel, connection or consumer ended under us
	stageReconnect stage = "reconnect"   // waiting before the next connection attempt
	// stageRefused: the broker refused the topology at a reconnect (406, an
	// external exchange or queue gone); retried until someone mends it.
	stageRefused stage = "topology-refused"
	// stageDrifted: declared again while consuming, the topology was
	// refused (drift.go); consuming goes on. stageMended: it was taken again.
	stageDrifted stage = "topology-drifted"
	stageMended  stage = "topology-mended"
	// stageUnanswered: declared again while consuming, the topology had no
	// answer within a step; it is not declared again on that session until
	// the broker answers (drift.go); consuming goes on.
	stageUnanswered stage = "topology-unanswered"
	// stagePhase marks a shutdown phase: once as it starts, and once as it
	// ends, with its duration.
	stagePhase stage = "shutdown-phase"
)

// event is one diagnostics record. Every string in it is sanitized and bounded.
type event struct {
	stage      stage
	messageID  string
	typ        string
	version    int
	attempt    int
	generation uint64
	path       Path
	handoff    outcome.HandoffStatus
	settlement outcome.SettlementStatus
	duration   time.Duration
	detail     string
	// duplicate: the inbox held the message's work committed already.
	duplicate bool
}

// logs says whether the logger takes the events of stage s, for an event
// whose fields cost strings to build: a retried delivery's handoff event,
// built and dropped, cost a microsecond and two allocations.
func (c *Consumer) logs(s stage) bool {
	return c.cfg.Logger.Enabled(context.Background(), stageLevel(event{stage: s}))
}

// emit logs ev at its stage's level, when the logger takes that level.
func (c *Consumer) emit(ev event) {
	level := stageLevel(ev)
	if !c.cfg.Logger.Enabled(context.Background(), level) {
		return
	}
	attrs := []slog.Attr{slog.String("queue", c.spec.Name), slog.String("stage", string(ev.stage))}
	if ev.messageID != "" {
		attrs = append(attrs, slog.String("message_id", ev.messageID))
	}
	if ev.attempt != 0 {
		attrs = append(attrs, slog.Int("attempt", ev.attempt)) // known once the guard has read it
	}
	if ev.typ != "" {
		attrs = append(attrs, slog.String("type", ev.typ), slog.Int("version", ev.version))
	}
	if ev.generation != 0 {
		attrs = append(attrs, slog.Uint64("generation", ev.generation))
	}
	switch {
	case ev.path != "":
		attrs = append(attrs, slog.String("path", string(ev.path)), slog.String("handoff", ev.handoff.String()),
			slog.String("settlement", ev.settlement.String()))
	case ev.handoff != outcome.HandoffNone:
		attrs = append(attrs, slog.String("handoff", ev.handoff.String()))
	}
	if ev.duplicate {
		attrs = append(attrs, slog.Bool("duplicate", true))
	}
	if ev.duration != 0 {
		attrs = append(attrs, slog.Duration("duration", ev.duration))
	}
	if ev.detail != "" {
		attrs = append(attrs, slog.String("detail", ev.detail))
	}
	c.cfg.Logger.LogAttrs(context.Background(), level, "lily", attrs...)
}

func stageLevel(ev event) slog.Level {
	switch ev.stage {
	case stageRefused, stageDrifted:
		return slog.LevelError
	case stageAckAmbiguous, stageLost, stageReconnect, stageUnanswered:
		return slog.LevelWarn
	case stageConnected, stageMended, stagePhase, stageFromRecord, stageRejected, stageParked:
		return slog.LevelInfo
	case stageSettled:
		switch {
		case ev.path == PathAcked && !ev.duplicate:
			return slog.LevelDebug
		case ev.path == PathUnresolved, ev.path == PathRequeued:
			return slog.LevelWarn
		}
		return slog.LevelInfo
	}
	return slog.LevelDebug
}

// record ends a delivery's journey: its record goes to the observer and the
// report, and as the "settled" stage to the log. Once the record is in the
// report, it leaves the journey's order key's lane (lane: nil without one)
// and sl, the journey's slot (nil for a delivery that never took one).
func (c *Consumer) record(ctx context.Context, r *run, gen, token uint64, rec Record, o outcome.Outcome, hooks ends, sl *slot, lane func()) {
	// A delivery abandoned at the final abort may end after Run returned: its
	// record is only logged then, and the report already lists it.
	// Health says it settled before the observer hears of it: an observer
	// that then asks sees the same.
	if rec.Path != PathUnresolved {
		r.settledNow()
	}
	duplicate := o.Claim == outcome.InboxDuplicate
	// The observer hears of a record the report holds at once, before the
	// hook's ends, which may be slow: a shutdown waits for them only until
	// its step ends, and Observe must not be called after Run returned.
	if r.report.add(token, rec, copyMayRepeat(o), duplicate) && c.cfg.Observe != nil {
		c.observe(rec)
	}
	if lane != nil {
		// Settled: the key's next delivery may start, or be requeued behind
		// it, now, not behind the hook's ends and the log, which may be
		// slow, or hang: the key's later deliveries would fill the prefetch
		// and stop every key.
		lane()
	}
	if sl != nil && c.telemetry.t != nil {
		// The delivery is settled and its record is in the report: the slot
		// goes before the hook's ends and the log, which may be
		// slow (a span's export to a collector that is away), so that the
		// deliveries waiting for a slot do not spend their budgets behind
		// them. A place among the journeys ending so is taken first, and
		// kept until they return: ends steadily slower than deliveries come
		// hold the slots again, at their pace, rather than pile up. The
		// journey still counts in flight, so a shutdown waits for them.
		// Without a hook there is nothing slow to leave the slot for (the
		// observer must be quick, as Config.Observe says), and the ack path
		// pays nothing.
		r.ending <- struct{}{}
		defer func() { <-r.ending }()
		sl.leave()
	}
	hooks.call()
	if !hooks.untold {
		c.telemetry.settled(ctx, rec)
	}
	c.emit(event{
		stage: stageSettled, messageID: rec.MessageID, typ: rec.Type, version: rec.Version, attempt: rec.Attempt,
		generation: gen, path: rec.Path, detail: rec.Reason,
		handoff: o.Handoff.Status, settlement: o.Settlement.Status, duration: rec.Duration, duplicate: duplicate,
	})
}

// observe hands rec to Config.Observe. A panic there is logged: loose on the
// delivery's goroutine it would end the process, and every delivery in
// flight with it.
func (c *Consumer) observe(rec Record) {
	if p := recovered(func() { c.cfg.Observe(rec) }); p != nil {
		c.cfg.Logger.Error("lily Observe panicked", "queue", c.spec.Name, "detail", sanitize.Text(fmt.Sprint(p), decide.MaxCause))
	}
}
