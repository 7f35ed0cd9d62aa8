package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/internal/faults"
	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/runtime/internal/fixture"
	"github.com/lily-mq/lily/runtime/internal/guard"
)

// Broker tests for the paths where the transport, the clock or the process
// fails. Each asserts where every message ended up.

func through(p *proxy) func(*runtime.Config) {
	return func(cfg *runtime.Config) {
		cfg.URLs = []string{p.url()}
		cfg.ReconnectMax = 200 * time.Millisecond
	}
}

// firstAckLost launches a consumer of q through p that calls h and loses
// its first ACK: the proxy holds it back, then cuts the connection, before
// a proof (none comes for an hour) could cover it.
func firstAckLost(t *testing.T, q runtime.QueueSpec, p *proxy, h handler) *running {
	t.Helper()
	r, c := prepare(t, q, h, through(p))
	c.SetProofInterval(time.Hour)
	c.SetTestHooks(runtime.TestHooks{BeforeAck: once(p.freeze), AfterAck: once(p.cut)})
	return r.launch(c)
}

// once returns f wrapped to run on its first call only.
func once(f func()) func() {
	var o sync.Once
	return func() { o.Do(f) }
}

// firstAndAgain tells the record of a message's first delivery from its
// redelivery's, in whichever order they were recorded: the first's record
// follows its settlement, or the loss of its channel, and the redelivery
// may be recorded before it.
func firstAndAgain(a, b runtime.Record) (first, again runtime.Record) {
	if a.Redelivered {
		return b, a
	}
	return a, b
}

// awaitRevoked waits until the consumer noticed the loss of generation 1.
func awaitRevoked(t *testing.T, r *running) {
	t.Helper()
	eventually(t, 2*time.Minute, "the consumer noticing the loss of its connection", func() bool {
		return r.events.has(func(ev event) bool { return ev.stage == "intake-lost" })
	})
}

func noPreconditionFailed(t *testing.T, rep *runtime.Report) {
	t.Helper()
	for _, why := range rep.Lost {
		// "(406)", not "406": a port number in the reason may hold it.
		if strings.Contains(why, "(406)") || strings.Contains(why, "PRECONDITION") {
			t.Errorf("a channel was closed with 406: %s", why)
		}
	}
}

// a. The retry handoff is confirmed, then the connection dies before the ACK:
// the confirm is kept, the original is unresolved, comes back from the main
// queue and is settled from the record, without a second copy.
func TestBrokerConnectionLostBetweenConfirmAndAck(t *testing.T) {
	t.Parallel()
	q, p := behindProxy(t, "between-1", hourRetry)
	var calls atomic.Int32
	r, c := prepare(t, q, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error {
		calls.Add(1)
		return runtime.Retryable(errors.New("busy"))
	}, through(p))
	c.SetTestHooks(runtime.TestHooks{BeforeAck: once(func() { p.cut(); awaitRevoked(t, r) })})
	r.launch(c)
	recs := r.await(2)
	first, second := firstAndAgain(recs[0], recs[1])
	wantPath(t, first, runtime.PathUnresolved)
	if first.Handoff != "confirmed" || !strings.HasPrefix(first.Reason, "settlement not attempted") {
		t.Errorf("first record %+v", first)
	}
	wantPath(t, second, runtime.PathAcked)
	if second.Handler != "completed earlier" || !second.Redelivered || second.Attempt != 1 {
		t.Errorf("second record %+v", second)
	}
	if calls.Load() != 1 {
		t.Errorf("handler ran %d times", calls.Load())
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, bucket(q, time.Hour): {1, 0}, q.Topology.DeadLetterQueue: {0, 0}})
	rep := r.stop()
	if r.reconnects() != 1 || len(rep.Unresolved) != 1 || rep.Unresolved[0].Handoff != "confirmed" {
		t.Errorf("report: %s", rep)
	}
	// Settled from the record here; a process that stopped before the
	// redelivery came would have run the work again beside its copy.
	if len(rep.PossibleCopies) != 1 || rep.PossibleCopies[0].MessageID != "between-1" {
		t.Errorf("possible copies %+v", rep.PossibleCopies)
	}
	noPreconditionFailed(t, rep)
}

// f. The ACK is written but never reaches the broker, and the connection dies
// before its proof: ambiguous. The redelivery is settled from the record and
// the handler does not run twice.
func TestBrokerAmbiguousAckIsSettledFromTheRecord(t *testing.T) {
	t.Parallel()
	q, p := behindProxy(t, "ambiguous-1")
	var calls atomic.Int32
	r := firstAckLost(t, q, p, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error { calls.Add(1); return nil })
	recs := r.await(2)
	first, again := firstAndAgain(recs[0], recs[1])
	wantPath(t, first, runtime.PathAcked) // the journey ended with the ACK sent...
	wantPath(t, again, runtime.PathAcked)
	if again.Handler != "completed earlier" || !again.Redelivered {
		t.Errorf("redelivery record %+v", again)
	}
	if calls.Load() != 1 {
		t.Errorf("handler ran %d times", calls.Load())
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, q.Topology.DeadLetterQueue: {0, 0}})
	rep := r.stop()
	// ...but the report knows it was never proven.
	if len(rep.Unresolved) != 1 || !strings.HasPrefix(rep.Unresolved[0].Reason, "ack sent, never proven") || rep.AcksProven != 1 {
		t.Errorf("report: %s", rep)
	}
	if !r.events.has(func(ev event) bool { return ev.stage == "from-record" }) {
		t.Error("no from-record event in the diagnostics")
	}
	noPreconditionFailed(t, rep)
}

