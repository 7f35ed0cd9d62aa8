package runtime_test

import (
	"context"
	"errors"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lily-mq/lily/internal/faults"
	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/runtime/internal/fixture"
	"github.com/lily-mq/lily/runtime/internal/settle"
)

// Broker tests for a consumer's intake ending on a healthy channel: the
// broker cancels the consumer, or a delivery outlives its budget. The
// consumer consumes again on a new channel, and what was in flight on the old
// one settles there before it closes.

// calls counts a handler's calls per order id.
type calls struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *calls) add(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[id]++
}

// once fails the test unless each of ids was handled exactly once, and
// nothing else was.
func (c *calls) once(t *testing.T, ids ...string) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		if c.n[id] != 1 {
			t.Errorf("%s handled %d times", id, c.n[id])
		}
	}
	if len(c.n) != len(ids) {
		t.Errorf("handled %v, want %v", c.n, ids)
	}
}

// holding is a handler that counts its calls and holds the delivery of id
// until release is closed; started is closed when that delivery's handler
// starts.
func (c *calls) holding(id string) (h handler, started, release chan struct{}) {
	started, release = make(chan struct{}), make(chan struct{})
	return func(_ context.Context, msg *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
		c.add(msg.OrderID)
		if msg.OrderID == id {
			close(started)
			<-release
		}
		return nil
	}, started, release
}

// The queue is deleted under the consumer: the broker cancels it. The
// consumer declares its topology again and consumes within seconds; the
// delivery in flight when the queue went settles on the old channel.
func TestBrokerQueueDeletedUnderTheConsumerIsDeclaredAgain(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, heldHandler)
	var handled calls
	h, started, release := handled.holding("in-flight")
	c := start(t, q, h)
	awaitConsumer(t, q.Name)
	publish(t, q.Name, order(t, "in-flight"))
	<-started
	if _, err := channel(t, dial(t)).QueueDelete(q.Name, false, false, false); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "a consumer on the queue declared again", func() bool { return c.reconnects() == 1 })
	awaitConsumer(t, q.Name)
	publish(t, q.Name, order(t, "after"))
	close(release)
	for _, rec := range c.await(2) {
		wantPath(t, rec, runtime.PathAcked)
	}
	rep := c.stop()
	if len(rep.Lost) != 1 || !strings.Contains(rep.Lost[0], "cancelled") || len(rep.Unresolved) != 0 || rep.AcksProven != 2 {
		t.Errorf("report %s; lost %q", rep, rep.Lost)
	}
	handled.once(t, "in-flight", "after")
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, q.Topology.DeadLetterQueue: {0, 0}})
}

// A consumer timeout as RabbitMQ 4.3 answers it on a quorum queue, emulated
// by the frame proxy: a basic.cancel the broker never knew of. The consumer
// subscribes again on a new connection; the delivery in flight settles on the
// old channel; what the broker still sent the cancelled consumer (the client
// drops it) comes back when the old channel closes. Each message is handled
// once and acked.
func TestBrokerTimeoutCancelIsNotTheEnd(t *testing.T) {
	t.Parallel()
	q, p := behindProxy(t, "in-flight", heldHandler, func(q *runtime.QueueSpec) { q.Topology.Type = "quorum" })
	var handled calls
	h, started, release := handled.holding("in-flight")
	c := start(t, q, h, through(p))
	<-started
	if n := p.CancelConsumers(func(name string) bool { return name == faults.ConnectionName(q.Name, "consume") }); n != 1 {
		t.Fatalf("cancelled %d consumers, want 1", n)
	}
	eventually(t, 2*time.Minute, "a new session", func() bool { return c.reconnects() == 1 })
	ids := []string{"in-flight"}
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		publish(t, q.Name, order(t, id))
		ids = append(ids, id)
	}
	close(release)
	for _, rec := range c.await(len(ids)) {
		wantPath(t, rec, runtime.PathAcked)
	}
	rep := c.stop()
	if len(rep.Unresolved) != 0 || !strings.Contains(strings.Join(rep.Lost, "\n"), "cancelled") {
		t.Errorf("report %s; lost %q", rep, rep.Lost)
	}
	handled.once(t, ids...)
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, q.Topology.DeadLetterQueue: {0, 0}})
}

