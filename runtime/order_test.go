package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/runtime/internal/fixture"
	"github.com/lily-mq/lily/runtime/internal/guard"
	"github.com/lily-mq/lily/wire"
)

// byTenant orders a queue's handling by the x-tenant header.
func byTenant(headers map[string]any, _ []byte) string { return wire.HeaderText(headers["x-tenant"]) }

// orderLog keeps, per key, the sequence numbers handled, in the order the
// handlers ran, and how many handlers of the key ran at once at most.
type orderLog struct {
	mu      sync.Mutex
	seen    map[string][]int
	running map[string]int
	overlap int // most handlers of one key at once
	all     atomic.Int32
	most    atomic.Int32 // most handlers of any keys at once
}

func newOrderLog() *orderLog { return &orderLog{seen: map[string][]int{}, running: map[string]int{}} }

func (l *orderLog) handle(key string, seq int, work func()) {
	l.mu.Lock()
	l.running[key]++
	l.overlap = max(l.overlap, l.running[key])
	l.seen[key] = append(l.seen[key], seq)
	l.mu.Unlock()
	n := l.all.Add(1)
	for m := l.most.Load(); n > m && !l.most.CompareAndSwap(m, n); m = l.most.Load() {
	}
	work()
	l.all.Add(-1)
	l.mu.Lock()
	l.running[key]--
	l.mu.Unlock()
}

// publishKeyed publishes n orders for each key, interleaved: a-0, b-0, a-1,
// b-1, …; each order's id is <key>-<seq>, its x-tenant the key.
func publishKeyed(t *testing.T, queue string, keys []string, n int) {
	t.Helper()
	var msgs []amqp.Publishing
	for seq := range n {
		for _, k := range keys {
			id := fmt.Sprintf("%s-%d", k, seq)
			msgs = append(msgs, produce(t, id, &fixture.OrderPlacedV1{OrderID: id, Headers: fixture.OrderPlacedV1Headers{XTenant: new(k)}}))
		}
	}
	publish(t, queue, msgs...)
}

// attempts lists the handler calls of a test, as "a-0@1": message id, then
// attempt.
type attempts struct {
	mu    sync.Mutex
	calls []string
}

func (a *attempts) add(msg *fixture.OrderPlacedV1, d runtime.RawDelivery) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls = append(a.calls, fmt.Sprintf("%s@%d", msg.OrderID, d.Attempt()))
}

func (a *attempts) all() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.calls)
}

func seqOf(id string) int {
	n, _ := strconv.Atoi(id[strings.LastIndexByte(id, '-')+1:])
	return n
}

// Deliveries with one key run one at a time, in the order the queue held
// them; deliveries with different keys run at once: the first of tenant a
// waits until the first of tenant b has started, which it could not if keys
// were serialized too.
func TestBrokerOrderedPerKey(t *testing.T) {
	t.Parallel()
	keys, n := []string{"a", "b", "c"}, 20
	q := brokerSpec(t, func(q *runtime.QueueSpec) {
		q.OrderKey, q.Concurrency, q.Prefetch = byTenant, 8, 32
	})
	declareTopology(t, q)
	publishKeyed(t, q.Name, keys, n)
	log := newOrderLog()
	bStarted := make(chan struct{})
	var once sync.Once
	c := start(t, q, func(_ context.Context, msg *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
		key, seq := *msg.Headers.XTenant, seqOf(msg.OrderID)
		log.handle(key, seq, func() {
			switch {
			case key == "b" && seq == 0:
				once.Do(func() { close(bStarted) })
			case key == "a" && seq == 0:
				select {
				case <-bStarted:
				case <-time.After(20 * time.Second):
				}
			}
			time.Sleep(time.Duration(seq%3) * time.Millisecond)
		})
		return nil
	})
	recs := c.await(len(keys) * n)
	for _, r := range recs {
		wantPath(t, r, runtime.PathAcked)
	}
	select {
	case <-bStarted:
	default:
		t.Fatal("tenant b's first order never started")
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if log.overlap != 1 {
		t.Errorf("%d handlers of one tenant ran at once, want 1", log.overlap)
	}
	if log.most.Load() < 2 {
		t.Errorf("at most %d handlers ran at once: tenants were serialized together", log.most.Load())
	}
	for _, k := range keys {
		got := log.seen[k]
		for i, seq := range got {
			if seq != i {
				t.Fatalf("tenant %s handled in the order %v", k, got)
			}
		}
		if len(got) != n {
			t.Errorf("tenant %s: %d handled, want %d", k, len(got), n)
		}
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, q.Topology.DeadLetterQueue: {0, 0}})
}

// A constant key handles every delivery one at a time, in order, whatever
// the concurrency.
func TestBrokerOrderedSequential(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, func(q *runtime.QueueSpec) {
		q.OrderKey = func(map[string]any, []byte) string { return "" }
		q.Concurrency, q.Prefetch = 8, 32
	})
	declareTopology(t, q)
	publishKeyed(t, q.Name, []string{"a", "b"}, 15)
	log := newOrderLog()
	var order []string
	var mu sync.Mutex
	c := start(t, q, func(_ context.Context, msg *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
		log.handle("", 0, func() {
			mu.Lock()
			order = append(order, msg.OrderID)
			mu.Unlock()
			time.Sleep(time.Millisecond)
		})
		return nil
	})
	c.await(30)
	mu.Lock()
	defer mu.Unlock()
	for i, id := range order {
		want := fmt.Sprintf("%s-%d", []string{"a", "b"}[i%2], i/2)
		if id != want {
			t.Fatalf("handled in the order %v", order)
		}
	}
	if m := log.most.Load(); m != 1 {
		t.Errorf("%d handlers ran at once, want 1", m)
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, q.Topology.DeadLetterQueue: {0, 0}})
}

// Deliveries still waiting for their key when intake stops are not started:
// requeued once each, after the consumer's cancel, in their order, once the
// one running has finished in the grace. On a quorum queue, which hands
// requeued messages back in the order they came back, that order is the
// NACKs'. When the running one fails retryably, its retry in line ends at
// the stop and it is requeued too: before the others, not behind them.
func TestBrokerOrderedStopRequeuesTheWaiting(t *testing.T) {
	t.Parallel()
	for _, qt := range []string{"classic", "quorum"} {
		for _, fails := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/head fails %v", qt, fails), func(t *testing.T) {
				t.Parallel()
				q := brokerSpec(t, heldHandler, func(q *runtime.QueueSpec) {
					q.OrderKey = func(map[string]any, []byte) string { return "" }
					q.Concurrency, q.Prefetch, q.Topology.Type = 4, 8, qt
				})
				declareTopology(t, q)
				publishKeyed(t, q.Name, []string{"a"}, 4)
				running, release := make(chan struct{}), make(chan struct{})
				r, c := prepare(t, q, func(_ context.Context, msg *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
					if msg.OrderID == "a-0" {
						close(running)
						<-release
						if fails {
							return errors.New("ledger busy")
						}
					}
					return nil
				})
				r.launch(c)
				<-running
				awaitTaken(t, q.Name) // a-1 to a-3 wait in the consumer behind a-0
				r.cancel()
				time.AfterFunc(200*time.Millisecond, func() { close(release) })
				<-r.done
				if r.err != nil {
					t.Fatal(r.err)
				}
				recs := r.recorded()
				paths := map[string]runtime.Path{}
				for _, rec := range recs {
					paths[rec.MessageID] = rec.Path
				}
				want := map[string]runtime.Path{"a-0": runtime.PathAcked, "a-1": runtime.PathNotStarted, "a-2": runtime.PathNotStarted, "a-3": runtime.PathNotStarted}
				wantQueued := "a-1 a-2 a-3"
				if fails {
					want["a-0"], wantQueued = runtime.PathRequeued, "a-0 a-1 a-2 a-3"
				}
				if len(recs) != len(want) {
					t.Errorf("%d records, want one per message: %+v", len(recs), recs)
				}
				for id, p := range want {
					if paths[id] != p {
						t.Errorf("%s took %q, want %q (all: %v)", id, paths[id], p, paths)
					}
				}
				assertCounts(t, map[string][2]int{q.Name: {len(strings.Fields(wantQueued)), 0}})
				var ids []string
				for _, d := range drain(t, q.Name) {
					ids = append(ids, d.MessageId)
				}
				if got := strings.Join(ids, " "); got != wantQueued {
					t.Errorf("the queue holds %v; want %s", ids, wantQueued)
				}
			})
		}
	}
}