// A delivery rejected before any user code, as poison or as unsupported,
// did no work, though its ACK went unproven: a corrected message with its
// id, sent later, runs its handler and is not settled from the record of
// the rejected one.
func TestBrokerAmbiguousAckOfARejectionSettlesNothingLater(t *testing.T) {
	t.Parallel()
	for name, spoil := range map[string]func(amqp.Publishing){
		"poison":      func(p amqp.Publishing) { delete(p.Headers, guard.HeaderVersion) },
		"unsupported": func(p amqp.Publishing) { p.Headers[guard.HeaderVersion] = int64(99) },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			q := brokerSpec(t)
			declareTopology(t, q)
			bad := order(t, "same-1")
			spoil(bad)
			publish(t, q.Name, bad)
			p := newProxy(t)
			var calls atomic.Int32
			r := firstAckLost(t, q, p, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error { calls.Add(1); return nil })
			// The rejected delivery, and its redelivery once the ACK was cut off.
			recs := r.await(2)
			for _, rec := range recs {
				wantPath(t, rec, runtime.PathDeadLettered)
			}
			publish(t, q.Name, order(t, "same-1"))
			recs = r.await(3)
			wantPath(t, recs[2], runtime.PathAcked)
			if recs[2].Handler != "ok" || calls.Load() != 1 {
				t.Errorf("the corrected message: record %+v, handler ran %d times", recs[2], calls.Load())
			}
			assertCounts(t, map[string][2]int{q.Name: {0, 0}, q.Topology.DeadLetterQueue: {2, 0}})
			rep := r.stop()
			if rep.Counts[runtime.PathAcked] != 1 || len(rep.Unresolved) != 1 {
				t.Errorf("report: %s", rep)
			}
			noPreconditionFailed(t, rep)
		})
	}
}

// A copy re-driven from the DLQ (attempt 1 again, as lilydlq writes it by
// default) is work of its own: the record of its original, whose DLQ
// handoff was confirmed and whose ACK went unproven, does not settle it.
func TestBrokerRedrivenCopyIsNotSettledFromItsOriginalsRecord(t *testing.T) {
	t.Parallel()
	q, p := behindProxy(t, "redrive-1")
	var calls atomic.Int32
	var fixed atomic.Bool
	r := firstAckLost(t, q, p, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error {
		calls.Add(1)
		if !fixed.Load() {
			return runtime.Permanent(errors.New("bug"))
		}
		return nil
	})
	recs := r.await(2)
	first, again := firstAndAgain(recs[0], recs[1])
	wantPath(t, first, runtime.PathDeadLettered)
	wantPath(t, again, runtime.PathAcked)
	if again.Handler != "completed earlier" || !again.Redelivered {
		t.Errorf("the original's redelivery: %+v", again)
	}
	fixed.Store(true)
	m := order(t, "redrive-1")
	m.Headers[envelope.HeaderRedriven] = int64(1)
	m.Headers[envelope.HeaderRedrivenFrom] = q.Topology.DeadLetterQueue
	m.Headers[envelope.HeaderAttempt] = int64(1)
	publish(t, q.Name, m)
	recs = r.await(3)
	wantPath(t, recs[2], runtime.PathAcked)
	if recs[2].Handler != "ok" || calls.Load() != 2 {
		t.Errorf("the re-driven copy: record %+v, handler ran %d times in all", recs[2], calls.Load())
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, q.Topology.DeadLetterQueue: {1, 0}})
	noPreconditionFailed(t, r.stop())
}

// b. The force notification reaches a slow handler that still finishes inside
// the force window: its work is ACKed.
func TestBrokerForcedHandlerThatFinishesIsAcked(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, heldHandler)
	declareTopology(t, q)
	publish(t, q.Name, order(t, "slow-1"))
	started := make(chan struct{})
	r := start(t, q, func(ctx context.Context, _ *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
		close(started)
		<-ctx.Done()
		time.Sleep(200 * time.Millisecond) // finishing up after the force notification
		return nil
	}, func(cfg *runtime.Config) { cfg.ShutdownGrace, cfg.ForceWindow = 100*time.Millisecond, 3*time.Second })
	<-started
	rep := r.stop()
	if rep.Counts[runtime.PathAcked] != 1 || len(rep.Unresolved) != 0 || rep.Abandoned != 0 {
		t.Errorf("report: %s", rep)
	}
	// The handler's end was observed: it completed, and said so.
	if recs := r.recorded(); len(recs) != 1 || recs[0].Handler != "ok" {
		t.Errorf("records %+v", recs)
	}
	if !hasPhase(rep, "force window") {
		t.Errorf("phases %+v", rep.Phases)
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, q.Topology.DeadLetterQueue: {0, 0}})
}

func hasPhase(rep *runtime.Report, name string) bool {
	for _, p := range rep.Phases {
		if p.Name == name {
			return true
		}
	}
	return false
}

// c. A handler stuck past the force window is abandoned at the final abort:
// the report lists its delivery unresolved and counts the goroutine, and the
// message is back in the queue.
func TestBrokerFinalAbortAbandonsAStuckHandler(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, func(q *runtime.QueueSpec) { q.HandlerTimeout = 30 * time.Second })
	declareTopology(t, q)
	publish(t, q.Name, order(t, "stuck-1"))
	started, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	c := start(t, q, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error {
		close(started)
		<-release // ignores its context
		return nil
	}, func(cfg *runtime.Config) {
		cfg.ShutdownGrace, cfg.ForceWindow = 100*time.Millisecond, 200*time.Millisecond
	})
	<-started
	rep := c.stop()
	if rep.Abandoned != 1 || len(rep.Unresolved) != 1 || rep.Unresolved[0].MessageID != "stuck-1" || rep.Counts[runtime.PathUnresolved] != 1 {
		t.Errorf("report: %s", rep)
	}
	if !hasPhase(rep, "final abort") {
		t.Errorf("phases %+v", rep.Phases)
	}
	assertCounts(t, map[string][2]int{q.Name: {1, 0}, q.Topology.DeadLetterQueue: {0, 0}})
}