// A delivery left unresolved on a healthy channel (its ACK came after its
// budget, so it was never written) is released by Lily's own bound: a budget
// and a step after its receipt the consumer is cancelled, the deliveries in
// flight on the channel settle, the channel closes, and the broker hands the
// delivery to the new channel, where the record of its completed work settles
// it. No other delivery is left unresolved by the recycle.
func TestBrokerRecycleReleasesAnUnresolvedDelivery(t *testing.T) {
	t.Parallel()
	// A step that carries the first connection on a loaded machine, and a
	// budget that carries the handler and its steps, with room to spare.
	// The budget also spaces the timers: the in-flight deliveries come half
	// a budget after the stuck one, so that they are on the channel 12 s
	// before its recycle (a budget and a step after the stuck one's
	// receipt), and their budgets end 8 s after it.
	const step = 2 * time.Second
	q := brokerSpec(t, func(q *runtime.QueueSpec) {
		q.HandlerTimeout = time.Second // the handlers, which must succeed, return at once
		q.SettlementBudget = 20 * time.Second
		q.Concurrency, q.Prefetch = 4, 8
	})
	declareTopology(t, q)
	var handled calls
	r, consumer := prepare(t, q, func(_ context.Context, msg *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
		handled.add(msg.OrderID)
		return nil
	}, func(cfg *runtime.Config) { cfg.StepTimeout = step })
	gate := stuckFirst(t, q, r, consumer, &handled)
	time.Sleep(q.SettlementBudget / 2) // the others' budgets end well after the recycle
	publish(t, q.Name, order(t, "in-flight-1"), order(t, "in-flight-2"))
	eventually(t, 2*time.Minute, "the channel recycled", func() bool {
		return r.events.has(func(ev event) bool { return ev.stage == "intake-lost" && strings.Contains(ev.detail, "recycled") })
	})
	close(gate)
	paths := map[string][]runtime.Path{}
	for _, rec := range r.await(4) {
		paths[rec.MessageID] = append(paths[rec.MessageID], rec.Path)
		if rec.MessageID == "stuck" && rec.Path == runtime.PathAcked && rec.Handler != "completed earlier" {
			t.Errorf("the released delivery ran its handler again: %+v", rec)
		}
	}
	want := map[string][]runtime.Path{
		"stuck":       {runtime.PathUnresolved, runtime.PathAcked},
		"in-flight-1": {runtime.PathAcked},
		"in-flight-2": {runtime.PathAcked},
	}
	for id, p := range want {
		if strings.Join(pathWords(paths[id]), ",") != strings.Join(pathWords(p), ",") {
			t.Errorf("%s took %v, want %v", id, paths[id], p)
		}
	}
	rep := r.stop()
	if len(rep.Unresolved) != 1 || rep.Unresolved[0].MessageID != "stuck" || !strings.Contains(rep.Unresolved[0].Reason, "budget was spent") {
		t.Errorf("report %s; unresolved %+v", rep, rep.Unresolved)
	}
	if r.reconnects() != 1 {
		t.Errorf("%d new sessions, want the one after the recycle", r.reconnects())
	}
	handled.once(t, "stuck", "in-flight-1", "in-flight-2")
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, q.Topology.DeadLetterQueue: {0, 0}})
}

// A recycle whose cancel fails (its cancel-ok held back past the step, as a
// quorum queue just after a leader change may be slow to answer) still
// retires the session: the deliveries in flight on the healthy channel
// settle there with evidence, not left unresolved as on a lost channel,
// and the report's line says both why the channel was recycled and that
// its cancel failed.
func TestBrokerRecycleWhoseCancelFailsStillRetires(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, func(q *runtime.QueueSpec) {
		q.HandlerTimeout = time.Second // the handlers, which must succeed, return at once
		q.SettlementBudget = 20 * time.Second
		q.Concurrency, q.Prefetch = 4, 8
	})
	declareTopology(t, q)
	// A step that carries the first connection on a loaded machine; the
	// cancel-ok comes a second after it.
	const step, late = 2 * time.Second, 3 * time.Second
	p := lateCancelOk(t, late)
	var handled calls
	r, consumer := prepare(t, q, func(_ context.Context, msg *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
		handled.add(msg.OrderID)
		return nil
	}, through(p), func(cfg *runtime.Config) { cfg.StepTimeout = step })
	gate := stuckFirst(t, q, r, consumer, &handled)
	// Late enough that their budgets outlast the recycle (a step after the
	// stuck delivery's budget), its failed cancel (a step) and the wait
	// below (late and a step) by 7 s; early enough to be on the channel 6 s
	// before the recycle.
	time.Sleep(q.SettlementBudget - 4*time.Second)
	publish(t, q.Name, order(t, "in-flight-1"), order(t, "in-flight-2"))
	eventually(t, 2*time.Minute, "the channel recycled", func() bool {
		return r.events.has(func(ev event) bool { return ev.stage == "intake-lost" && strings.Contains(ev.detail, "recycle") })
	})
	// The late cancel-ok through (the proxy held every frame to the client
	// meanwhile), the deliveries in flight settle, and the channel closes.
	time.Sleep(late + step)
	close(gate)
	paths := map[string][]runtime.Path{}
	for _, rec := range r.await(4) {
		paths[rec.MessageID] = append(paths[rec.MessageID], rec.Path)
	}
	for id, want := range map[string][]runtime.Path{
		"stuck":       {runtime.PathUnresolved, runtime.PathAcked},
		"in-flight-1": {runtime.PathAcked},
		"in-flight-2": {runtime.PathAcked},
	} {
		if !slices.Equal(paths[id], want) {
			t.Errorf("%s took %v, want %v", id, paths[id], want)
		}
	}
	// Only the stuck delivery is unresolved (its redelivery's ACK, on the
	// new session, may be too, when the proxy held its proof's reply).
	rep := r.stop()
	if slices.ContainsFunc(rep.Unresolved, func(u runtime.Record) bool { return u.MessageID != "stuck" }) {
		t.Errorf("report %s; unresolved %+v", rep, rep.Unresolved)
	}
	if !slices.ContainsFunc(rep.Lost, func(why string) bool {
		return strings.Contains(why, "outlived its settlement budget") && strings.Contains(why, "its cancel failed")
	}) {
		t.Errorf("lost %q: no line with why the channel was recycled and that its cancel failed", rep.Lost)
	}
	handled.once(t, "stuck", "in-flight-1", "in-flight-2")
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, q.Topology.DeadLetterQueue: {0, 0}})
}

