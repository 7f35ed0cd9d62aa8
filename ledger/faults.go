package ledger

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/lily-mq/lily/internal/backoff"
	"github.com/lily-mq/lily/internal/faults"
	"github.com/lily-mq/lily/runtime"
)

func (r *run) faultCounts() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.faults)
}

// fault is one kind of fault: strike reports whether it struck.
type fault struct {
	name   string
	strike func(ctx context.Context) (bool, error)
}

// strike injects the faults in rounds, every kind once a round, with a
// pause of FaultEvery on average (between half and one and a half of it)
// after each, one at a time, each healed before the next: a short run sees
// every kind, which a random draw of a few would not. A kind that did not
// strike (nothing to strike at) is tried again after the next.
// Every kind is counted from the start, so that one that never struck
// shows as 0.
func (r *run) strike(ctx context.Context) {
	if r.cfg.FaultEvery <= 0 {
		return
	}
	kinds := r.faultKinds()
	r.mu.Lock()
	for _, k := range kinds {
		r.faults[k.name] += 0
	}
	r.mu.Unlock()
	var rounds []fault
	for {
		pause := r.cfg.FaultEvery/2 + time.Duration(r.rng.Int64N(int64(r.cfg.FaultEvery)))
		if !backoff.Sleep(ctx, pause) {
			return
		}
		if len(rounds) == 0 {
			rounds = r.round(kinds)
		}
		k := rounds[0]
		rounds = rounds[1:]
		struck, err := k.strike(ctx)
		r.mu.Lock()
		switch {
		case err != nil && (ctx.Err() == nil || errors.Is(err, errHeal)):
			r.faults["harness error: "+k.name+": "+err.Error()]++
		case struck:
			r.faults[k.name]++
		default:
			rounds = slices.Insert(rounds, min(1, len(rounds)), k)
		}
		r.mu.Unlock()
	}
}

// round is one round of faults: first those that strike only at work in
// flight (atWork), then the others but a cluster's nodes', then the nodes'
// in a seeded order, each group in the order of kinds. The others strike
// whatever is in flight, or an idle connection; on a loaded machine a node
// takes tens of seconds to start again, and a rabbitmqctl seconds. Put
// first, those took a loaded run's publishing at its fullest, and the kinds
// that need work found only the held messages' trickle (a handoff refused
// in the second a fault lasts, or none) or, past the hold, nothing.
func (r *run) round(kinds []fault) []fault {
	var work, others, nodes []fault
	for _, k := range kinds {
		switch {
		case atWork(k.name):
			work = append(work, k)
		case nodeFault(k.name):
			nodes = append(nodes, k)
		default:
			others = append(others, k)
		}
	}
	r.rng.Shuffle(len(nodes), func(i, j int) { nodes[i], nodes[j] = nodes[j], nodes[i] })
	return slices.Concat(work, others, nodes)
}

// The faults that strike only at work in flight.
const (
	faultCommitKilled  = "PostgreSQL backend killed during COMMIT"
	faultAckDropped    = "ACK dropped, then its connection cut"
	faultConfirmCut    = "consume connection cut after a handoff confirm, before the ACK"
	faultBucketDeleted = "retry bucket deleted (handoffs returned)"
	faultDLQRefusing   = "DLQ refusing publishes (handoffs nacked)"
)

// atWork says whether the fault named name strikes only at work in flight:
// a COMMIT to kill, a burst to stop under, an ACK or a confirm to catch, a
// handoff to refuse.
func atWork(name string) bool {
	switch name {
	case faultCommitKilled, faultForcedUnderBurst, faultAckDropped, faultConfirmCut, faultBucketDeleted, faultDLQRefusing:
		return true
	}
	return false
}

// A forced stop under a burst: the publisher sends burstSize messages at
// once, and the consumer, its slots and prefetch full, is stopped with
// Force, so that its short force window ends in the final abort with
// deliveries in flight, and what it had received and not started is
// requeued. While it lasts every handler takes burstHandling longer, its
// context ignored as a slow handler's: on a fast machine, handlers of a few
// microseconds worked a burst through before the stop, which then struck
// nothing and was tried again, burst after burst, until the run's messages
// ran out before the other faults' turn.
const (
	faultForcedUnderBurst = "consumer forced to stop under a burst (final abort), started again"
	burstSize             = 300
	burstHandling         = 20 * time.Millisecond
)