// A forced shutdown is the consumer's doing: a handler it cancels on the last
// attempt is requeued, not sent to the DLQ.
func TestBrokerForcedCancelSpendsNoRetry(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, heldHandler)
	declareTopology(t, q)
	m := order(t, "last-1")
	m.Headers[guard.HeaderAttempt] = int64(q.MaxAttempts) // as a copy from a retry bucket carries it
	publish(t, q.Name, m)
	started := make(chan struct{})
	c := start(t, q, func(ctx context.Context, _ *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	}, func(cfg *runtime.Config) { cfg.ShutdownGrace = 100 * time.Millisecond })
	<-started
	rep := c.stop()
	if rep.Counts[runtime.PathRequeued] != 1 {
		t.Errorf("report: %s", rep)
	}
	assertCounts(t, map[string][2]int{q.Name: {1, 0}, q.Topology.DeadLetterQueue: {0, 0}})
}

// d. The connection is killed again and again under load: the consumer
// reconnects, every message is acked, and no stale tag is ever used.
func TestBrokerConnectionKilledRepeatedlyLosesNothing(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, func(q *runtime.QueueSpec) { q.Prefetch, q.Concurrency = 32, 8 })
	declareTopology(t, q)
	const n = 300
	msgs := make([]amqp.Publishing, n)
	for i := range msgs {
		msgs[i] = order(t, fmt.Sprintf("load-%03d", i))
	}
	publish(t, q.Name, msgs...)
	p := newProxy(t)
	c := start(t, q, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error {
		time.Sleep(20 * time.Millisecond)
		return nil
	}, through(p))
	// The message ids of the records that say ACKed, one per record.
	ackedRecords := func() []string {
		var ids []string
		for _, rec := range c.recorded() {
			if rec.Path == runtime.PathAcked {
				ids = append(ids, rec.MessageID)
			}
		}
		return ids
	}
	// Each cut waits for a session that is acking: a cut while the consumer
	// is between sessions would cut nothing.
	for range 3 {
		eventually(t, 2*time.Minute, "a connection through the proxy", p.connected)
		before := len(ackedRecords())
		eventually(t, 2*time.Minute, "an ACK on the new session", func() bool { return len(ackedRecords()) > before })
		p.cut()
	}
	acked := map[string]bool{}
	eventually(t, 2*time.Minute, "every message acked", func() bool {
		for _, id := range ackedRecords() {
			acked[id] = true
		}
		return len(acked) == n
	})
	rep := c.stop()
	if n := c.reconnects(); n < 3 {
		t.Errorf("reconnects %d, want 3", n)
	}
	noPreconditionFailed(t, rep)
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, q.Topology.DeadLetterQueue: {0, 0}})
	t.Logf("%d messages acked across %d reconnects; %d unresolved along the way", n, c.reconnects(), len(rep.Unresolved))
}

// A stop that comes while the first connection is still opening is a clean
// stop, not a failed one: Run returns an empty report and no error, and the
// connection, when it opens at last, is closed rather than left to the broker.
func TestBrokerStopBeforeTheFirstConnectionIsClean(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t)
	p := newProxy(t)
	p.Stall(faults.ToClient)
	c := start(t, q, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error { return nil }, through(p))
	eventually(t, 2*time.Minute, "the dial reaching the proxy", p.connected)
	rep := c.stop()
	if c.err != nil || rep == nil {
		t.Fatalf("Run = %v, %v; want a report and no error", rep, c.err)
	}
	if len(rep.Counts) != 0 || len(rep.Unresolved) != 0 || len(rep.Lost) != 0 || c.reconnects() != 0 {
		t.Errorf("report of a consumer that never connected: %s (lost %q)", rep, rep.Lost)
	}
	p.Resume()
	eventually(t, 2*time.Minute, "the late connection closed", func() bool { return !p.connected() })
}

// After the broker cancels the consumer the channel stays healthy, and
// in-flight work still settles on it; if the connection then dies, the
// authority is revoked all the same: no handoff starts that could never be
// followed by its ACK.
func TestBrokerConnectionLostAfterACancelRevokesAuthority(t *testing.T) {
	t.Parallel()
	q, p := behindProxy(t, "cancel-1", hourRetry, heldHandler)
	started, release := make(chan struct{}), make(chan struct{})
	c, consumer := prepare(t, q, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error {
		close(started)
		<-release
		return runtime.Retryable(errors.New("busy"))
	}, through(p))
	c.launch(consumer)
	<-started
	if _, err := channel(t, dial(t)).QueueDelete(q.Name, false, false, false); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "the consumer seeing the cancel", func() bool {
		return c.events.has(func(ev event) bool { return ev.stage == "intake-lost" && strings.Contains(ev.detail, "cancelled") })
	})
	p.cut()
	eventually(t, 2*time.Minute, "the consumer seeing the loss after the cancel", func() bool {
		return c.events.has(func(ev event) bool { return ev.stage == "intake-lost" && strings.Contains(ev.detail, "channel closed") })
	})
	close(release)
	wantPath(t, c.await(1)[0], runtime.PathUnresolved)
	rep := c.stop()
	if len(rep.Unresolved) != 1 || !strings.Contains(rep.Unresolved[0].Reason, "authority revoked before the handoff") {
		t.Errorf("report: %s; unresolved %+v", rep, rep.Unresolved)
	}
	if len(rep.Lost) < 2 || !strings.Contains(rep.Lost[0], "cancelled") || !slices.ContainsFunc(rep.Lost[1:], func(why string) bool { return strings.Contains(why, "channel closed") }) {
		t.Errorf("lost: %q; want the cancel, then the connection", rep.Lost)
	}
	assertCounts(t, map[string][2]int{bucket(q, time.Hour): {0, 0}, q.Topology.DeadLetterQueue: {0, 0}})
}