// A stop whose cancel fails (its cancel-ok held back past the step) leaves
// what the client had buffered, and the delivery waiting for a slot,
// unacknowledged on the healthy channel until it closes, not requeued: the
// report lists each of them, and every message not acked is back on the
// queue after the run.
func TestBrokerStopWhoseCancelFailsListsWhatWasNotStarted(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, heldHandler, func(q *runtime.QueueSpec) { q.Concurrency, q.Prefetch = 1, 4 })
	declareTopology(t, q)
	ids := []string{"a", "b", "c", "d"}
	for _, id := range ids {
		publish(t, q.Name, order(t, id))
	}
	// A step that carries the first connection on a loaded machine; the
	// cancel-ok comes a second after it.
	const step, late = 2 * time.Second, 3 * time.Second
	p := lateCancelOk(t, late)
	var handled calls
	h, started, release := handled.holding("a")
	r := start(t, q, h, through(p), func(cfg *runtime.Config) { cfg.StepTimeout, cfg.ShutdownGrace = step, time.Minute })
	<-started
	eventually(t, 2*time.Minute, "all four on the consumer", func() bool { _, unacked := queueCounts(t, q.Name); return unacked == 4 })
	stopped := make(chan *runtime.Report, 1)
	go func() { stopped <- r.stop() }()
	eventually(t, 2*time.Minute, "stop intake ended", func() bool { return r.events.has(phase("stop intake: ended")) })
	close(release)
	rep := <-stopped
	paths := map[string]runtime.Path{}
	for _, rec := range r.recorded() {
		paths[rec.MessageID] = rec.Path
	}
	if paths["a"] != runtime.PathAcked {
		t.Errorf("a took %q, want acked", paths["a"])
	}
	// b waited for a slot; c and d were buffered by the client. None is
	// NACKed while the consumer may still be registered.
	for _, id := range []string{"b", "c", "d"} {
		if !slices.ContainsFunc(rep.Unresolved, func(u runtime.Record) bool {
			return u.MessageID == id && strings.Contains(u.Reason, "cancel failed")
		}) {
			t.Errorf("%s took %q, not listed unresolved with the failed cancel; report %s, unresolved %+v", id, paths[id], rep, rep.Unresolved)
		}
	}
	total := 0
	for _, n := range rep.Counts {
		total += n
	}
	if total != len(ids) {
		t.Errorf("report counts %d deliveries, want %d: %s", total, len(ids), rep)
	}
	handled.once(t, "a")
	assertCounts(t, map[string][2]int{q.Name: {3, 0}, q.Topology.DeadLetterQueue: {0, 0}})
}

// A stop whose basic.cancel never reaches the broker leaves the consumer
// registered: what the broker sends it after stop intake, as its ACKs make
// room, is listed before the channel closes, and back on the queue after.
func TestBrokerStopWhoseCancelIsLostListsWhatCameAfter(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, heldHandler, func(q *runtime.QueueSpec) { q.Concurrency, q.Prefetch = 2, 2 })
	declareTopology(t, q)
	publish(t, q.Name, order(t, "a"), order(t, "x"))
	p := cancelLost(t)
	var handled calls
	startedA, startedX := make(chan struct{}), make(chan struct{})
	releaseA, releaseX := make(chan struct{}), make(chan struct{})
	r := start(t, q, func(_ context.Context, msg *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
		handled.add(msg.OrderID)
		switch msg.OrderID {
		case "a":
			close(startedA)
			<-releaseA
		case "x":
			close(startedX)
			<-releaseX
		}
		return nil
	}, through(p), func(cfg *runtime.Config) { cfg.StepTimeout, cfg.ShutdownGrace = 2*time.Second, time.Minute })
	<-startedA
	<-startedX
	stopped := make(chan *runtime.Report, 1)
	go func() { stopped <- r.stop() }()
	eventually(t, 2*time.Minute, "stop intake ended", func() bool { return r.events.has(phase("stop intake: ended")) })
	publish(t, q.Name, order(t, "e"))
	close(releaseA)
	eventually(t, 2*time.Minute, "e sent to the consumer", func() bool {
		ready, unacked := queueCounts(t, q.Name)
		return ready == 0 && unacked == 2
	})
	close(releaseX)
	rep := <-stopped
	if !slices.ContainsFunc(rep.Unresolved, func(u runtime.Record) bool {
		return u.MessageID == "e" && strings.Contains(u.Reason, "cancel failed")
	}) {
		t.Errorf("e, sent after stop intake, is not listed unresolved with the failed cancel; report %s, unresolved %+v", rep, rep.Unresolved)
	}
	handled.once(t, "a", "x")
	assertCounts(t, map[string][2]int{q.Name: {1, 0}, q.Topology.DeadLetterQueue: {0, 0}})
}