// A stop while the head's retry waits in line: the head goes back to its
// place, and the delivery behind it goes back behind it without running,
// though the stop's cancel is still on its way when the head's wait ends
// (held a second here). Neither goes back before the cancel, or the broker
// would hand it straight back to the consumer.
func TestBrokerOrderedStopWhileARetryWaitsInLine(t *testing.T) {
	t.Parallel()
	for _, qt := range []string{"classic", "quorum"} {
		t.Run(qt, func(t *testing.T) {
			t.Parallel()
			q := brokerSpec(t, func(q *runtime.QueueSpec) {
				q.OrderKey, q.Concurrency, q.Prefetch, q.Topology.Type = byTenant, 4, 16, qt
				q.HandlerTimeout, q.SettlementBudget = 5*time.Second, 2*time.Minute
				q.Topology.RetryDelays = []time.Duration{20 * time.Second}
			})
			declareTopology(t, q)
			publishKeyed(t, q.Name, []string{"a"}, 2)
			var calls attempts
			r, c := prepare(t, q, func(_ context.Context, msg *fixture.OrderPlacedV1, d runtime.RawDelivery) error {
				calls.add(msg, d)
				if msg.OrderID == "a-0" {
					return errors.New("ledger busy")
				}
				return nil
			})
			c.SetTestHooks(runtime.TestHooks{BeforeCancel: func() { time.Sleep(time.Second) }})
			r.launch(c)
			eventually(t, time.Minute, "a-0 waiting in line", func() bool {
				return r.events.has(func(ev event) bool { return ev.stage == "parked" })
			})
			r.cancel()
			<-r.done
			if got := calls.all(); !slices.Equal(got, []string{"a-0@1"}) {
				t.Errorf("handler calls %v; want a-0@1 alone", got)
			}
			paths := map[string]runtime.Path{}
			for _, rec := range r.recorded() {
				paths[rec.MessageID] = rec.Path
			}
			if want := map[string]runtime.Path{"a-0": runtime.PathRequeued, "a-1": runtime.PathNotStarted}; !maps.Equal(paths, want) {
				t.Errorf("paths %v; want %v", paths, want)
			}
			assertCounts(t, map[string][2]int{q.Name: {2, 0}, q.Topology.DeadLetterQueue: {0, 0}})
			var ids []string
			for _, d := range drain(t, q.Name) {
				ids = append(ids, d.MessageId)
			}
			if got := strings.Join(ids, " "); got != "a-0 a-1" {
				t.Errorf("the queue holds %v; want a-0 a-1", ids)
			}
		})
	}
}

// The connection is lost while the head's retry waits in line (a delay of
// ten minutes): the wait ends with the channel, and the broker's
// redeliveries of the head and of the delivery behind it run on the next
// session at once, in order, rather than wait out the delay behind a
// delivery whose channel is gone.
func TestBrokerOrderedLostChannelEndsARetryWaitingInLine(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, func(q *runtime.QueueSpec) {
		q.OrderKey, q.Concurrency, q.Prefetch = byTenant, 4, 16
		q.HandlerTimeout, q.SettlementBudget = 5*time.Second, 15*time.Minute
		q.Topology.RetryDelays = []time.Duration{10 * time.Minute}
	})
	declareTopology(t, q)
	publishKeyed(t, q.Name, []string{"a"}, 2)
	proxy := newProxy(t)
	var calls attempts
	var failed atomic.Bool
	r := start(t, q, func(_ context.Context, msg *fixture.OrderPlacedV1, d runtime.RawDelivery) error {
		calls.add(msg, d)
		if msg.OrderID == "a-0" && !failed.Swap(true) {
			return errors.New("ledger busy")
		}
		return nil
	}, func(cfg *runtime.Config) { cfg.URLs = []string{proxy.url()} })
	eventually(t, time.Minute, "a-0 waiting in line", func() bool {
		return r.events.has(func(ev event) bool { return ev.stage == "parked" })
	})
	proxy.cut()
	eventually(t, time.Minute, "both handled on the next session", func() bool {
		return len(calls.all()) >= 3
	})
	if got := calls.all(); !slices.Equal(got, []string{"a-0@1", "a-0@1", "a-1@1"}) {
		t.Errorf("handler calls %v; want a-0@1, then a-0@1 and a-1@1 on the next session", got)
	}
	acked := 0
	for _, rec := range r.await(4) {
		if rec.Path == runtime.PathAcked {
			acked++
		}
	}
	if acked != 2 {
		t.Errorf("%d deliveries acked; want a-0 and a-1 once each: %v", acked, r.recorded())
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, q.Topology.DeadLetterQueue: {0, 0}})
}

// At a stop, the head of a key is still in its user steps (a cleanup, then
// after_delivery, each past its step) when the final abort comes: the
// delivery behind it no longer waits for it, since nothing is NACKed after
// the abort, and the report accounts for both. Both are back in the queue.
func TestBrokerOrderedWaiterBehindASlowHeadIsReportedAtTheAbort(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, heldHandler, func(q *runtime.QueueSpec) {
		q.OrderKey = func(map[string]any, []byte) string { return "" }
		q.Concurrency, q.Prefetch = 2, 4
	})
	declareTopology(t, q)
	publishKeyed(t, q.Name, []string{"a"}, 2)
	inCleanup := make(chan struct{})
	var once sync.Once
	// A step that carries the first connection on a loaded machine.
	const step = 3 * time.Second
	slow := func() { time.Sleep(step + 2*time.Second) } // each past its step
	c := start(t, q, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error { return nil }, func(cfg *runtime.Config) {
		cfg.StepTimeout, cfg.ShutdownGrace, cfg.ForceWindow = step, 100*time.Millisecond, 100*time.Millisecond
		cfg.Scope = func(ctx context.Context, _ runtime.RawDelivery) (context.Context, func(context.Context) error, error) {
			return ctx, func(context.Context) error {
				once.Do(func() { close(inCleanup) })
				slow()
				return nil
			}, nil
		}
		cfg.AfterDelivery = func(context.Context, runtime.RawDelivery, runtime.Record) error {
			slow()
			return nil
		}
	})
	<-inCleanup
	rep := c.stop()
	n := 0
	for _, k := range rep.Counts {
		n += k
	}
	if n != 2 || rep.Counts[runtime.PathUnresolved] != 2 {
		t.Errorf("the report accounts for %d deliveries, want a-0 and a-1 unresolved: %s", n, rep)
	}
	eventually(t, 2*time.Minute, "both back in the queue", func() bool {
		ready, unacked := queueCounts(t, q.Name)
		return ready == 2 && unacked == 0
	})
}