// The first SIGINT stops intake and waits for in-flight work; the second
// forces: the handler's context is cancelled long before the grace ends. So
// it is under Serve, and under Run with a context signal.NotifyContext
// cancels, which sees no second signal of its own.
func TestBrokerSecondSignalForces(t *testing.T) {
	for name, run := range map[string]func(*runtime.Consumer) (*runtime.Report, error){
		"Serve": func(c *runtime.Consumer) (*runtime.Report, error) { return runtime.Serve(context.Background(), c) },
		"Run under NotifyContext": func(c *runtime.Consumer) (*runtime.Report, error) {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
			defer stop()
			return c.Run(ctx)
		},
	} {
		t.Run(name, func(t *testing.T) {
			q := brokerSpec(t, heldHandler)
			declareTopology(t, q)
			publish(t, q.Name, order(t, "sig-1"))
			started := make(chan struct{})
			r, c := prepare(t, q, func(ctx context.Context, _ *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
				close(started)
				<-ctx.Done()
				return nil // finishing in the force window: still acked
			}, func(cfg *runtime.Config) { cfg.ShutdownGrace = time.Minute })
			type result struct {
				rep *runtime.Report
				err error
			}
			ran := make(chan result, 1)
			go func() {
				rep, err := run(c)
				ran <- result{rep, err}
			}()
			<-started
			if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
			// The second signal once the shutdown has begun: sooner, the
			// first signal's own handler could take it for itself.
			eventually(t, 2*time.Minute, "the cooperative window", func() bool {
				return r.events.has(func(e event) bool { return e.detail == "cooperative window: started" })
			})
			if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
			res := <-ran
			if res.err != nil {
				t.Fatalf("Run: %v", res.err)
			}
			// Forced: the cooperative window ended before its minute, and the
			// handler, which returns only when its context is cancelled, was
			// acked in the force window.
			i := slices.IndexFunc(res.rep.Phases, func(p runtime.Phase) bool { return p.Name == "cooperative window" })
			if res.rep.Counts[runtime.PathAcked] != 1 || !hasPhase(res.rep, "force window") || i < 0 || res.rep.Phases[i].Duration >= time.Minute {
				t.Errorf("report: %s", res.rep)
			}
			assertCounts(t, map[string][2]int{q.Name: {0, 0}})
		})
	}
}

// A Force while intake is still stopping (the broker answers nothing, so the
// cancel waits out its step) cancels the handlers' contexts at once, not once
// intake has stopped: the force window begins then, and no cooperative
// window follows it. The handler, cancelled by the shutdown, is requeued.
func TestBrokerForceWhileIntakeStopsCancelsHandlersAtOnce(t *testing.T) {
	t.Parallel()
	q, p := behindProxy(t, "force-1", heldHandler)
	started := make(chan struct{})
	stoppedFirst := make(chan bool, 1)
	var r *running
	r, c := prepare(t, q, func(ctx context.Context, _ *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
		close(started)
		<-ctx.Done()
		stoppedFirst <- r.events.has(phase("stop intake: ended"))
		return ctx.Err()
	}, through(p), func(cfg *runtime.Config) {
		// The requeue waits for the cancel, here its step's end: the force
		// window outlasts it.
		cfg.StepTimeout, cfg.ShutdownGrace, cfg.ForceWindow = 5*time.Second, time.Minute, 30*time.Second
	})
	r.launch(c)
	<-started
	p.freezeReplies()
	r.cancel()
	eventually(t, 2*time.Minute, "intake stopping", func() bool { return r.events.has(phase("stop intake: started")) })
	c.Force()
	if <-stoppedFirst {
		t.Error("the handler's context was cancelled only once intake had stopped")
	}
	rep := r.stop()
	if rep.Counts[runtime.PathRequeued] != 1 || hasPhase(rep, "cooperative window") || !hasPhase(rep, "force window") {
		t.Errorf("report: %s", rep)
	}
	assertCounts(t, map[string][2]int{q.Name: {1, 0}, q.Topology.DeadLetterQueue: {0, 0}})
}