// A stop whose basic.cancel never reaches the broker: the channel's close
// waits its whole step behind the cancel, which holds the channel's methods
// waiting for its answer, and the consumer stays registered meanwhile. What
// the broker sends it then, as its ACKs make room, is listed too, and back
// on the queue after. Before, all that came during the close's step was in
// no line of the report (measured with a producer publishing throughout: 560
// of 1,607 deliveries).
func TestBrokerStopWhoseCancelIsLostListsWhatCameWhileClosing(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, heldHandler, func(q *runtime.QueueSpec) { q.Concurrency, q.Prefetch = 2, 2 })
	declareTopology(t, q)
	publish(t, q.Name, order(t, "a"), order(t, "x"))
	p := cancelLost(t)
	started := make(chan struct{}, 2)
	release := make(chan struct{})
	r := start(t, q, func(_ context.Context, _ *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
		started <- struct{}{}
		<-release
		return nil
	}, through(p), func(cfg *runtime.Config) { cfg.StepTimeout, cfg.ShutdownGrace = 10*time.Second, time.Minute })
	<-started
	<-started
	stopped := make(chan *runtime.Report, 1)
	go func() { stopped <- r.stop() }()
	eventually(t, 2*time.Minute, "stop intake ended", func() bool { return r.events.has(phase("stop intake: ended")) })
	// a and x are ACKed, which makes room for two: the close begins, and
	// waits its step (10 s, room for the publish and the deliveries on a
	// loaded machine) behind the cancel.
	close(release)
	eventually(t, 2*time.Minute, "the close began", func() bool { return r.events.has(phase("final abort: ended")) })
	publish(t, q.Name, order(t, "late-1"), order(t, "late-2"))
	rep := <-stopped
	for _, id := range []string{"late-1", "late-2"} {
		if !slices.ContainsFunc(rep.Unresolved, func(u runtime.Record) bool {
			return u.MessageID == id && strings.Contains(u.Reason, "cancel failed")
		}) {
			t.Errorf("%s, sent while the channel closed, is not listed unresolved with the failed cancel; report %s, unresolved %+v", id, rep, rep.Unresolved)
		}
	}
	assertCounts(t, map[string][2]int{q.Name: {2, 0}, q.Topology.DeadLetterQueue: {0, 0}})
}

// cancelLost is a proxy that drops every basic.cancel on its way to the
// broker: a stop's cancel never answered, the consumer still registered.
func cancelLost(t *testing.T) *proxy {
	p := newProxy(t)
	p.Intercept(func(f faults.Frame) faults.Action {
		if f.Dir == faults.ToBroker && f.Is(faults.BasicCancel) {
			return faults.Drop
		}
		return faults.Forward
	})
	return p
}

// wedgedNacks is an acker whose NACK writes do not return until until is
// closed, and then write nothing: a socket write stuck on a broker that
// reads nothing.
type wedgedNacks struct {
	settle.Acker
	until chan struct{}
}

func (a wedgedNacks) Nack(uint64, bool, bool) error {
	<-a.until
	return errors.New("the write never returned")
}

// Stop intake's requeues share one step: behind a NACK write that does not
// return, the first waits it out and the rest are listed unresolved at
// once, not requeued one step each. Every message is back on the queue
// after the run.
func TestBrokerStopRequeuesBehindAWedgedWriteShareAStep(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, heldHandler, func(q *runtime.QueueSpec) { q.Concurrency, q.Prefetch = 1, 4 })
	declareTopology(t, q)
	publish(t, q.Name, order(t, "a"), order(t, "b"), order(t, "c"), order(t, "d"))
	var handled calls
	h, started, release := handled.holding("a")
	r, consumer := prepare(t, q, h, func(cfg *runtime.Config) { cfg.StepTimeout, cfg.ShutdownGrace = 2*time.Second, time.Minute })
	wedged := make(chan struct{})
	t.Cleanup(func() { close(wedged) })
	consumer.WrapAcker(func(a settle.Acker) settle.Acker { return wedgedNacks{Acker: a, until: wedged} })
	r.launch(consumer)
	<-started
	eventually(t, 2*time.Minute, "all four on the consumer", func() bool { _, unacked := queueCounts(t, q.Name); return unacked == 4 })
	stopped := make(chan *runtime.Report, 1)
	go func() { stopped <- r.stop() }()
	eventually(t, 2*time.Minute, "stop intake ended", func() bool { return r.events.has(phase("stop intake: ended")) })
	close(release)
	rep := <-stopped
	reasons := map[string]string{}
	for _, u := range rep.Unresolved {
		reasons[u.MessageID] = u.Reason
	}
	// b, the slot's waiter, is requeued first: its NACK is the one that
	// does not return.
	if _, ok := reasons["b"]; !ok {
		t.Errorf("b, whose NACK did not return, is not unresolved; report %s", rep)
	}
	for _, id := range []string{"c", "d"} {
		if !strings.Contains(reasons[id], "not requeued: the requeues before it spent their step") {
			t.Errorf("%s: %q, want it not requeued behind the write that did not return; report %s", id, reasons[id], rep)
		}
	}
	handled.once(t, "a")
	assertCounts(t, map[string][2]int{q.Name: {4, 0}, q.Topology.DeadLetterQueue: {0, 0}})
}

// stuckFirst launches consumer with its ACKs held: the first (the stuck
// delivery's) waits past the delivery's budget, so it is not written; the
// ACKs after it wait for the returned gate to close, so that their
// deliveries are in flight on the channel when the recycle comes. It
// publishes "stuck" and returns once its handler ran.
func stuckFirst(t *testing.T, q runtime.QueueSpec, r *running, consumer *runtime.Consumer, handled *calls) (gate chan struct{}) {
	t.Helper()
	gate = make(chan struct{})
	var later atomic.Bool
	consumer.SetTestHooks(runtime.TestHooks{BeforeAck: func() {
		if later.Swap(true) {
			<-gate
			return
		}
		time.Sleep(q.SettlementBudget)
	}})
	r.launch(consumer)
	publish(t, q.Name, order(t, "stuck"))
	eventually(t, 2*time.Minute, "the stuck delivery handled", func() bool {
		handled.mu.Lock()
		defer handled.mu.Unlock()
		return handled.n["stuck"] == 1
	})
	return gate
}

func pathWords(ps []runtime.Path) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = string(p)
	}
	return out
}