// An ordered queue retries in line: the failed delivery waits its retry
// delay and runs again as the next attempt, while the deliveries of its key
// wait behind it and other keys run on; nothing goes through a retry
// bucket, not even a delivery whose scope did not open (b-0, whose handler
// first runs at attempt 2). Retries spent, it goes to the DLQ, and its key
// goes on.
func TestBrokerOrderedRetryParksInLine(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, func(q *runtime.QueueSpec) {
		q.OrderKey, q.Concurrency, q.Prefetch = byTenant, 4, 16
	})
	declareTopology(t, q)
	publishKeyed(t, q.Name, []string{"a", "b", "c"}, 2)
	var calls attempts
	c := start(t, q, func(_ context.Context, msg *fixture.OrderPlacedV1, d runtime.RawDelivery) error {
		calls.add(msg, d)
		switch {
		case msg.OrderID == "a-0" && d.Attempt() == 1:
			return errors.New("ledger busy")
		case msg.OrderID == "c-0":
			return errors.New("ledger down")
		}
		return nil
	}, func(cfg *runtime.Config) {
		cfg.Scope = func(ctx context.Context, d runtime.RawDelivery) (context.Context, func(context.Context) error, error) {
			if d.MessageID() == "b-0" && d.Attempt() == 1 {
				return nil, nil, errors.New("pool exhausted")
			}
			return ctx, nil, nil
		}
	})
	byID := map[string]runtime.Record{}
	for _, rec := range c.await(6) {
		byID[rec.MessageID] = rec
	}
	if r := byID["a-0"]; r.Path != runtime.PathAcked || r.Attempt != 2 {
		t.Errorf("a-0: %+v, want acked at attempt 2", r)
	}
	if r := byID["c-0"]; r.Path != runtime.PathDeadLettered || r.Attempt != 3 || !strings.Contains(r.Reason, "retries exhausted after attempt 3 of 3") {
		t.Errorf("c-0: %+v, want dead-lettered after attempt 3", r)
	}
	if r := byID["b-0"]; r.Path != runtime.PathAcked || r.Attempt != 2 {
		t.Errorf("b-0: %+v, want acked at attempt 2", r)
	}
	for _, id := range []string{"a-1", "b-1", "c-1"} {
		if r := byID[id]; r.Path != runtime.PathAcked || r.Attempt != 1 {
			t.Errorf("%s: %+v, want acked at attempt 1", id, r)
		}
	}
	order := map[string][]string{}
	for _, call := range calls.all() {
		order[call[:1]] = append(order[call[:1]], call)
	}
	want := map[string]string{"a": "a-0@1 a-0@2 a-1@1", "b": "b-0@2 b-1@1", "c": "c-0@1 c-0@2 c-0@3 c-1@1"}
	for k, w := range want {
		if got := strings.Join(order[k], " "); got != w {
			t.Errorf("tenant %s's calls: %s, want %s", k, got, w)
		}
	}
	if !c.events.has(func(ev event) bool { return ev.stage == "parked" }) {
		t.Error("no parked event in the diagnostics")
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, bucket(q, q.Topology.RetryDelays[0]): {0, 0}, q.Topology.DeadLetterQueue: {1, 0}})
	dead := drain(t, q.Topology.DeadLetterQueue)
	if len(dead) != 1 || dead[0].MessageId != "c-0" {
		t.Fatalf("the DLQ holds %d messages; want c-0", len(dead))
	}
	if a, f := header(t, dead[0], guard.HeaderAttempt), header(t, dead[0], guard.HeaderFailureAttempt); a != int64(3) || f != int64(3) {
		t.Errorf("c-0 in the DLQ at attempt %v, failed at attempt %v; want 3 and 3", a, f)
	}
}

// The deliveries the guard refuses go to the DLQ unread and in no order: one
// whose handoff is slow holds none of the others. With the first DLQ
// publish held, the other poison message of the queue's one key is
// dead-lettered meanwhile.
func TestBrokerOrderedRefusedTakeNoLane(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, func(q *runtime.QueueSpec) {
		q.OrderKey = func(map[string]any, []byte) string { return "" }
		q.Concurrency = 2
	})
	declareTopology(t, q)
	publish(t, q.Name, amqp.Publishing{MessageId: "refused-0", Body: []byte("{}")}, amqp.Publishing{MessageId: "refused-1", Body: []byte("{}")})
	var publishes atomic.Int32
	held := make(chan struct{})
	release := sync.OnceFunc(func() { close(held) })
	t.Cleanup(release)
	r, c := prepare(t, q, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error { return nil })
	c.SetTestHooks(runtime.TestHooks{BeforePublish: func() {
		if publishes.Add(1) == 1 {
			<-held
		}
	}})
	r.launch(c)
	first := r.await(1)[0]
	wantPath(t, first, runtime.PathDeadLettered)
	release()
	recs := r.await(2)
	ids := []string{}
	for _, rec := range recs {
		wantPath(t, rec, runtime.PathDeadLettered)
		if rec.Rejection != "poison" {
			t.Errorf("%s: rejection %q, want poison", rec.MessageID, rec.Rejection)
		}
		ids = append(ids, rec.MessageID)
	}
	if slices.Sort(ids); !slices.Equal(ids, []string{"refused-0", "refused-1"}) {
		t.Errorf("records of %v, want refused-0 and refused-1", ids)
	}
	if n := len(slices.DeleteFunc(r.events.all(), func(ev event) bool { return ev.stage != "rejected" || !strings.HasPrefix(ev.detail, "poison: ") })); n != 2 {
		t.Errorf("%d rejected events saying poison, want 2", n)
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, q.Topology.DeadLetterQueue: {2, 0}})
}

// An OrderKey that panics on a message (a hand-written one meeting a header
// it did not expect) does not end the process: the panic is logged, that
// delivery is handled in a lane of its own, and the others in theirs.
func TestBrokerOrderKeyPanicIsContained(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, func(q *runtime.QueueSpec) {
		q.OrderKey = func(headers map[string]any, body []byte) string {
			if byTenant(headers, body) == "boom" {
				panic("no tenant like that")
			}
			return byTenant(headers, body)
		}
	})
	declareTopology(t, q)
	publishKeyed(t, q.Name, []string{"boom", "a"}, 2)
	c := start(t, q, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error { return nil })
	for _, rec := range c.await(4) {
		wantPath(t, rec, runtime.PathAcked)
	}
	n := 0
	for _, ev := range c.events.all() {
		if ev.level == slog.LevelError && strings.Contains(ev.detail, "no tenant like that") && strings.HasPrefix(ev.messageID, "boom-") {
			n++
		}
	}
	if n != 2 {
		t.Errorf("%d panics logged, want one for each of boom-0 and boom-1", n)
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}})
}