// A Force made before the stop, as a caller that cancels Run's context and
// forces at once does, cancels the handler as intake begins to stop, maybe
// before the consumer's cancel is written (held a second here). The
// cancelled handler's delivery goes back only after the cancel: before it,
// the broker would hand it straight back to the stopping consumer, which
// would requeue it a second time, as not started.
func TestBrokerForcedHandlerIsRequeuedAfterTheCancel(t *testing.T) {
	t.Parallel()
	q, _ := behindProxy(t, "force-2", heldHandler, func(q *runtime.QueueSpec) { q.Concurrency, q.Prefetch = 1, 1 })
	started := make(chan struct{})
	r, c := prepare(t, q, func(ctx context.Context, _ *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	}, func(cfg *runtime.Config) { cfg.ForceWindow = 30 * time.Second }) // past the cancel held
	c.SetTestHooks(runtime.TestHooks{BeforeCancel: func() { time.Sleep(time.Second) }})
	r.launch(c)
	<-started
	c.Force()
	rep := r.stop()
	var paths []runtime.Path
	for _, rec := range r.recorded() {
		paths = append(paths, rec.Path)
	}
	if !slices.Equal(paths, []runtime.Path{runtime.PathRequeued}) || rep.Counts[runtime.PathRequeued] != 1 || len(rep.Counts) != 1 {
		t.Errorf("records %v, report %s; want the one delivery requeued once", paths, rep)
	}
	assertCounts(t, map[string][2]int{q.Name: {1, 0}, q.Topology.DeadLetterQueue: {0, 0}})
}

// The connection dies during the cooperative window, while a handler still
// runs: its failure afterwards must not publish a copy that no ACK can follow,
// and the original comes back from the main queue.
func TestBrokerConnectionLostDuringShutdownPublishesNoOrphanCopy(t *testing.T) {
	t.Parallel()
	q, p := behindProxy(t, "grace-1", hourRetry, heldHandler)
	started, release := make(chan struct{}), make(chan struct{})
	c, consumer := prepare(t, q, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error {
		close(started)
		<-release
		return runtime.Retryable(errors.New("busy"))
	}, through(p), func(cfg *runtime.Config) { cfg.ShutdownGrace = time.Minute })
	c.launch(consumer)
	<-started
	stopped := make(chan *runtime.Report, 1)
	go func() { stopped <- c.stop() }()
	eventually(t, 2*time.Minute, "the cooperative window", func() bool { return c.events.has(phase("cooperative window: started")) })
	p.cut()
	eventually(t, 2*time.Minute, "the generation revoked", func() bool { return consumer.Generations() == 0 })
	close(release)
	rep := <-stopped
	if len(rep.Unresolved) != 1 || rep.Unresolved[0].Handoff != "" || !strings.HasPrefix(rep.Unresolved[0].Reason, "settlement not attempted") {
		t.Errorf("report: %s", rep)
	}
	if len(rep.Lost) != 1 {
		t.Errorf("lost: %v", rep.Lost)
	}
	assertCounts(t, map[string][2]int{q.Name: {1, 0}, bucket(q, time.Hour): {0, 0}, q.Topology.DeadLetterQueue: {0, 0}})
}

// An ACK written but never delivered, its connection lost during the
// cooperative window: the close proves nothing, and the report says so.
func TestBrokerAckLostDuringShutdownIsNotCountedProven(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, heldHandler)
	declareTopology(t, q)
	publish(t, q.Name, order(t, "grace-2"), order(t, "grace-3"))
	p := newProxy(t)
	acked, release := make(chan struct{}), make(chan struct{})
	r, c := prepare(t, q, func(_ context.Context, msg *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
		if msg.OrderID == "grace-3" {
			<-release // keeps the shutdown in its cooperative window
		}
		return nil
	}, through(p), func(cfg *runtime.Config) { cfg.ShutdownGrace = time.Minute })
	c.SetProofInterval(time.Hour)
	c.SetTestHooks(runtime.TestHooks{BeforeAck: once(p.freeze), AfterAck: once(func() { close(acked) })})
	r.launch(c)
	<-acked
	stopped := make(chan *runtime.Report, 1)
	go func() { stopped <- r.stop() }()
	eventually(t, 2*time.Minute, "the cooperative window", func() bool { return r.events.has(phase("cooperative window: started")) })
	p.cut()
	eventually(t, 2*time.Minute, "the generation revoked", func() bool { return c.Generations() == 0 })
	close(release)
	rep := <-stopped
	var ambiguous bool
	for _, u := range rep.Unresolved {
		ambiguous = ambiguous || (u.MessageID == "grace-2" && strings.HasPrefix(u.Reason, "ack sent, never proven"))
	}
	if !ambiguous || rep.AcksProven != 0 {
		t.Errorf("report: %s", rep)
	}
	assertCounts(t, map[string][2]int{q.Name: {2, 0}, q.Topology.DeadLetterQueue: {0, 0}})
}

// An ACK never delivered, and its connection lost in the moment before the
// clean close: amqp091's Close then answers nil for the channel that had
// already closed, which proves nothing; the ACK is ambiguous.
func TestBrokerAckLostJustBeforeTheCloseIsNotCountedProven(t *testing.T) {
	t.Parallel()
	q, p := behindProxy(t, "close-1")
	acked := make(chan struct{})
	// A step that carries the first connection on a loaded machine; the
	// stop's cancel, frozen, waits it out.
	r, c := prepare(t, q, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error { return nil },
		through(p), func(cfg *runtime.Config) { cfg.StepTimeout = 3 * time.Second })
	c.SetProofInterval(time.Hour)
	c.SetTestHooks(runtime.TestHooks{
		BeforeAck: once(p.freeze),
		AfterAck:  once(func() { close(acked) }),
		BeforeClose: func() {
			p.cut()
			time.Sleep(300 * time.Millisecond) // the client notices the closed socket
		},
	})
	r.launch(c)
	<-acked
	rep := r.stop()
	if len(rep.Unresolved) != 1 || rep.Unresolved[0].MessageID != "close-1" ||
		!strings.HasPrefix(rep.Unresolved[0].Reason, "ack sent, never proven") || rep.AcksProven != 0 {
		t.Errorf("report: %s; unresolved %+v", rep, rep.Unresolved)
	}
	assertCounts(t, map[string][2]int{q.Name: {1, 0}, q.Topology.DeadLetterQueue: {0, 0}})
}