// On a quorum queue the consumer asks for a consumer timeout of twice the
// moment it would recycle its channel itself (the budget and a step), and at
// least a minute, so that the broker's acts only where Lily's did not. A
// classic queue's consumer asks for none: RabbitMQ 4.3 refuses the argument
// there.
func TestBrokerQuorumConsumerAsksForAConsumerTimeout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ queueType, want string }{
		{"quorum", `[{"x-consumer-timeout",130000}]`}, // handler timeout 30 s + 30 s, step 5 s
		{"classic", `[]`},
	} {
		t.Run(tc.queueType, func(t *testing.T) {
			t.Parallel()
			q := brokerSpec(t, func(q *runtime.QueueSpec) {
				q.Topology.Type, q.HandlerTimeout, q.SettlementBudget = tc.queueType, 30*time.Second, 0
			})
			start(t, q, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error { return nil })
			awaitConsumer(t, q.Name)
			out, err := exec.Command("rabbitmqctl", "list_consumers", "-q", "--no-table-headers", "queue_name", "arguments").Output()
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for line := range strings.Lines(string(out)) {
				if name, args, _ := strings.Cut(strings.TrimSpace(line), "\t"); name == q.Name {
					found = true
					if args != tc.want {
						t.Errorf("consumer arguments %s, want %s", args, tc.want)
					}
				}
			}
			if !found {
				t.Errorf("no consumer of %s in %s", q.Name, out)
			}
		})
	}
}

// losesFirstAck keeps the first ACK of a consumer from the broker and says
// it was written: what a quorum queue does with an ACK its leader loses
// before committing it.
type losesFirstAck struct {
	settle.Acker
	lost *atomic.Bool
}

func (a losesFirstAck) Ack(tag uint64, multiple bool) error {
	if a.lost.CompareAndSwap(false, true) {
		return nil
	}
	return a.Acker.Ack(tag, multiple)
}

// A quorum queue that lost an ACK holds its message checked out to the
// consumer; with the prefetch full of such, it feeds the channel nothing
// though messages are ready, and nothing on the channel says so. The
// consumer sees its channel idle with room while the queue holds ready
// messages, recycles it, and the orphan comes back, redelivered, with the
// message behind it. Once the queue is empty, an idle channel is left alone.
func TestBrokerStarvedQuorumChannelIsRecycled(t *testing.T) {
	t.Parallel()
	const starveAfter = 2 * time.Second
	q := brokerSpec(t, func(q *runtime.QueueSpec) {
		q.Topology.Type = "quorum"
		q.Concurrency, q.Prefetch = 1, 1
	})
	declareTopology(t, q)
	var handled calls
	r, consumer := prepare(t, q, func(_ context.Context, msg *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
		handled.add(msg.OrderID)
		return nil
	})
	consumer.SetStarveAfter(starveAfter)
	var lost atomic.Bool
	consumer.WrapAcker(func(a settle.Acker) settle.Acker { return losesFirstAck{Acker: a, lost: &lost} })
	r.launch(consumer)
	publish(t, q.Name, order(t, "orphan"), order(t, "behind"))
	starved := func(ev event) bool {
		return ev.stage == "intake-lost" && strings.Contains(ev.detail, "1 ready, none delivered")
	}
	eventually(t, time.Minute, "the starved channel recycled", func() bool { return r.events.has(starved) })
	recs := r.await(3)
	var redelivered bool
	for _, rec := range recs {
		wantPath(t, rec, runtime.PathAcked)
		redelivered = redelivered || rec.MessageID == "orphan" && rec.Redelivered
	}
	if !redelivered {
		t.Errorf("the orphan did not come back redelivered: %+v", recs)
	}
	handled.mu.Lock()
	if handled.n["orphan"] != 2 || handled.n["behind"] != 1 {
		t.Errorf("handled %v, want the orphan twice and the one behind it once", handled.n)
	}
	handled.mu.Unlock()
	assertCounts(t, map[string][2]int{q.Name: {0, 0}})
	time.Sleep(2 * starveAfter) // idle, with room, and nothing ready: no recycle
	rep := r.stop()
	n := 0
	for _, ev := range r.events.all() {
		if starved(ev) {
			n++
		}
	}
	if n != 1 || r.reconnects() != 1 || !slices.ContainsFunc(rep.Lost, func(l string) bool { return strings.Contains(l, "1 ready, none delivered") }) {
		t.Errorf("%d starvation recycles, %d new sessions, want 1 and 1; report: %s", n, r.reconnects(), rep)
	}
}

// The question a quorum queue's idle channel asks of the queue (is it
// starving the channel?) ends with the session: its answer held back, the
// consumer stops, and no goroutine still waits for it once Run returned,
// though the connection it asked on lives on, shared with another
// consumer of the same Publisher.
func TestBrokerStarvationQuestionEndsWithTheSession(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, func(q *runtime.QueueSpec) { q.Topology.Type = "quorum" })
	other := brokerSpec(t)
	declareTopology(t, q)
	declareTopology(t, other)
	p := newProxy(t)
	pub := newPublisher(t, p.url(), 8)
	// A step far longer than the test's waits: only the session's end may
	// end the question held back.
	shared := func(cfg *runtime.Config) { cfg.Publisher, cfg.StepTimeout = pub, 5*time.Minute }
	r, consumer := prepare(t, q, ack, shared)
	consumer.SetStarveAfter(200 * time.Millisecond)
	r.launch(consumer)
	r2, beside := prepare(t, other, ack, shared)
	r2.launch(beside)
	eventually(t, time.Minute, "connected", func() bool { return consumer.Health().Ready && beside.Health().Ready })
	declareOk := faults.Method{Class: 50, ID: 11}
	var held atomic.Bool
	p.Intercept(func(f faults.Frame) faults.Action {
		if f.Dir == faults.ToClient && f.Is(declareOk) {
			held.Store(true)
			return faults.Drop
		}
		return faults.Forward
	})
	// The goroutines are counted across the test binary, where other
	// consumers' questions come and go: this one's answer was held back,
	// and once Run returned, a moment comes when no question waits.
	eventually(t, time.Minute, "the queue asked", func() bool { return held.Load() && stacksHold("(*Consumer).starved(") > 0 })
	rep := r.stop()
	eventually(t, 2*time.Minute, "no question of the queue waiting after Run returned", func() bool { return stacksHold("(*Consumer).starved(") == 0 })
	if len(rep.Unresolved) != 0 {
		t.Errorf("report: %s", rep)
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, other.Name: {0, 0}})
}