// An OrderKey that calls runtime.Goexit (t.FailNow does, off its test's
// goroutine) is contained as one that panics: the exit is logged, that
// delivery is handled in the lane of the keys that panicked, the others in
// theirs, later deliveries are still read, and Run returns its report at the
// stop.
func TestBrokerOrderKeyGoexitIsContained(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, func(q *runtime.QueueSpec) {
		q.OrderKey = func(headers map[string]any, body []byte) string {
			if byTenant(headers, body) == "exit" {
				goruntime.Goexit()
			}
			return byTenant(headers, body)
		}
	})
	declareTopology(t, q)
	publishKeyed(t, q.Name, []string{"exit", "a"}, 2)
	c := start(t, q, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error { return nil })
	for _, rec := range c.await(4) {
		wantPath(t, rec, runtime.PathAcked)
	}
	publishKeyed(t, q.Name, []string{"b"}, 1)
	wantPath(t, c.await(5)[4], runtime.PathAcked)
	n := 0
	for _, ev := range c.events.all() {
		if ev.level == slog.LevelError && strings.Contains(ev.detail, "runtime.Goexit") && strings.HasPrefix(ev.messageID, "exit-") {
			n++
		}
	}
	if n != 2 {
		t.Errorf("%d exits logged, want one for each of exit-0 and exit-1", n)
	}
	if rep := c.stop(); rep == nil {
		t.Fatal("Run returned no report")
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}})
}

// A producer's key cannot name a lane of the runtime's own, whatever it
// holds (the guard lets NUL through in a header's string): one that reads as
// the mark of refused deliveries, which take no lane, still has its
// deliveries run one at a time; one that reads as the lane of the keys that
// panicked does not wait behind them.
func TestBrokerOrderKeysCannotNameTheRuntimesLanes(t *testing.T) {
	t.Parallel()
	keyed := func(k string, seq int) amqp.Publishing {
		id := fmt.Sprintf("k-%d", seq)
		return produce(t, id, &fixture.OrderPlacedV1{OrderID: id, Headers: fixture.OrderPlacedV1Headers{XTenant: new(k)}})
	}
	t.Run("refused", func(t *testing.T) {
		t.Parallel()
		q := brokerSpec(t, func(q *runtime.QueueSpec) { q.OrderKey, q.Concurrency, q.Prefetch = byTenant, 4, 8 })
		declareTopology(t, q)
		var msgs []amqp.Publishing
		for seq := range 4 {
			msgs = append(msgs, keyed("\x00lily: refused by the guard", seq))
		}
		publish(t, q.Name, msgs...)
		log := newOrderLog()
		c := start(t, q, func(_ context.Context, msg *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
			log.handle("k", seqOf(msg.OrderID), func() { time.Sleep(50 * time.Millisecond) })
			return nil
		})
		for _, rec := range c.await(4) {
			wantPath(t, rec, runtime.PathAcked)
		}
		log.mu.Lock()
		defer log.mu.Unlock()
		if log.overlap != 1 || !slices.Equal(log.seen["k"], []int{0, 1, 2, 3}) {
			t.Errorf("%d handlers of one key at once, in the order %v; want one at a time, in order", log.overlap, log.seen["k"])
		}
	})
	t.Run("panicked", func(t *testing.T) {
		t.Parallel()
		q := brokerSpec(t, func(q *runtime.QueueSpec) {
			q.OrderKey = func(headers map[string]any, body []byte) string {
				if byTenant(headers, body) == "boom" {
					panic("no tenant like that")
				}
				return byTenant(headers, body)
			}
			q.Concurrency, q.HandlerTimeout = 2, time.Minute
		})
		declareTopology(t, q)
		publish(t, q.Name, produce(t, "boom-0", &fixture.OrderPlacedV1{OrderID: "boom-0", Headers: fixture.OrderPlacedV1Headers{XTenant: new("boom")}}),
			keyed("\x00lily: OrderKey panicked", 0))
		other := make(chan struct{})
		var waited atomic.Bool
		c := start(t, q, func(_ context.Context, msg *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
			if msg.OrderID == "k-0" {
				close(other)
				return nil
			}
			select {
			case <-other:
			case <-time.After(20 * time.Second):
				waited.Store(true)
			}
			return nil
		})
		for _, rec := range c.await(2) {
			wantPath(t, rec, runtime.PathAcked)
		}
		if waited.Load() {
			t.Error("k-0 waited behind boom-0, whose OrderKey panicked")
		}
	})
}

// A retry waiting in line gives its concurrency slot back meanwhile: with
// one slot, b-0, published while a-0 waits to be retried, runs before a-0's
// second attempt, not after it.
func TestBrokerOrderedParkedRetryFreesItsSlot(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, func(q *runtime.QueueSpec) {
		q.OrderKey, q.Concurrency, q.Prefetch = byTenant, 1, 16
		q.HandlerTimeout, q.SettlementBudget = 5*time.Second, 2*time.Minute
		q.Topology.RetryDelays = []time.Duration{10 * time.Second}
	})
	declareTopology(t, q)
	publishKeyed(t, q.Name, []string{"a"}, 1)
	var calls attempts
	c := start(t, q, func(_ context.Context, msg *fixture.OrderPlacedV1, d runtime.RawDelivery) error {
		calls.add(msg, d)
		if msg.OrderID == "a-0" && d.Attempt() == 1 {
			return errors.New("ledger busy")
		}
		return nil
	})
	eventually(t, time.Minute, "a-0 parked", func() bool {
		return c.events.has(func(ev event) bool { return ev.stage == "parked" })
	})
	publishKeyed(t, q.Name, []string{"b"}, 1)
	byID := map[string]runtime.Record{}
	for _, rec := range c.await(2) {
		byID[rec.MessageID] = rec
	}
	if r := byID["a-0"]; r.Path != runtime.PathAcked || r.Attempt != 2 {
		t.Errorf("a-0: %+v, want acked at attempt 2", r)
	}
	if r := byID["b-0"]; r.Path != runtime.PathAcked || r.Attempt != 1 {
		t.Errorf("b-0: %+v, want acked at attempt 1", r)
	}
	if got, want := strings.Join(calls.all(), " "), "a-0@1 b-0@1 a-0@2"; got != want {
		t.Errorf("calls %s, want %s: the parked retry held the only slot", got, want)
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, bucket(q, q.Topology.RetryDelays[0]): {0, 0}})
}

// A retry waiting in line takes a slot again only while the budget still
// carries its call and a handoff: with the one slot held past that by
// another key's handler (abandoned at its timeout, still running), the
// retry goes through its bucket instead of running late, past its budget.
func TestBrokerOrderedRetryDoesNotOutwaitItsBudgetForASlot(t *testing.T) {
	t.Parallel()
	// A step that carries the first connection on a loaded machine, and a
	// budget 2 s past the retry's delay over the call and the handoff a
	// retry must still carry to take a slot: due at the delay, it may wait
	// 2 s for one. The delay leaves b-0 time to take the slot first.
	const step, delay = 2 * time.Second, 4 * time.Second
	q := brokerSpec(t, func(q *runtime.QueueSpec) {
		q.OrderKey, q.Concurrency, q.Prefetch = byTenant, 1, 16
		q.HandlerTimeout = time.Second
		q.SettlementBudget = q.HandlerTimeout + 4*step + 2*time.Second + delay + 2*time.Second
		q.Topology.RetryDelays = []time.Duration{delay}
	})
	declareTopology(t, q)
	publishKeyed(t, q.Name, []string{"a"}, 1)
	var calls attempts
	c := start(t, q, func(_ context.Context, msg *fixture.OrderPlacedV1, d runtime.RawDelivery) error {
		calls.add(msg, d)
		switch {
		case msg.OrderID == "a-0" && d.Attempt() == 1:
			return errors.New("ledger busy")
		case msg.OrderID == "b-0" && d.Attempt() == 1:
			time.Sleep(10 * time.Second) // ignores its context, holding the slot
		}
		return nil
	}, func(cfg *runtime.Config) { cfg.StepTimeout = step })
	eventually(t, time.Minute, "a-0 parked", func() bool {
		return c.events.has(func(ev event) bool { return ev.stage == "parked" })
	})
	publishKeyed(t, q.Name, []string{"b"}, 1)
	var first *runtime.Record
	for _, rec := range c.await(4) {
		if rec.MessageID == "a-0" && first == nil {
			first = &rec
		}
	}
	if first == nil || first.Path != runtime.PathRetried || first.Attempt != 1 {
		t.Errorf("a-0's first journey: %+v, want retried through its bucket at attempt 1", first)
	}
	a := slices.DeleteFunc(calls.all(), func(c string) bool { return !strings.HasPrefix(c, "a-") })
	if strings.Join(a, " ") != "a-0@1 a-0@2" {
		t.Errorf("a-0's calls: %v, want attempts 1 and 2", a)
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, bucket(q, delay): {0, 0}})
}