// The handoff's confirm never arrives and its connection dies: the table's
// answer is the one paced requeue (here the consumer's connection died too, so
// the original is unresolved and redelivered), and the report lists the copy
// that exists all the same, explaining the second run and the second copy.
func TestBrokerHandoffLostAfterPublishIsAPossibleCopy(t *testing.T) {
	t.Parallel()
	q, p := behindProxy(t, "maybe-1", hourRetry)
	var runs atomic.Int32
	r, c := prepare(t, q, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error {
		runs.Add(1)
		return runtime.Retryable(errors.New("busy"))
	}, through(p))
	watch := dial(t)
	c.SetTestHooks(runtime.TestHooks{BeforePublish: once(p.freezeReplies), AfterPublish: once(func() {
		// The publish reaches the broker (its copy is in the bucket); its
		// confirm is dropped.
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if ch, err := watch.Channel(); err == nil {
				state, err := ch.QueueDeclarePassive(bucket(q, time.Hour), true, false, false, false, nil)
				_ = ch.Close()
				if err == nil && state.Messages == 1 {
					break
				}
			}
		}
		p.cut()
	})})
	r.launch(c)
	recs := r.await(2)
	rep := r.stop()
	first, again := firstAndAgain(recs[0], recs[1])
	published := slices.ContainsFunc(rep.PossibleCopies, func(c runtime.Record) bool { return c.MessageID == first.MessageID && c.Handoff == "failed" })
	if !published || first.Handoff != "failed" || again.Path != runtime.PathRetried {
		t.Errorf("first %+v\nagain %+v", first, again)
	}
	if len(rep.PossibleCopies) != 1 || rep.PossibleCopies[0].MessageID != "maybe-1" || runs.Load() != 2 {
		t.Errorf("handler runs %d; report: %s", runs.Load(), rep)
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, bucket(q, time.Hour): {2, 0}})
}

// The consumer's channel is lost while a handoff waits to be written (for a
// publish slot, a connection, the end of a resource alarm): the copy is not
// written, for its ACK could never follow and the work would exist twice.
// Nothing more is tried; the original comes back and is handled again.
func TestBrokerHandoffNotWrittenOnceTheAuthorityIsRevoked(t *testing.T) {
	t.Parallel()
	q, p := behindProxy(t, "revoked-1", hourRetry)
	var runs atomic.Int32
	r, c := prepare(t, q, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error {
		if runs.Add(1) > 1 {
			return nil
		}
		return runtime.Retryable(errors.New("busy"))
	}, through(p))
	c.SetTestHooks(runtime.TestHooks{BeforePublish: once(func() {
		p.CutConns(func(name string) bool { return strings.HasSuffix(name, " consume") })
		// A hook cannot fail the test: the records below tell.
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if r.events.has(func(ev event) bool { return ev.stage == "intake-lost" }) {
				break
			}
		}
	})})
	r.launch(c)
	// A redelivery that comes while the first journey still holds the work
	// is deferred, and comes again.
	eventually(t, 2*time.Minute, "the redelivery acked", func() bool {
		return slices.ContainsFunc(r.recorded(), func(rec runtime.Record) bool { return rec.Redelivered && rec.Path == runtime.PathAcked })
	})
	rep := r.stop()
	recs := r.recorded()
	i := slices.IndexFunc(recs, func(rec runtime.Record) bool { return !rec.Redelivered })
	if i < 0 {
		t.Fatalf("no record of the first delivery: %+v", recs)
	}
	if first := recs[i]; first.Handoff != "failed" || first.Path != runtime.PathUnresolved || !strings.Contains(first.Reason, "not written") {
		t.Errorf("first %+v", first)
	}
	if len(rep.PossibleCopies) != 0 || runs.Load() != 2 {
		t.Errorf("handler runs %d; report: %s", runs.Load(), rep)
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, bucket(q, time.Hour): {0, 0}})
}

// A handoff still waiting for its confirm when the consumer closes: the
// report lists the delivery unresolved and its copy as possible, for the copy
// is in the bucket and the original comes back. The close phase closes the
// handoffs' channel, which ends the wait as a failure of a written publish,
// unless the report is sealed first, which finds it still waiting.
func TestBrokerHandoffInFlightAtTheCloseIsAPossibleCopy(t *testing.T) {
	t.Parallel()
	q, p := behindProxy(t, "waiting-1", hourRetry)
	p.Intercept(func(f faults.Frame) faults.Action {
		if f.Dir == faults.ToClient && strings.HasSuffix(f.Conn, " handoff") && f.Is(faults.BasicAck) {
			return faults.Drop // the copy's confirm
		}
		return faults.Forward
	})
	published := make(chan struct{})
	r, c := prepare(t, q, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error {
		return runtime.Retryable(errors.New("busy"))
	}, through(p), func(cfg *runtime.Config) {
		cfg.StepTimeout, cfg.ShutdownGrace, cfg.ForceWindow = 10*time.Second, 200*time.Millisecond, 200*time.Millisecond
	})
	c.SetTestHooks(runtime.TestHooks{AfterPublish: once(func() { close(published) })})
	r.launch(c)
	<-published
	// One copy until the step ends the confirm's wait (10 s): the original
	// is requeued then, handled again, and handed off again.
	awaitReady(t, bucket(q, time.Hour), "the copy in the bucket", 1)
	rep := r.stop()
	if len(rep.Unresolved) != 1 || rep.Unresolved[0].MessageID != "waiting-1" {
		t.Errorf("report: %s", rep)
	}
	if len(rep.PossibleCopies) != 1 || !slices.Contains([]string{"failed", "timed out"}, rep.PossibleCopies[0].Handoff) ||
		rep.PossibleCopies[0].Destination != bucket(q, time.Hour) {
		t.Errorf("possible copies %+v", rep.PossibleCopies)
	}
	assertCounts(t, map[string][2]int{q.Name: {1, 0}, bucket(q, time.Hour): {1, 0}})
}