// A quorum queue's channel kept busy past the starvation bound by a slow
// handler, every slot taken and messages ready, is not starved: intake waits
// for a slot, and the client buffers what the broker sent. Nothing is
// recycled.
func TestBrokerBusyQuorumChannelIsNotStarved(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, heldHandler, func(q *runtime.QueueSpec) {
		q.Topology.Type = "quorum"
		q.Concurrency, q.Prefetch = 1, 3
	})
	declareTopology(t, q)
	r, consumer := prepare(t, q, func(_ context.Context, msg *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
		if msg.OrderID == "slow" {
			time.Sleep(4 * time.Second)
		}
		return nil
	})
	consumer.SetStarveAfter(time.Second)
	r.launch(consumer)
	publish(t, q.Name, order(t, "slow"), order(t, "a"), order(t, "b"), order(t, "c"))
	for _, rec := range r.await(4) {
		wantPath(t, rec, runtime.PathAcked)
	}
	if rep := r.stop(); len(rep.Lost) != 0 || r.reconnects() != 0 {
		t.Errorf("a busy channel was recycled: %s", rep)
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}})
}

// An ordered queue's deliveries waiting for a slot when the broker cancels
// the consumer wait on the retired session, whose intake has ended, as they
// would on the consuming one: a budget and a step after their wait began,
// every slot still held (by x-0's handler, which ignores its context), they
// are requeued not started, in their lane's order, and run once the slot
// frees. None starts with its budget spent, to be left unresolved.
func TestBrokerOrderedWaitersOfACancelledSessionAreRecycled(t *testing.T) {
	t.Parallel()
	q, p := behindProxy(t, "warm", hourRetry, func(q *runtime.QueueSpec) {
		q.OrderKey = byTenant
		q.Concurrency, q.Prefetch = 1, 10
		q.HandlerTimeout, q.SettlementBudget = time.Second, 7*time.Second
	})
	running, release := make(chan struct{}), make(chan struct{})
	var first sync.Once
	r, c := prepare(t, q, func(_ context.Context, msg *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
		if msg.OrderID == "x-0" {
			first.Do(func() {
				close(running)
				<-release // past its timeout: it holds the one slot
			})
		}
		return nil
	}, through(p), func(cfg *runtime.Config) { cfg.StepTimeout = time.Second })
	var inLanes atomic.Int32
	c.SetTestHooks(runtime.TestHooks{EnteredLane: func() { inLanes.Add(1) }})
	r.launch(c)
	r.await(1) // warm
	publishKeyed(t, q.Name, []string{"x"}, 1)
	<-running
	publishKeyed(t, q.Name, []string{"y"}, 2)
	eventually(t, 2*time.Minute, "every delivery in its lane", func() bool { return inLanes.Load() == 4 })
	if n := p.CancelConsumers(func(name string) bool { return name == faults.ConnectionName(q.Name, "consume") }); n != 1 {
		t.Fatalf("cancelled %d consumers, want 1", n)
	}
	var requeued []string
	eventually(t, time.Minute, "y-0 and y-1 requeued not started", func() bool {
		requeued = requeued[:0]
		for _, rec := range r.recorded() {
			if strings.HasPrefix(rec.MessageID, "y-") && rec.Path == runtime.PathNotStarted && !slices.Contains(requeued, rec.MessageID) {
				requeued = append(requeued, rec.MessageID)
			}
		}
		return len(requeued) == 2
	})
	close(release)
	acked := func(id string) bool {
		return slices.ContainsFunc(r.recorded(), func(rec runtime.Record) bool { return rec.MessageID == id && rec.Path == runtime.PathAcked })
	}
	eventually(t, time.Minute, "y-0 and y-1 acked", func() bool { return acked("y-0") && acked("y-1") })
	rep := r.stop()
	if !slices.Equal(requeued, []string{"y-0", "y-1"}) {
		t.Errorf("requeued %v, want y-0 then y-1", requeued)
	}
	for _, rec := range r.recorded() {
		if strings.HasPrefix(rec.MessageID, "y-") && rec.Path == runtime.PathUnresolved {
			t.Errorf("%s left unresolved: %s", rec.MessageID, rec.Reason)
		}
	}
	if r.reconnects() < 1 {
		t.Errorf("no new session after the cancel: %s", rep)
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, q.Topology.DeadLetterQueue: {0, 0}})
}