// Deliveries waiting for their key when their session is lost stay in the
// report when the consumer then stops with no session open, and the head of
// their key runs on past the force window, ignoring its context: at the
// final abort the waiters are given up, one after another, and the report
// waits for them before it is sealed. Every message is back in the queue.
func TestBrokerOrderedWaitersOfALostSessionAreReported(t *testing.T) {
	t.Parallel()
	const n = 40
	q := brokerSpec(t, heldHandler, func(q *runtime.QueueSpec) {
		q.OrderKey = func(map[string]any, []byte) string { return "" }
		q.Concurrency, q.Prefetch = 4, n
	})
	declareTopology(t, q)
	publishKeyed(t, q.Name, []string{"a"}, n)
	proxy := newProxy(t)
	running, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	r, c := prepare(t, q, func(_ context.Context, msg *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
		if msg.OrderID == "a-0" {
			close(running)
			<-release // past its context
		}
		return nil
	}, func(cfg *runtime.Config) {
		cfg.URLs = []string{proxy.url()}
		cfg.ShutdownGrace, cfg.ForceWindow = 200*time.Millisecond, 200*time.Millisecond
	})
	// The broker hands all n over, but the client drops what it has not
	// handed on when its connection goes: the cut waits until every one is
	// in its lane, known to the consumer.
	var inLanes atomic.Int32
	c.SetTestHooks(runtime.TestHooks{EnteredLane: func() { inLanes.Add(1) }})
	r.launch(c)
	<-running
	eventually(t, 2*time.Minute, "every delivery in its lane", func() bool { return inLanes.Load() == n }) // a-1 to a-39 wait behind a-0
	// The connection goes, and no other opens: the stop finds no session.
	proxy.freeze()
	proxy.Cut()
	eventually(t, 2*time.Minute, "the session lost", func() bool { return !c.Health().Ready })
	r.cancel()
	<-r.done
	if r.err != nil {
		t.Fatal(r.err)
	}
	unresolved := map[string]string{}
	for _, rec := range r.report.Unresolved {
		unresolved[rec.MessageID] = rec.Reason
	}
	for seq := range n {
		if id := fmt.Sprintf("a-%d", seq); unresolved[id] == "" {
			t.Errorf("%s is not among the unresolved: %v", id, unresolved)
		}
	}
	if got := len(r.report.Unresolved); got != n {
		t.Errorf("%d unresolved, want %d: %s", got, n, r.report)
	}
	proxy.cut()
	assertCounts(t, map[string][2]int{q.Name: {n, 0}})
}

// A delivery whose turn comes with the stop goes back behind the one before
// it, which the stop requeued, and does not run ahead of it. k-0 waits for
// the one slot, which x-0 holds; k-1's worker is held until the stop has
// requeued k-0 and x-0 has freed the slot: its turn, a slot and the stop
// are then all there at once.
func TestBrokerOrderedTurnAtTheStopGoesBackInOrder(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, heldHandler, func(q *runtime.QueueSpec) {
		q.OrderKey = byTenant
		q.Concurrency, q.Prefetch = 1, 10
	})
	declareTopology(t, q)
	publishKeyed(t, q.Name, []string{"x"}, 1)
	running, release, turn := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var ran []string
	r, c := prepare(t, q, func(_ context.Context, msg *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
		mu.Lock()
		ran = append(ran, msg.OrderID)
		mu.Unlock()
		if msg.OrderID == "x-0" {
			close(running)
			<-release
		}
		return nil
	}, func(cfg *runtime.Config) { cfg.StepTimeout = 30 * time.Second })
	var inLanes atomic.Int32
	c.SetTestHooks(runtime.TestHooks{
		EnteredLane: func() { inLanes.Add(1) },
		LaneTurn: func(id string) {
			if id == "k-1" {
				<-turn
			}
		},
	})
	r.launch(c)
	<-running // x-0 holds the one slot
	publishKeyed(t, q.Name, []string{"k"}, 2)
	eventually(t, 2*time.Minute, "every delivery in its lane", func() bool { return inLanes.Load() == 3 })
	path := func(id string) runtime.Path {
		for _, rec := range r.recorded() {
			if rec.MessageID == id {
				return rec.Path
			}
		}
		return ""
	}
	r.cancel()
	eventually(t, 2*time.Minute, "k-0 requeued by the stop", func() bool { return path("k-0") == runtime.PathNotStarted })
	close(release)
	eventually(t, 2*time.Minute, "x-0 acked", func() bool { return path("x-0") == runtime.PathAcked })
	close(turn)
	<-r.done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if p := path("k-1"); p != runtime.PathNotStarted || !slices.Equal(ran, []string{"x-0"}) {
		t.Errorf("k-1 %q, want not started; handlers ran for %v, want x-0 alone", p, ran)
	}
	assertCounts(t, map[string][2]int{q.Name: {2, 0}})
	var ids []string
	for _, d := range drain(t, q.Name) {
		ids = append(ids, d.MessageId)
	}
	if !slices.Equal(ids, []string{"k-0", "k-1"}) {
		t.Errorf("the queue holds %v, want k-0 then k-1", ids)
	}
}