// A dead-lettering NACK that never reaches the broker, its connection then
// lost: the delivery comes back, so the report lists the first NACK as never
// proven instead of counting the body dead-lettered and done.
func TestBrokerDeadLetterNackLostIsNotCountedDone(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t)
	declareTopology(t, q)
	publish(t, q.Name, produce(t, "big-2", &fixture.OrderPlacedV1{OrderID: "big-2", Padding: new(strings.Repeat("x", 4096))}))
	p := newProxy(t)
	basicNack := faults.Method{Class: 60, ID: 120}
	var dropped atomic.Bool
	p.Intercept(func(f faults.Frame) faults.Action {
		if f.Dir == faults.ToBroker && f.Is(basicNack) && dropped.CompareAndSwap(false, true) {
			return faults.Drop
		}
		return faults.Forward
	})
	r, c := prepare(t, q, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error { return nil },
		through(p))
	c.SetProofInterval(time.Hour)
	r.launch(c)
	r.await(1)
	p.cut()
	recs := r.await(2)
	wantPath(t, recs[0], runtime.PathBrokerDeadLettered)
	wantPath(t, recs[1], runtime.PathBrokerDeadLettered)
	if !recs[1].Redelivered {
		t.Errorf("second record %+v", recs[1])
	}
	eventually(t, 2*time.Minute, "the body in the DLQ", func() bool {
		ready, _ := queueCounts(t, q.Topology.DeadLetterQueue)
		return ready == 1
	})
	rep := r.stop()
	if len(rep.Unresolved) != 1 || rep.Unresolved[0].MessageID != "big-2" ||
		!strings.HasPrefix(rep.Unresolved[0].Reason, "dead-lettering nack sent, never proven") || rep.AcksProven != 0 {
		t.Errorf("report: %s", rep)
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, q.Topology.DeadLetterQueue: {1, 0}})
}

// A handoff still dialling when the consumer stops gives up when the close
// closes its connection, without waiting for the dial: the handoff
// publishes nothing, the report is sealed after it, the original comes
// back, and the report lists it unresolved with no possible copy.
func TestBrokerHandoffDiallingAtTheStopPublishesNothing(t *testing.T) {
	t.Parallel()
	q, p := behindProxy(t, "late-1", hourRetry)
	release := make(chan struct{})
	connectionOpen := faults.Method{Class: 10, ID: 40}
	p.Intercept(func(f faults.Frame) faults.Action {
		if f.Dir == faults.ToBroker && strings.HasSuffix(f.Conn, " handoff") && f.Is(connectionOpen) {
			<-release // the handoff's dial waits here
		}
		return faults.Forward
	})
	r, c := prepare(t, q, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error {
		return runtime.Retryable(errors.New("busy"))
	}, through(p), func(cfg *runtime.Config) {
		// The held dial's step must carry its detection, the stop and the
		// look for the sealed report on a loaded machine, and stay under the
		// broker's own handshake_timeout (10 s), which would end the held
		// dial first: amqp091 reads that as a 403 for the vhost.
		cfg.StepTimeout, cfg.ShutdownGrace, cfg.ForceWindow = 8*time.Second, 100*time.Millisecond, 100*time.Millisecond
	})
	r.launch(c)
	eventually(t, 2*time.Minute, "the handoff dialling", func() bool {
		return slices.ContainsFunc(p.Conns(), func(n string) bool { return strings.HasSuffix(n, " handoff") })
	})
	stopped := make(chan *runtime.Report, 1)
	go func() { stopped <- r.stop() }()
	eventually(t, 2*time.Minute, "the report sealed", func() bool {
		return r.events.has(func(ev event) bool { return ev.stage == "shutdown-phase" && ev.detail == "close: ended" })
	})
	close(release)
	rep := <-stopped
	if len(rep.Unresolved) != 1 || rep.Unresolved[0].MessageID != "late-1" || len(rep.PossibleCopies) != 0 {
		t.Errorf("report: %s", rep)
	}
	if !r.events.has(func(ev event) bool {
		return ev.stage == "handoff" && ev.handoff == "failed" && strings.HasSuffix(ev.detail, "the publisher has closed")
	}) {
		t.Errorf("the handoff did not give up before the report was sealed: %v", r.events.all())
	}
	assertCounts(t, map[string][2]int{q.Name: {1, 0}, bucket(q, time.Hour): {0, 0}})
}

// Run waits for the handoffs' close, begun beside the session's at the
// stop, however long the broker takes to answer it within the step (a
// resource alarm keeps it from reading the close): their own connection's
// close, or the handoff channel's on a Config.Publisher's connection. Once
// Run returns, the handoffs' own connection is gone.
func TestBrokerRunWaitsForTheHandoffsClose(t *testing.T) {
	t.Parallel()
	t.Run("own connection", func(t *testing.T) {
		t.Parallel()
		runWaitsForTheHandoffsClose(t, false)
	})
	t.Run("publisher's connection", func(t *testing.T) {
		t.Parallel()
		runWaitsForTheHandoffsClose(t, true)
	})
}