// metWorkInFlight reports whether a forced stop did what
// faultForcedUnderBurst is for: its force window ended in the final abort
// with a delivery in flight, and it requeued one it had not started.
func metWorkInFlight(rep *runtime.Report) bool {
	forced := slices.ContainsFunc(rep.Phases, func(p runtime.Phase) bool { return p.Name == "force window" })
	aborted := slices.ContainsFunc(rep.Unresolved, func(u runtime.Record) bool {
		return abortedRun(u) || abortedAtClose(u)
	})
	return forced && aborted && rep.Counts[runtime.PathNotStarted] > 0
}

// refusal is a way the broker refused a handoff ("returned" or "nacked"),
// and the queue it refused it for.
type refusal struct{ handoff, destination string }

// refusalWait bounds the wait for the record of a handoff the broker
// refused: it comes after the requeue's pause that follows the refusal.
const refusalWait = 3 * time.Second

// refusedSoFar counts the records of handoffs the broker refused so.
func (r *run) refusedSoFar(how refusal) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.refused[how]
}

// refusedSince reports whether, within refusalWait, the records show more
// handoffs refused so than before: a fault that makes the broker refuse
// handoffs struck only if it refused one, and none may have come while it
// lasted.
func (r *run) refusedSince(ctx context.Context, how refusal, before int) bool {
	for end := time.Now().Add(refusalWait); r.refusedSoFar(how) <= before; {
		if time.Now().After(end) || !backoff.Sleep(ctx, 50*time.Millisecond) {
			return false
		}
	}
	return true
}

// errHeal marks the failure of a fault's heal: it may leave the broker
// broken (a reject policy, a queue's binding gone) however the run is
// ending, so it is a harness error even once the faults are being stopped,
// when the others are taken for the stop's.
var errHeal = errors.New("the fault's heal failed")

// healed marks err, a heal's, as errHeal.
func healed(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", errHeal, err)
}

// between draws a duration in [lo, hi).
func (r *run) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(r.rng.Int64N(int64(hi-lo)))
}

// forcedUnderBurst strikes the forced stop under a burst.
func (r *run) forcedUnderBurst(ctx context.Context) (bool, error) {
	r.bursting.Store(true)
	defer r.bursting.Store(false)
	// Once the publishing is over (PublishOver 0 publishes everything
	// before the consumer starts) nothing reads a burst: the stop goes
	// ahead under what is queued, rather than wait, every turn, for a
	// burst never handed out, while the other kinds wait behind it.
	if !r.handedOut.Load() {
		select {
		case r.burst <- burstSize:
		default:
			return false, nil
		}
	}
	// Long enough for the burst to fill the consumer's slots and its
	// prefetch, short of the time it takes to work through it.
	if !backoff.Sleep(ctx, 150*time.Millisecond) {
		return false, nil
	}
	select {
	case <-r.forced: // the report of a stop no strike waited for
	default:
	}
	select {
	case r.restart <- true:
	default:
		return false, nil
	}
	// A stop that found the burst worked through already (a loaded
	// machine, a session lost meanwhile) did not strike: it is tried
	// again, rather than leave the run without the final abort it tests.
	wait := time.NewTimer(time.Minute)
	defer wait.Stop()
	select {
	case rep := <-r.forced:
		return metWorkInFlight(rep), nil
	case <-wait.C:
	case <-ctx.Done():
	}
	return false, nil
}

// faultKinds are the faults of a run, in the order round keeps within its
// groups: first (each tests what no other does) the database's when asked
// for, a consumer's forced stop under a burst, its restart, and the broker
// restart when asked for; then those of the frame proxy and the broker on
// one node, the refusals of handoffs before the rest, or of the nodes on a
// cluster.
func (r *run) faultKinds() []fault {
	var kinds []fault
	if r.pool != nil {
		kinds = append(kinds, fault{faultCommitKilled, func(ctx context.Context) (bool, error) {
			r.killArmed.Store(true)
			defer r.killArmed.Store(false)
			pid, err := faults.KillInCommit(ctx, r.cfg.PostgresDSN, r.app, 3*time.Second)
			return pid > 0, err
		}})
	}
	kinds = append(kinds, fault{faultForcedUnderBurst, r.forcedUnderBurst})
	kinds = append(kinds, fault{"consumer restarted (its memory of completed work lost)", func(context.Context) (bool, error) {
		select {
		case r.restart <- false:
			return true, nil
		default:
			return false, nil
		}
	}})
	if r.cfg.RestartBroker && r.cfg.Cluster == nil {
		kinds = append(kinds, fault{"broker restarted (stop_app, start_app)", func(ctx context.Context) (bool, error) {
			err := faults.RestartBroker(ctx, r.between(time.Second, 3*time.Second))
			return err == nil, err
		}})
	}
	if r.cfg.Cluster != nil {
		return append(kinds, r.clusterFaults()...)
	}
	return append(kinds, r.nodeFaults()...)
}