// A delivery waiting for a slot when the stop comes does not start on one
// that frees before the cancel is answered: it goes back not started, on
// an ordered queue as on an unordered one. b-0 waits for the one slot,
// which x-0 holds until the stop's cancel is under way.
func TestBrokerSlotFreedAtTheStopStartsNothing(t *testing.T) {
	t.Parallel()
	for _, ordered := range []bool{false, true} {
		t.Run(fmt.Sprint("ordered=", ordered), func(t *testing.T) {
			t.Parallel()
			q := brokerSpec(t, heldHandler, func(q *runtime.QueueSpec) {
				q.Concurrency, q.Prefetch = 1, 4
				if ordered {
					q.OrderKey = byTenant
				}
			})
			declareTopology(t, q)
			publishKeyed(t, q.Name, []string{"x"}, 1)
			running, release, bRan := make(chan struct{}), make(chan struct{}), make(chan struct{})
			var calls attempts
			r, c := prepare(t, q, func(_ context.Context, msg *fixture.OrderPlacedV1, d runtime.RawDelivery) error {
				calls.add(msg, d)
				switch msg.OrderID {
				case "x-0":
					close(running)
					<-release
				case "b-0":
					close(bRan)
				}
				return nil
			}, func(cfg *runtime.Config) { cfg.StepTimeout = 30 * time.Second })
			turn := make(chan struct{})
			c.SetTestHooks(runtime.TestHooks{
				LaneTurn: func(id string) {
					if id == "b-0" {
						close(turn)
					}
				},
				// x-0 ends, and frees the slot, as the cancel is under way;
				// the cancel waits a while for b-0 to start on it.
				BeforeCancel: func() {
					close(release)
					for deadline := time.Now().Add(30 * time.Second); len(r.recorded()) == 0 && time.Now().Before(deadline); {
						time.Sleep(10 * time.Millisecond)
					}
					select {
					case <-bRan:
					case <-time.After(time.Second):
					}
				},
			})
			r.launch(c)
			<-running
			publishKeyed(t, q.Name, []string{"b"}, 1)
			if ordered {
				<-turn
			}
			awaitTaken(t, q.Name)
			// b-0 reaches its wait for the slot.
			time.Sleep(200 * time.Millisecond)
			r.cancel()
			<-r.done
			if r.err != nil {
				t.Fatal(r.err)
			}
			paths := map[string]runtime.Path{}
			for _, rec := range r.recorded() {
				paths[rec.MessageID] = rec.Path
			}
			if !slices.Equal(calls.all(), []string{"x-0@1"}) || paths["x-0"] != runtime.PathAcked || paths["b-0"] != runtime.PathNotStarted {
				t.Errorf("handlers ran for %v, records %v; want x-0 alone, acked, and b-0 not started", calls.all(), paths)
			}
			assertCounts(t, map[string][2]int{q.Name: {1, 0}})
		})
	}
}

// An inbox that defers a claim on an ordered queue keeps the delivery in
// line: the claim is asked again there, and the key's next message waits
// behind it, where a requeue would have let it pass. No retry is spent.
func TestBrokerOrderedDeferralWaitsInLine(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, func(q *runtime.QueueSpec) {
		q.OrderKey, q.Concurrency, q.Prefetch = byTenant, 4, 16
	})
	declareTopology(t, q)
	publishKeyed(t, q.Name, []string{"a"}, 3)
	in := &deferOnce{id: "a-0"}
	var mu sync.Mutex
	var calls []string
	c := start(t, q, func(_ context.Context, msg *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
		mu.Lock()
		calls = append(calls, msg.OrderID)
		mu.Unlock()
		return nil
	}, func(cfg *runtime.Config) { cfg.Inbox = in })
	recs := c.await(3)
	for _, rec := range recs {
		if rec.Path != runtime.PathAcked || rec.Attempt != 1 {
			t.Errorf("%s: %+v, want acked at attempt 1", rec.MessageID, rec)
		}
	}
	mu.Lock()
	got := strings.Join(calls, " ")
	mu.Unlock()
	if got != "a-0 a-1 a-2" || in.begun.Load() != 4 {
		t.Errorf("handler calls %s after %d claims; want a-0 a-1 a-2 after 4", got, in.begun.Load())
	}
	if !c.events.has(func(ev event) bool {
		return ev.stage == "parked" && strings.Contains(ev.detail, "claimed again in line")
	}) {
		t.Error("no parked event for the deferral in the diagnostics")
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, bucket(q, q.Topology.RetryDelays[0]): {0, 0}, q.Topology.DeadLetterQueue: {0, 0}})
}

// deferOnce is an inbox whose first claim of id is deferred, and every
// other claim made.
type deferOnce struct {
	id       string
	begun    atomic.Int32
	deferred atomic.Bool
}

func (i *deferOnce) Begin(_ context.Context, _, id string) (runtime.InboxTx, error) {
	i.begun.Add(1)
	if id == i.id && !i.deferred.Swap(true) {
		return nil, errors.New("lease held by another worker")
	}
	return rollbackTx{&rollbackInbox{}}, nil
}

// On an ordered queue, a delivery whose budget was spent waiting for a slot
// (the one slot held by x-0, past its timeout) starts nothing when the slot
// frees, a moment before the recycle: it waits for the recycle, which
// requeues it ahead of its key's next delivery, and both then run in their
// order, each once. Started at once, its handler's result could only be left
// unresolved, and requeued at once, it would come back behind y-1.
func TestBrokerOrderedDeliveryWhoseBudgetWasSpentWaitsForTheRecycle(t *testing.T) {
	t.Parallel()
	// A step wide enough for the slot to free within it, after y-0's budget
	// and before the recycle, on a loaded machine: the recycle comes a step
	// after x-0's budget, which began before y-0's by the time y-0 took to
	// be published and reach its lane, so each side has less than half a
	// step (with 3 s, a run under -race beside other work once missed it).
	const step = 6 * time.Second
	q := brokerSpec(t, hourRetry, func(q *runtime.QueueSpec) {
		q.OrderKey = byTenant
		q.Concurrency, q.Prefetch = 1, 10
		q.HandlerTimeout = time.Second
		q.SettlementBudget = q.HandlerTimeout + 4*step + 2*time.Second
	})
	declareTopology(t, q)
	running, release := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var ran []string
	r, c := prepare(t, q, func(_ context.Context, msg *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
		mu.Lock()
		ran = append(ran, msg.OrderID)
		mu.Unlock()
		if msg.OrderID == "x-0" {
			close(running)
			<-release // past its timeout: it holds the one slot
		}
		return nil
	}, func(cfg *runtime.Config) { cfg.StepTimeout = step })
	var inLanes atomic.Int32
	var entered atomic.Int64 // when y-0 took its place in its lane, Unix ns
	c.SetTestHooks(runtime.TestHooks{EnteredLane: func() {
		if inLanes.Add(1) == 2 {
			entered.Store(time.Now().UnixNano())
		}
	}})
	r.launch(c)
	publishKeyed(t, q.Name, []string{"x"}, 1)
	<-running
	publishKeyed(t, q.Name, []string{"y"}, 2)
	eventually(t, 2*time.Minute, "every delivery in its lane", func() bool { return inLanes.Load() == 3 })
	// y-0's budget counts from the end of its wait for the lane, which was
	// none, a moment after it entered it: the slot frees half a step after
	// it is spent, half a step before the recycle.
	time.Sleep(time.Until(time.Unix(0, entered.Load()).Add(q.SettlementBudget + step/2)))
	close(release)
	acked := func(id string) bool {
		return slices.ContainsFunc(r.recorded(), func(rec runtime.Record) bool { return rec.MessageID == id && rec.Path == runtime.PathAcked })
	}
	eventually(t, time.Minute, "y-0 and y-1 acked", func() bool { return acked("y-0") && acked("y-1") })
	rep := r.stop()
	var requeued []string
	for _, rec := range r.recorded() {
		switch {
		case rec.Path == runtime.PathNotStarted:
			requeued = append(requeued, rec.MessageID+": "+rec.Reason)
		case rec.Path == runtime.PathUnresolved:
			t.Errorf("%s left unresolved: %s", rec.MessageID, rec.Reason)
		}
	}
	want := []string{"y-0: not started: its settlement budget was spent while it waited for a slot", "y-1: not started: intake stopped while it waited for its order key"}
	if !slices.Equal(requeued, want) {
		t.Errorf("requeued %q, want %q", requeued, want)
	}
	mu.Lock()
	if !slices.Equal(ran, []string{"x-0", "y-0", "y-1"}) {
		t.Errorf("handlers ran for %v, want x-0, then y-0, then y-1", ran)
	}
	mu.Unlock()
	if len(rep.Unresolved) != 0 {
		t.Errorf("report %s", rep)
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, q.Topology.DeadLetterQueue: {0, 0}})
}