// A delivery whose budget was spent waiting for a slot (the one slot held
// by a handler past its timeout) runs no user code when the slot frees: its
// handler's result could only be left unresolved. It goes back not started,
// comes back with a budget of its own, and is handled once. No proof runs,
// so no recycle comes in between.
func TestBrokerDeliveryWhoseBudgetWasSpentWaitingIsNotStarted(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, hourRetry, func(q *runtime.QueueSpec) {
		q.Concurrency, q.Prefetch = 1, 4
		q.HandlerTimeout, q.SettlementBudget = time.Second, 7*time.Second
	})
	declareTopology(t, q)
	running, release := make(chan struct{}), make(chan struct{})
	var handled calls
	r, c := prepare(t, q, func(_ context.Context, msg *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
		handled.add(msg.OrderID)
		if msg.OrderID == "stuck" {
			close(running)
			<-release // past its timeout: it holds the one slot
		}
		return nil
	}, func(cfg *runtime.Config) { cfg.StepTimeout = time.Second })
	c.SetProofInterval(time.Hour)
	r.launch(c)
	publish(t, q.Name, order(t, "stuck"))
	<-running
	publish(t, q.Name, order(t, "late"))
	awaitTaken(t, q.Name)
	time.Sleep(q.SettlementBudget + time.Second) // late's budget, counted from its receipt, is spent
	close(release)
	eventually(t, time.Minute, "late acked", func() bool {
		return slices.ContainsFunc(r.recorded(), func(rec runtime.Record) bool { return rec.MessageID == "late" && rec.Path == runtime.PathAcked })
	})
	var paths []string
	for _, rec := range r.recorded() {
		if rec.MessageID == "late" {
			paths = append(paths, string(rec.Path)+": "+rec.Reason)
		}
	}
	want := []string{"not-started: not started: its settlement budget was spent while it waited for a slot", "acked: handled"}
	if !slices.Equal(paths, want) {
		t.Errorf("late took %q, want %q", paths, want)
	}
	rep := r.stop()
	if len(rep.Unresolved) != 0 {
		t.Errorf("report %s; unresolved %+v", rep, rep.Unresolved)
	}
	handled.once(t, "stuck", "late")
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, q.Topology.DeadLetterQueue: {0, 0}})
}

// A retired session's unproven ACKs are judged when its channel is lost, as
// the consuming session's are, not once its deliveries in flight have
// settled: ambiguous at once, their work is remembered before a redelivery
// reaches the new session, which settles it from the record instead of
// running the handler again. lost-ack's ACK, on the retired session, is cut
// off on its way; held keeps the retired session open meanwhile. No proof
// runs: only the judgment of the loss can remember the work.
func TestBrokerRetiredSessionsAmbiguousAckIsSettledFromTheRecord(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, heldHandler)
	declareTopology(t, q)
	p := newProxy(t)
	var handled calls
	ackGate, heldGate := make(chan struct{}), make(chan struct{})
	var started sync.WaitGroup
	started.Add(2)
	r, c := prepare(t, q, func(_ context.Context, msg *fixture.OrderPlacedV1, d runtime.RawDelivery) error {
		handled.add(msg.OrderID)
		if d.Redelivered() {
			return nil
		}
		started.Done()
		switch msg.OrderID {
		case "lost-ack":
			<-ackGate
		case "held":
			<-heldGate
		}
		return nil
	}, through(p))
	c.SetProofInterval(time.Hour)
	var cutting atomic.Bool
	c.SetTestHooks(runtime.TestHooks{
		BeforeAck: func() {
			if cutting.Load() {
				p.freeze()
			}
		},
		AfterAck: func() {
			if cutting.CompareAndSwap(true, false) {
				p.cut()
			}
		},
	})
	r.launch(c)
	publish(t, q.Name, order(t, "lost-ack"), order(t, "held"))
	started.Wait()
	if n := p.CancelConsumers(func(name string) bool { return name == faults.ConnectionName(q.Name, "consume") }); n != 1 {
		t.Fatalf("cancelled %d consumers, want 1", n)
	}
	eventually(t, 2*time.Minute, "a new session", func() bool { return r.reconnects() == 1 })
	cutting.Store(true)
	close(ackGate)
	record := func(id string, redelivered bool) (runtime.Record, bool) {
		for _, rec := range r.recorded() {
			if rec.MessageID == id && rec.Redelivered == redelivered && rec.Path == runtime.PathAcked {
				return rec, true
			}
		}
		return runtime.Record{}, false
	}
	eventually(t, time.Minute, "lost-ack's redelivery acked", func() bool { _, ok := record("lost-ack", true); return ok })
	if again, _ := record("lost-ack", true); again.Handler != "completed earlier" {
		t.Errorf("lost-ack's redelivery ran its handler again: %+v", again)
	}
	close(heldGate)
	eventually(t, time.Minute, "held's redelivery acked", func() bool { _, ok := record("held", true); return ok })
	rep := r.stop()
	if !slices.ContainsFunc(rep.Unresolved, func(u runtime.Record) bool {
		return u.MessageID == "lost-ack" && strings.HasPrefix(u.Reason, "ack sent, never proven")
	}) {
		t.Errorf("report %s; unresolved %+v", rep, rep.Unresolved)
	}
	handled.mu.Lock()
	if handled.n["lost-ack"] != 1 {
		t.Errorf("lost-ack handled %d times, want once", handled.n["lost-ack"])
	}
	handled.mu.Unlock()
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, q.Topology.DeadLetterQueue: {0, 0}})
}