// nodeFaults are the faults of one broker node: the frame proxy's, and the
// broker's own on the run's queues and connections.
func (r *run) nodeFaults() []fault {
	consume, handoff := faults.ConnectionName(r.spec.Name, "consume"), faults.ConnectionName(r.spec.Name, "handoff")
	var armAck, armConfirm atomic.Bool
	// fired says, each time a one-shot frame fault fires, whether it struck:
	// a confirm found no consume connection to cut (it was reconnecting)
	// struck nothing.
	fired := make(chan bool, 1)
	r.proxy.Intercept(func(f faults.Frame) faults.Action {
		switch {
		case f.Dir == faults.ToBroker && f.Is(faults.BasicAck) && f.Conn == consume && armAck.CompareAndSwap(true, false):
			fired <- true
			return faults.CutBefore
		case f.Dir == faults.ToClient && f.Is(faults.BasicAck) && f.Conn == handoff && armConfirm.CompareAndSwap(true, false):
			fired <- r.proxy.CutConns(func(name string) bool { return name == consume }) > 0
		}
		return faults.Forward
	})
	// armed arms a one-shot frame fault and waits up to 2 s for it to fire.
	armed := func(arm *atomic.Bool) func(context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			arm.Store(true)
			t := time.NewTimer(2 * time.Second)
			defer t.Stop()
			select {
			case struck := <-fired:
				return struck, nil
			case <-t.C:
			case <-ctx.Done():
			}
			if arm.CompareAndSwap(true, false) {
				return false, nil
			}
			// It fired as the wait ended: its word is on its way.
			return <-fired, nil
		}
	}
	return []fault{
		{"connection cut (proxy)", func(context.Context) (bool, error) { return r.proxy.Cut() > 0, nil }},
		{faultBucketDeleted, func(ctx context.Context) (bool, error) {
			bucket := declarations(r.spec)[1]
			returned := refusal{"returned", bucket.Name}
			before := r.refusedSoFar(returned)
			hold := r.between(300*time.Millisecond, 800*time.Millisecond)
			// Handoffs are held back while the bucket goes: one racing the
			// delete would be confirmed and dropped by the broker.
			r.proxy.Stall(faults.ToBroker)
			time.Sleep(200 * time.Millisecond)
			heal, err := faults.Unroute(r.cfg.BrokerURL, bucket, 20)
			r.proxy.Resume()
			if errors.Is(err, faults.ErrNotEmpty) {
				return false, nil
			}
			if err != nil {
				return false, err
			}
			backoff.Sleep(ctx, hold)
			err = healed(heal())
			return r.refusedSince(ctx, returned, before), err
		}},
		{faultDLQRefusing, func(ctx context.Context) (bool, error) {
			nacked := refusal{"nacked", r.spec.Topology.DeadLetterQueue}
			before := r.refusedSoFar(nacked)
			hold := r.between(500*time.Millisecond, 1500*time.Millisecond)
			heal, err := faults.RejectPublishes(context.WithoutCancel(ctx), r.cfg.BrokerURL, r.spec.Topology.DeadLetterQueue)
			if err != nil {
				return false, err
			}
			backoff.Sleep(ctx, hold)
			err = healed(heal(context.WithoutCancel(ctx)))
			return r.refusedSince(ctx, nacked, before), err
		}},
		{faultAckDropped, armed(&armAck)},
		{faultConfirmCut, armed(&armConfirm)},
		// A stall or a delay struck only if it held a frame back.
		{"stall", func(ctx context.Context) (bool, error) {
			dir := []faults.Direction{faults.ToBroker, faults.ToClient, 0}[r.rng.IntN(3)]
			before := r.proxy.Held()
			r.proxy.Stall(dir)
			backoff.Sleep(ctx, r.between(200*time.Millisecond, 3*time.Second))
			r.proxy.Resume()
			return r.proxy.Held() > before, nil
		}},
		{"delay", func(ctx context.Context) (bool, error) {
			before := r.proxy.Held()
			r.proxy.Delay(r.between(5*time.Millisecond, 40*time.Millisecond))
			backoff.Sleep(ctx, r.between(500*time.Millisecond, 2*time.Second))
			r.proxy.Delay(0)
			return r.proxy.Held() > before, nil
		}},
		{"connection closed by the broker", func(ctx context.Context) (bool, error) {
			name := []string{consume, handoff}[r.rng.IntN(2)]
			closed, err := faults.CloseConnections(ctx, func(n string) bool { return n == name }, "ledger fault")
			return len(closed) > 0, err
		}},
	}
}