// A settled, recorded delivery leaves its lane before the telemetry hook
// hears of it, as it leaves its slot: a hung Settled of a-0 held a-1 from
// its turn, a-1 and a-2 then filled the prefetch of two, and b-0, another
// key, was never delivered: the whole queue stopped behind one hook.
func TestBrokerOrderedSlowSettledLeavesTheLane(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, func(q *runtime.QueueSpec) {
		q.OrderKey, q.Concurrency, q.Prefetch = byTenant, 4, 2
	})
	declareTopology(t, q)
	var msgs []amqp.Publishing
	for _, id := range []string{"a-0", "a-1", "a-2", "b-0"} {
		msgs = append(msgs, produce(t, id, &fixture.OrderPlacedV1{OrderID: id, Headers: fixture.OrderPlacedV1Headers{XTenant: new(id[:1])}}))
	}
	publish(t, q.Name, msgs...)
	tel := slowSettled{id: "a-0", entered: make(chan struct{}), release: make(chan struct{})}
	var calls attempts
	c := start(t, q, func(_ context.Context, msg *fixture.OrderPlacedV1, d runtime.RawDelivery) error {
		calls.add(msg, d)
		return nil
	}, func(cfg *runtime.Config) { cfg.Telemetry = tel })
	var released sync.Once
	release := func() { released.Do(func() { close(tel.release) }) }
	t.Cleanup(release)
	select {
	case <-tel.entered:
	case <-time.After(time.Minute):
		t.Fatal("a-0 was never settled")
	}
	eventually(t, time.Minute, "a-1, a-2 and b-0 handled while a-0's Settled blocks", func() bool {
		return len(calls.all()) == 4
	})
	release()
	recs := c.await(4)
	for _, rec := range recs {
		wantPath(t, rec, runtime.PathAcked)
	}
	var as []string
	for _, call := range calls.all() {
		if strings.HasPrefix(call, "a-") {
			as = append(as, call)
		}
	}
	if got, want := strings.Join(as, " "), "a-0@1 a-1@1 a-2@1"; got != want {
		t.Errorf("tenant a's calls %s, want %s", got, want)
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, q.Topology.DeadLetterQueue: {0, 0}})
}

// A cleanup past its step is given up on and runs on: the retry in line
// must not call the handler again beside it, any more than beside a handler
// past its timeout. a-0's first cleanup runs 8 s, its step 3 s; a-0 goes
// through its bucket instead (had it waited in line, its second call would
// have come after the delay all the same: the delay here outlasts the
// cleanup, so neither overlaps it). The step is long enough for the
// handoff's dial, channel and confirm on a loaded machine: a handoff past
// it would NACK a-0 back to the queue, a call the test does not expect.
func TestBrokerOrderedAbandonedCleanupIsNotRetriedBesideIt(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, func(q *runtime.QueueSpec) {
		q.OrderKey, q.Concurrency, q.Prefetch = byTenant, 4, 8
		q.MaxAttempts, q.SettlementBudget = 3, time.Minute
		q.Topology.RetryDelays = []time.Duration{10 * time.Second}
	})
	declareTopology(t, q)
	publishKeyed(t, q.Name, []string{"a"}, 1)
	var calls attempts
	var cleaning atomic.Bool
	var overlaps atomic.Int32
	c := start(t, q, func(_ context.Context, msg *fixture.OrderPlacedV1, d runtime.RawDelivery) error {
		calls.add(msg, d)
		if cleaning.Load() {
			overlaps.Add(1)
		}
		return nil
	}, func(cfg *runtime.Config) {
		cfg.StepTimeout = 3 * time.Second
		cfg.Scope = func(ctx context.Context, d runtime.RawDelivery) (context.Context, func(context.Context) error, error) {
			return ctx, func(context.Context) error {
				if d.Attempt() == 1 {
					cleaning.Store(true)
					time.Sleep(8 * time.Second) // past its step
					cleaning.Store(false)
				}
				return nil
			}, nil
		}
	})
	eventually(t, time.Minute, "a-0's second call", func() bool { return len(calls.all()) == 2 })
	if n := overlaps.Load(); n > 0 {
		t.Errorf("calls %q: %d while the first cleanup still ran", calls.all(), n)
	}
	recs := byAttempt(c.await(2))
	if recs[0].Attempt != 1 || recs[0].Path != runtime.PathRetried || recs[1].Attempt != 2 || recs[1].Path != runtime.PathAcked {
		t.Errorf("records %+v, want attempt 1 retried through its bucket, attempt 2 acked", recs)
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, bucket(q, q.Topology.RetryDelays[0]): {0, 0}})
}

// A deferred claim whose scope's cleanup is given up on at its step is
// requeued, not claimed again in line: that claim would open a scope and call
// the handler beside the cleanup that still runs. a-0's first claim is
// deferred and its first cleanup runs 3 s, its step 1 s; a-0 comes back from
// the queue and waits for its lane until that cleanup returns.
func TestBrokerOrderedDeferralBesideAnAbandonedCleanupIsRequeued(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, func(q *runtime.QueueSpec) {
		q.OrderKey, q.Concurrency, q.Prefetch = byTenant, 4, 8
		q.SettlementBudget = time.Minute
	})
	declareTopology(t, q)
	publishKeyed(t, q.Name, []string{"a"}, 1)
	var opens, cleaning, overlaps atomic.Int32
	var calls atomic.Int32
	c := start(t, q, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error {
		if calls.Add(1); cleaning.Load() != 0 {
			overlaps.Add(1)
		}
		return nil
	}, func(cfg *runtime.Config) {
		cfg.Inbox = &deferOnce{id: "a-0"}
		cfg.StepTimeout = time.Second
		cfg.Scope = func(ctx context.Context, _ runtime.RawDelivery) (context.Context, func(context.Context) error, error) {
			if cleaning.Load() != 0 {
				overlaps.Add(1)
			}
			first := opens.Add(1) == 1
			return ctx, func(context.Context) error {
				if first {
					cleaning.Store(1)
					time.Sleep(3 * time.Second) // past its step
					cleaning.Store(0)
				}
				return nil
			}, nil
		}
	})
	eventually(t, time.Minute, "a-0's handler call", func() bool { return calls.Load() > 0 })
	if n := overlaps.Load(); n > 0 {
		t.Fatalf("%d scope opens or handler calls while the first cleanup still ran", n)
	}
	recs := c.await(2)
	if recs[0].Path != runtime.PathRequeued || recs[1].Path != runtime.PathAcked || calls.Load() != 1 {
		t.Errorf("records %+v after %d handler calls; want a-0 requeued, then acked after one call", recs, calls.Load())
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, q.Topology.DeadLetterQueue: {0, 0}})
}

// publishOrders publishes an order for each id, in turn: its x-tenant is
// the id's first byte.
func publishOrders(t *testing.T, queue string, ids ...string) {
	t.Helper()
	var msgs []amqp.Publishing
	for _, id := range ids {
		msgs = append(msgs, produce(t, id, &fixture.OrderPlacedV1{OrderID: id, Headers: fixture.OrderPlacedV1Headers{XTenant: new(id[:1])}}))
	}
	publish(t, queue, msgs...)
}