// A basic.cancel naming a consumer tag the channel does not have (a hostile
// broker, or a man in the middle, sends it ahead of a delivery) cancels
// nothing: the consumer goes on consuming, says so once in its log, its tag
// sanitized, and a later loss of the channel is told as that loss, not as a
// cancel.
func TestBrokerCancelOfAnotherTagIsIgnored(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t)
	declareTopology(t, q)
	p := newProxy(t)
	consume := func(name string) bool { return name == faults.ConnectionName(q.Name, "consume") }
	const tag = "not-yours\x1b[31m\r\n"
	var injected atomic.Int32
	p.Rewrite(func(f faults.Frame, raw []byte) []byte {
		if f.Dir == faults.ToClient && f.Is(faults.BasicDeliver) && consume(f.Conn) && injected.Add(1) <= 2 {
			return append(faults.CancelFrame(f.Channel, tag), raw...)
		}
		return raw
	})
	r := start(t, q, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error { return nil }, through(p))
	publish(t, q.Name, order(t, "first"))
	publish(t, q.Name, order(t, "second"))
	for _, rec := range r.await(2) {
		wantPath(t, rec, runtime.PathAcked)
	}
	eventually(t, 2*time.Minute, "both ACKs proven", func() bool {
		n := 0
		for _, ev := range r.events.all() {
			if ev.stage == "ack-proven" {
				n++
			}
		}
		return n == 2
	})
	if r.reconnects() != 0 {
		t.Errorf("the consumer reconnected %d times", r.reconnects())
	}
	if p.CutConns(consume) != 1 {
		t.Fatal("no consuming connection to cut")
	}
	eventually(t, 2*time.Minute, "a new session", func() bool { return r.reconnects() == 1 })
	publish(t, q.Name, order(t, "after"))
	r.await(3)
	rep := r.stop()
	if len(rep.Lost) != 1 || strings.Contains(rep.Lost[0], "cancelled") || len(rep.Unresolved) != 0 {
		t.Errorf("report %s; lost %q", rep, rep.Lost)
	}
	var told []string
	for _, ev := range r.events.all() {
		if strings.Contains(ev.detail, "not-yours") {
			told = append(told, ev.detail)
		}
	}
	if len(told) != 1 || strings.ContainsAny(told[0], "\x1b\r\n") {
		t.Errorf("the foreign cancel told %q, want once, sanitized", told)
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, q.Topology.DeadLetterQueue: {0, 0}})
}

// A broker (or a man in the middle) that sends the consumer's cancel many
// times over holds nothing: amqp091 hands each to the session's watcher,
// and waits up to 5 s on each it cannot hand over, with the connection's
// reader, so every later frame on the connection waits too. Here twenty
// cancels come just ahead of the reply that proves an ACK: the ACK is
// proven, not left ambiguous a step later, and the consumer goes on on a
// new session.
func TestBrokerCancelStormHoldsNothing(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t)
	declareTopology(t, q)
	p := newProxy(t)
	consume := func(name string) bool { return name == faults.ConnectionName(q.Name, "consume") }
	var tag atomic.Pointer[string]
	var armed atomic.Bool
	var injected atomic.Int32
	p.Rewrite(func(f faults.Frame, raw []byte) []byte {
		if f.Dir != faults.ToClient || !consume(f.Conn) {
			return raw
		}
		if f.Is(faults.BasicConsumeOk) {
			if own, ok := faults.ConsumerTag(raw); ok {
				tag.CompareAndSwap(nil, &own)
			}
		}
		// The reply to the proof of the first ACK (basic.qos-ok).
		if armed.Load() && f.Is(faults.Method{Class: 60, ID: 11}) && injected.Add(1) == 1 {
			var storm []byte
			for range 20 {
				storm = append(storm, faults.CancelFrame(f.Channel, *tag.Load())...)
			}
			return append(storm, raw...)
		}
		return raw
	})
	r, c := prepare(t, q, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error { return nil }, through(p))
	r.launch(c)
	eventually(t, 2*time.Minute, "ready", func() bool { return c.Health().Ready })
	armed.Store(true)
	publish(t, q.Name, order(t, "first"))
	wantPath(t, r.await(1)[0], runtime.PathAcked)
	var proof string
	eventually(t, time.Minute, "first's ACK proven or ambiguous", func() bool {
		for _, ev := range r.events.all() {
			if ev.messageID == "first" && (ev.stage == "ack-proven" || ev.stage == "ack-ambiguous") {
				proof = ev.stage + " " + ev.detail
				return true
			}
		}
		return false
	})
	if proof != "ack-proven " {
		t.Errorf("first's ACK: %s, want proven", proof)
	}
	eventually(t, time.Minute, "a new session", func() bool { return r.reconnects() == 1 })
	publish(t, q.Name, order(t, "after"))
	wantPath(t, r.await(2)[1], runtime.PathAcked)
	rep := r.stop()
	if len(rep.Lost) != 1 || !strings.Contains(rep.Lost[0], "cancelled") || len(rep.Unresolved) != 0 || rep.AcksProven != 2 {
		t.Errorf("report %s; lost %q", rep, rep.Lost)
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, q.Topology.DeadLetterQueue: {0, 0}})
}

// lateCancelOk is a proxy that holds each basic.cancel-ok back for late (and
// every frame to the client behind it).
func lateCancelOk(t *testing.T, late time.Duration) *proxy {
	p := newProxy(t)
	p.Intercept(func(f faults.Frame) faults.Action {
		if f.Dir == faults.ToClient && f.Is(faults.BasicCancelOk) {
			time.Sleep(late)
		}
		return faults.Forward
	})
	return p
}