// runWaitsForTheHandoffsClose dead-letters one message, holds back the
// handoffs' close at the proxy as the consumer stops, and checks that Run
// has not returned until the broker received it.
func runWaitsForTheHandoffsClose(t *testing.T, shared bool) {
	q, p := behindProxy(t, "dead-1")
	conn, closing := " handoff", faults.ConnectionClose
	tweaks := []func(*runtime.Config){through(p), func(cfg *runtime.Config) {
		// A step far longer than the test's waits: only the broker's
		// answer may end the close held back.
		cfg.StepTimeout, cfg.ShutdownGrace, cfg.ForceWindow = 5*time.Minute, 100*time.Millisecond, 100*time.Millisecond
	}}
	if shared {
		pub := newPublisher(t, p.url(), 8)
		tweaks = append(tweaks, func(cfg *runtime.Config) { cfg.Publisher = pub })
		conn, closing = " publish", faults.ChannelClose
	}
	r := start(t, q, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error {
		return runtime.Permanent(errors.New("bad"))
	}, tweaks...)
	wantPath(t, r.await(1)[0], runtime.PathDeadLettered)
	held, release := make(chan struct{}), make(chan struct{})
	free := sync.OnceFunc(func() { close(release) })
	t.Cleanup(free)
	var once sync.Once
	p.Intercept(func(f faults.Frame) faults.Action {
		if f.Dir == faults.ToBroker && strings.HasSuffix(f.Conn, conn) && f.Is(closing) {
			once.Do(func() {
				close(held)
				<-release
			})
		}
		return faults.Forward
	})
	stopped := make(chan *runtime.Report, 1)
	go func() { stopped <- r.stop() }()
	select {
	case <-held:
	case <-time.After(2 * time.Minute):
		t.Fatal("the handoffs' close never reached the proxy")
	}
	// A Run that does not wait for the close returns at once.
	select {
	case <-r.done:
		t.Error("Run returned while the handoffs' close waited for the broker")
	case <-time.After(time.Second):
	}
	free()
	if rep := <-stopped; len(rep.Unresolved) != 0 || rep.Abandoned != 0 {
		t.Errorf("report: %s", rep)
	}
	if !shared {
		eventually(t, 2*time.Minute, "the handoff connection gone", func() bool {
			return !slices.ContainsFunc(p.Conns(), func(n string) bool { return strings.HasSuffix(n, " handoff") })
		})
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, q.Topology.DeadLetterQueue: {1, 0}})
}

// The original's handoff is still waiting for its confirm when its channel is
// lost and the broker redelivers it: the redelivery waits (a paced requeue)
// until the original's journey has kept its confirmed copy, and is then
// settled from the record; the handler runs once, and one copy exists.
func TestBrokerRedeliveryDuringAHandoffWaitsForItsEnd(t *testing.T) {
	t.Parallel()
	redeliveredDuringTheHandoff(t, func(context.Context) error { return runtime.Retryable(errors.New("busy")) }, nil)
}

// The same when the handler was abandoned at its timeout and has returned
// since: its return alone does not free the work while the handoff waits.
func TestBrokerRedeliveryDuringTheHandoffOfAnAbandonedHandlerWaits(t *testing.T) {
	t.Parallel()
	returned := make(chan struct{})
	redeliveredDuringTheHandoff(t, func(context.Context) error {
		defer close(returned)
		time.Sleep(600 * time.Millisecond) // past the timeout, ignoring ctx
		return nil
	}, returned, func(q *runtime.QueueSpec) { q.HandlerTimeout = 300 * time.Millisecond })
}

// redeliveredDuringTheHandoff runs one message through handle (which fails,
// or is abandoned), holds its handoff's confirm, cuts the consume connection
// once the copy is written (and returned, when not nil, is closed), and
// wants a single handler run and a single copy.
func redeliveredDuringTheHandoff(t *testing.T, handle func(context.Context) error, returned chan struct{}, tweaks ...func(*runtime.QueueSpec)) {
	q, p := behindProxy(t, "wait-1", append(tweaks, hourRetry)...)
	confirm := make(chan struct{})
	p.Intercept(func(f faults.Frame) faults.Action {
		if f.Dir == faults.ToClient && strings.HasSuffix(f.Conn, " handoff") && f.Is(faults.BasicAck) {
			<-confirm // held until the redelivery has come
		}
		return faults.Forward
	})
	var runs atomic.Int32
	r, c := prepare(t, q, func(ctx context.Context, _ *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
		if runs.Add(1) > 1 {
			return nil
		}
		return handle(ctx)
	}, through(p), func(cfg *runtime.Config) { cfg.StepTimeout = 10 * time.Second })
	c.SetTestHooks(runtime.TestHooks{AfterPublish: once(func() {
		if returned != nil {
			<-returned
		}
		p.CutConns(func(name string) bool { return strings.HasSuffix(name, " consume") })
	})})
	r.launch(c)
	eventually(t, 2*time.Minute, "the redelivery deferred behind the running work", func() bool {
		return slices.ContainsFunc(r.recorded(), func(rec runtime.Record) bool { return rec.Redelivered && rec.Path == runtime.PathRequeued })
	})
	close(confirm)
	eventually(t, 2*time.Minute, "the redelivery settled from the record", func() bool {
		return slices.ContainsFunc(r.recorded(), func(rec runtime.Record) bool {
			return (rec.Handler == "completed earlier") && rec.Path == runtime.PathAcked
		})
	})
	r.stop()
	if runs.Load() != 1 {
		t.Errorf("handler ran %d times", runs.Load())
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, bucket(q, time.Hour): {1, 0}})
}