// slowCleanup is a Config.Scope whose cleanup runs cleanup for the
// delivery of message id, and returns at once for the others.
func slowCleanup(id string, cleanup func()) func(context.Context, runtime.RawDelivery) (context.Context, func(context.Context) error, error) {
	return func(ctx context.Context, d runtime.RawDelivery) (context.Context, func(context.Context) error, error) {
		return ctx, func(context.Context) error {
			if d.MessageID() == id {
				cleanup()
			}
			return nil
		}, nil
	}
}

// A cleanup given up on at its step runs on, and holds its key's lane
// until it returns within the delivery's budget: a-1 starts only after
// a-0's cleanup returned, though a-0's journey had ended (dead-lettered:
// its cleanup failed, and it has one attempt). The lane holds no slot:
// b-0, another key published once the cleanup runs, takes the one slot
// meanwhile (the cleanup returns only once b-0 was handled, 8 s at least).
// The step, 3 s, is long enough for a-0's handoff to the DLQ (dial,
// channel, confirm) on a loaded machine: a handoff past it would NACK a-0
// back to the queue, a call the test does not expect.
func TestBrokerOrderedAbandonedCleanupHoldsTheLane(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, func(q *runtime.QueueSpec) {
		q.OrderKey, q.Concurrency, q.Prefetch = byTenant, 1, 8
		q.MaxAttempts, q.SettlementBudget = 1, time.Minute
	})
	declareTopology(t, q)
	publishOrders(t, q.Name, "a-0", "a-1")
	var cleaning atomic.Bool
	started, bHandled := make(chan struct{}), make(chan struct{})
	var calls, beside attempts // beside: the calls while a-0's cleanup ran
	c := start(t, q, func(_ context.Context, msg *fixture.OrderPlacedV1, d runtime.RawDelivery) error {
		calls.add(msg, d)
		if cleaning.Load() {
			beside.add(msg, d)
		}
		if msg.OrderID == "b-0" {
			close(bHandled)
		}
		return nil
	}, func(cfg *runtime.Config) {
		cfg.StepTimeout = 3 * time.Second
		cfg.Scope = slowCleanup("a-0", func() {
			cleaning.Store(true)
			close(started)
			time.Sleep(8 * time.Second) // past its step, within the budget
			select {
			case <-bHandled:
			case <-time.After(30 * time.Second):
			}
			cleaning.Store(false)
		})
	})
	<-started
	publishOrders(t, q.Name, "b-0")
	eventually(t, time.Minute, "three calls", func() bool { return len(calls.all()) == 3 })
	if got := beside.all(); !slices.Equal(got, []string{"b-0@1"}) {
		t.Errorf("calls while a-0's cleanup ran %q, want only b-0's (all calls %q)", got, calls.all())
	}
	onlyA0DeadLettered(t, q, c, 3)
}

// A handler past its timeout runs on, and holds its key's lane until it
// returns within the delivery's budget: a-1 starts only after a-0's
// handler returned, though a-0's journey had ended (dead-lettered: it has
// one attempt).
func TestBrokerOrderedHandlerPastItsTimeoutHoldsTheLane(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, func(q *runtime.QueueSpec) {
		q.OrderKey, q.Concurrency, q.Prefetch = byTenant, 4, 8
		q.MaxAttempts, q.SettlementBudget, q.HandlerTimeout = 1, time.Minute, time.Second
	})
	declareTopology(t, q)
	publishOrders(t, q.Name, "a-0", "a-1")
	var running atomic.Bool // a-0's handler
	var calls, beside attempts
	c := start(t, q, func(_ context.Context, msg *fixture.OrderPlacedV1, d runtime.RawDelivery) error {
		calls.add(msg, d)
		if running.Load() {
			beside.add(msg, d)
		}
		if msg.OrderID == "a-0" {
			running.Store(true)
			time.Sleep(4 * time.Second) // past its timeout, within the budget
			running.Store(false)
		}
		return nil
	})
	eventually(t, time.Minute, "two calls", func() bool { return len(calls.all()) == 2 })
	if got := beside.all(); len(got) > 0 {
		t.Errorf("calls while a-0's handler ran %q, want none", got)
	}
	onlyA0DeadLettered(t, q, c, 2)
}

// A cleanup that outlives the delivery's budget holds its key's lane no
// longer: a-1 starts once a-0's budget has ended, beside the cleanup still
// running, so that one hung step cannot fill the prefetch and stop the
// queue for good. The step, 3 s, is long enough for a-0's handoff to the
// DLQ (dial, channel, confirm) on a loaded machine: a handoff past it
// would NACK a-0 back to the queue, and a-0 would not be dead-lettered.
func TestBrokerOrderedCleanupPastTheBudgetLeavesTheLane(t *testing.T) {
	t.Parallel()
	const step = 3 * time.Second
	q := brokerSpec(t, func(q *runtime.QueueSpec) {
		q.OrderKey, q.Concurrency, q.Prefetch = byTenant, 4, 8
		// The least NewConsumer takes: the handler timeout, five steps and
		// the handoff's reserve.
		q.MaxAttempts, q.HandlerTimeout = 1, time.Second
		q.SettlementBudget = q.HandlerTimeout + 5*step + 2*time.Second
	})
	declareTopology(t, q)
	publishOrders(t, q.Name, "a-0", "a-1")
	cleaning, release := make(chan struct{}), make(chan struct{})
	var released sync.Once
	t.Cleanup(func() { released.Do(func() { close(release) }) })
	var calls attempts
	var besideCleanup atomic.Bool
	c := start(t, q, func(_ context.Context, msg *fixture.OrderPlacedV1, d runtime.RawDelivery) error {
		calls.add(msg, d)
		if msg.OrderID == "a-1" {
			select {
			case <-cleaning:
				select {
				case <-release:
				default:
					besideCleanup.Store(true)
				}
			default:
			}
		}
		return nil
	}, func(cfg *runtime.Config) {
		cfg.StepTimeout = step
		cfg.Scope = slowCleanup("a-0", func() {
			close(cleaning)
			<-release // past the budget
		})
	})
	eventually(t, 2*time.Minute, "a-1 handled while a-0's cleanup still runs", func() bool { return len(calls.all()) == 2 })
	released.Do(func() { close(release) })
	if got := calls.all(); !slices.Equal(got, []string{"a-0@1", "a-1@1"}) || !besideCleanup.Load() {
		t.Errorf("calls %q (a-1 beside a-0's cleanup: %t), want a-0@1 then a-1@1 beside it", got, besideCleanup.Load())
	}
	onlyA0DeadLettered(t, q, c, 2)
}

// onlyA0DeadLettered awaits n records of c's, and wants a-0's dead-lettered
// (it has one attempt) and every other acked: the queue empty, a-0 alone in
// the DLQ.
func onlyA0DeadLettered(t *testing.T, q runtime.QueueSpec, c *running, n int) {
	t.Helper()
	for _, rec := range c.await(n) {
		want := runtime.PathAcked
		if rec.MessageID == "a-0" {
			want = runtime.PathDeadLettered
		}
		wantPath(t, rec, want)
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, q.Topology.DeadLetterQueue: {1, 0}})
}
