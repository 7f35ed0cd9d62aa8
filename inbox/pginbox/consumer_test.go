package pginbox_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/inbox/pginbox"
	"github.com/lily-mq/lily/internal/faults"
	"github.com/lily-mq/lily/internal/queue"
	"github.com/lily-mq/lily/internal/services"
	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/topology"
)

// The inbox with the runtime on the real RabbitMQ and PostgreSQL: each test
// asserts the business rows, the claim rows and where every message is.

// consumerEnv is one test's queue, consumed with the inbox into e's table.
type consumerEnv struct {
	*env
	brokerURL string
	spec      runtime.QueueSpec
	runs      atomic.Int32 // handler runs
	mu        sync.Mutex
	recs      []runtime.Record
	added     chan struct{}
}

func newConsumerEnv(t *testing.T) *consumerEnv {
	e := newEnv(t)
	c := &consumerEnv{env: e, brokerURL: services.RabbitMQ(t), added: make(chan struct{}, 64), spec: runtime.QueueSpec{
		Name: e.prefix, Prefetch: 8, Concurrency: 4, MaxAttempts: 3,
		Topology:     topology.Queue{Type: topology.Classic, DeadLetterQueue: e.prefix + ".dlq", RetryDelays: []time.Duration{300 * time.Millisecond}},
		MaxBodyBytes: 4096, HandlerTimeout: 10 * time.Second,
		Messages: []envelope.Message{{Type: "Payment", Inbox: envelope.InboxRequired}},
	}}
	if err := runtime.DeclareTopology(c.conn(), c.spec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ch := c.channel()
		t := queue.Topology{Name: c.spec.Name, Queue: c.spec.Topology}
		for _, d := range queue.Declarations(t) {
			_, _ = ch.QueueDelete(d.Name, false, false, false)
		}
	})
	return c
}

func (c *consumerEnv) channel() *amqp.Channel {
	c.t.Helper()
	ch, err := c.conn().Channel()
	if err != nil {
		c.t.Fatal(err)
	}
	return ch
}

// conn is a connection of the test's own, closed when it ends.
func (c *consumerEnv) conn() *amqp.Connection {
	c.t.Helper()
	conn, err := amqp.Dial(c.brokerURL)
	if err != nil {
		c.t.Fatalf("RabbitMQ is not reachable: %v", err)
	}
	c.t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func (c *consumerEnv) publish(ids ...string) {
	c.t.Helper()
	ch := c.channel()
	if err := ch.Confirm(false); err != nil {
		c.t.Fatal(err)
	}
	for _, id := range ids {
		dc, err := ch.PublishWithDeferredConfirm("", c.spec.Name, true, false,
			runtime.NewPublishing(envelope.Message{Type: "Payment"}, 1, id, []byte(`{"key":"k"}`)))
		if err != nil || !dc.Wait() {
			c.t.Fatalf("publish %s: %v", id, err)
		}
	}
}

// handle writes the business row in the claim's transaction, after do.
func (c *consumerEnv) handle(do func(ctx context.Context, d runtime.RawDelivery) error) runtime.Routes {
	return runtime.Routes{{Type: "Payment", Version: 1, ContentType: "application/json"}: func(ctx context.Context, d runtime.RawDelivery) error {
		c.runs.Add(1)
		if err := c.write(ctx, "k", 0); err != nil {
			return err
		}
		if do != nil {
			return do(ctx, d)
		}
		return nil
	}}
}

// run starts a consumer with cfg's hooks and returns its stop function.
func (c *consumerEnv) run(inbox *pginbox.Inbox, routes runtime.Routes, tweak func(*runtime.Config)) func() *runtime.Report {
	c.t.Helper()
	cfg := runtime.Config{URLs: []string{c.brokerURL}, Observe: func(r runtime.Record) {
		c.mu.Lock()
		c.recs = append(c.recs, r)
		c.mu.Unlock()
		c.added <- struct{}{}
	}, ShutdownGrace: 5 * time.Second}
	if tweak != nil {
		tweak(&cfg)
	}
	cfg.Inbox = inbox
	consumer, err := runtime.NewConsumer(c.spec, routes, cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan *runtime.Report, 1)
	go func() {
		rep, err := consumer.Run(ctx)
		if err != nil {
			c.t.Errorf("Run: %v", err)
		}
		done <- rep
	}()
	var once sync.Once
	var rep *runtime.Report
	stop := func() *runtime.Report {
		once.Do(func() { cancel(); rep = <-done })
		return rep
	}
	c.t.Cleanup(func() { stop() })
	return stop
}

// settled counts the records written so far.
func (c *consumerEnv) settled() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.recs)
}

// await waits for n records in all and returns them.
func (c *consumerEnv) await(n int) []runtime.Record {
	c.t.Helper()
	deadline := time.After(2 * time.Minute)
	for {
		c.mu.Lock()
		got := append([]runtime.Record(nil), c.recs...)
		c.mu.Unlock()
		if len(got) >= n {
			return got
		}
		select {
		case <-c.added:
		case <-deadline:
			c.t.Fatalf("%d of %d records after 2 min: %+v", len(got), n, got)
		}
	}
}

// byAttempt returns recs in attempt order, stably: a retry copy back from
// its bucket may be recorded before the delivery that handed it off, whose
// record follows its ACK.
func byAttempt(recs []runtime.Record) []runtime.Record {
	sorted := slices.Clone(recs)
	slices.SortStableFunc(sorted, func(a, b runtime.Record) int { return cmp.Compare(a.Attempt, b.Attempt) })
	return sorted
}

// expectRows wants n business rows and n claim rows of id.
func (c *consumerEnv) expectRows(id string, n int) {
	c.t.Helper()
	rows, err := c.countRows(c.ctx, "k")
	if err != nil {
		c.t.Fatal(err)
	}
	claims, err := c.countClaims(c.ctx, c.spec.Name, id)
	if err != nil {
		c.t.Fatal(err)
	}
	if rows != n || claims != n {
		c.t.Errorf("%d business rows, %d claim rows of %s; want %d", rows, claims, id, n)
	}
}

// expectQueues wants these ready counts, and nothing unacknowledged, in the
// test's queues.
func (c *consumerEnv) expectQueues(main, dlq int) {
	c.t.Helper()
	want := map[string]int{c.spec.Name: main, c.spec.Topology.DeadLetterQueue: dlq}
	before := c.settled()
	// A record is written once the ACK is, before the broker has taken it:
	// the counts are polled until they match, or the deadline. No delivery
	// may settle meanwhile: the consumers still run, and would hide a copy.
	defer func() {
		if n := c.settled() - before; n != 0 {
			c.t.Errorf("%d deliveries settled while the queues were read", n)
		}
	}()
	var problems []string
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(250 * time.Millisecond) {
		problems = c.queueProblems(want)
		if len(problems) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, p := range problems {
		c.t.Error(p)
	}
}

// queueProblems says how the queues' counts differ from want (ready, with
// nothing unacknowledged).
func (c *consumerEnv) queueProblems(want map[string]int) []string {
	counts := services.QueueCounts(c.t)
	var problems []string
	for _, name := range slices.Sorted(maps.Keys(want)) {
		if n, ok := counts[name]; !ok {
			problems = append(problems, "queue missing: "+name)
		} else if n.Ready != want[name] || n.Unacked != 0 {
			problems = append(problems, fmt.Sprintf("queue %s: %d ready, %d unacked; want %d ready, 0 unacked", name, n.Ready, n.Unacked, want[name]))
		}
	}
	return problems
}

// a. The work commits, then the connection dies before the ACK; the broker
// redelivers to a consumer that never saw the first delivery. The inbox finds
// the committed claim: ACK without a second handler run or a second write.
func TestRedeliveryAfterCommitIsAckedAsDuplicate(t *testing.T) {
	t.Parallel()
	c := newConsumerEnv(t)
	inbox := pginbox.New(c.pool, pginbox.Options{})
	c.publish("pay-1")
	var cut atomic.Bool
	stopFirst := c.run(inbox, c.handle(nil), func(cfg *runtime.Config) {
		// The cut runs rabbitmqctl twice inside after_delivery's step: on a
		// loaded machine that takes longer than the default step.
		cfg.StepTimeout = 30 * time.Second
		cfg.AfterDelivery = func(context.Context, runtime.RawDelivery, runtime.Record) error {
			if cut.CompareAndSwap(false, true) {
				name := faults.ConnectionName(c.spec.Name, "consume")
				if closed, err := faults.CloseConnections(context.Background(), func(n string) bool { return n == name }, "lily test"); err != nil || len(closed) != 1 {
					t.Errorf("close %s: %v, %v", name, closed, err)
				}
			}
			return nil
		}
	})
	// The first consumer reconnects while its delivery is still in
	// after_delivery's step, and may meet the redelivery then: it defers it,
	// the same message being in hand, without an attempt. next skips that.
	n := 0
	next := func() runtime.Record {
		for {
			n++
			rec := c.await(n)[n-1]
			if rec.Path != runtime.PathRequeued || rec.Attempt != 1 || !strings.Contains(rec.Reason, "another delivery in this consumer") {
				return rec
			}
		}
	}
	first := next()
	stopFirst()
	if first.Commit != "committed" || first.Path != runtime.PathUnresolved {
		t.Fatalf("first delivery: commit %s, path %s (%s)", first.Commit, first.Path, first.Reason)
	}
	c.run(inbox, c.handle(nil), nil)
	if second := next(); second.Path != runtime.PathAcked || second.Commit != "duplicate" || !second.Redelivered {
		t.Errorf("redelivery: %+v", second)
	}
	if c.runs.Load() != 1 {
		t.Errorf("handler ran %d times", c.runs.Load())
	}
	c.expectRows("pay-1", 1)
	c.expectQueues(0, 0)
}

// b, d. Two workers get one message id at once: one runs; the other waits on
// its claim, defers (no application retry: its attempt stays 1), and later
// finds the duplicate.
func TestConcurrentClaimsOneRunsTheOtherDefers(t *testing.T) {
	t.Parallel()
	c := newConsumerEnv(t)
	c.spec.Prefetch, c.spec.Concurrency = 1, 1 // one message each
	// The handler holds its claim until the other worker has tried it and
	// deferred, however late that worker attaches: its timeout is long.
	c.spec.HandlerTimeout = time.Minute
	inbox := pginbox.New(c.pool, pginbox.Options{LockTimeout: 200 * time.Millisecond})
	c.publish("pay-2", "pay-2")
	release := make(chan struct{})
	slow := c.handle(func(ctx context.Context, _ runtime.RawDelivery) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	c.run(inbox, slow, nil)
	c.run(inbox, slow, nil)
	var handled, deferred, duplicate int
	released := false
	for deadline := time.Now().Add(time.Minute); handled+duplicate < 2; {
		if time.Now().After(deadline) {
			t.Fatalf("handled %d, deferred %d, duplicate %d", handled, deferred, duplicate)
		}
		if deferred > 0 && !released {
			close(release)
			released = true
		}
		handled, deferred, duplicate = 0, 0, 0
		for _, r := range c.await(c.settled() + 1) {
			if r.Attempt != 1 {
				t.Errorf("a deferral changed the attempt: %+v", r)
			}
			switch {
			case r.Commit == "committed" && r.Path == runtime.PathAcked:
				handled++
			case r.Commit == "deferred" && r.Path == runtime.PathRequeued:
				deferred++
			case r.Commit == "duplicate" && r.Path == runtime.PathAcked:
				duplicate++
			default:
				t.Errorf("unexpected record %+v", r)
			}
		}
	}
	if handled != 1 || duplicate != 1 || deferred < 1 || c.runs.Load() != 1 {
		t.Errorf("handled %d, deferred %d, duplicate %d, runs %d", handled, deferred, duplicate, c.runs.Load())
	}
	c.expectRows("pay-2", 1)
	c.expectQueues(0, 0)
}

// c. The database connection is killed while COMMIT runs. The inbox resolves
// it (here aborted) and the delivery takes the retry; the retry writes once.
// Never a double write, never a lost message.
func TestConnectionKilledDuringCommitNeverWritesTwice(t *testing.T) {
	t.Parallel()
	c := newConsumerEnv(t)
	inbox := pginbox.New(c.pool, pginbox.Options{})
	c.publish("pay-3")
	var first atomic.Bool
	c.run(inbox, runtime.Routes{{Type: "Payment", Version: 1, ContentType: "application/json"}: func(ctx context.Context, d runtime.RawDelivery) error {
		c.runs.Add(1)
		if !first.CompareAndSwap(false, true) {
			return c.write(ctx, "k", 0)
		}
		if err := c.write(ctx, "k", 30); err != nil { // its COMMIT sleeps
			return err
		}
		tx, _ := pginbox.Tx(ctx)
		pid := tx.Conn().PgConn().PID()
		go func() {
			c.waitUntil("the backend to sleep in COMMIT",
				"SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND wait_event = 'PgSleep')", pid)
			_, _ = c.pool.Exec(c.ctx, "SELECT pg_terminate_backend($1)", int64(pid))
		}()
		return nil
	}}, nil)
	recs := byAttempt(c.await(2))
	if recs[0].Commit != "failed" || recs[0].Path != runtime.PathRetried {
		t.Errorf("first delivery: commit %s, path %s (%s)", recs[0].Commit, recs[0].Path, recs[0].Reason)
	}
	if recs[1].Commit != "committed" || recs[1].Path != runtime.PathAcked || recs[1].Attempt != 2 {
		t.Errorf("retry: %+v", recs[1])
	}
	c.expectRows("pay-3", 1)
	c.expectQueues(0, 0)
}

// e. The scope's cleanup fails after the transaction committed: the delivery
// takes the retry path (no ACK without the cleanup), and the retry copy meets
// the inbox's duplicate, so the handler does not run again.
func TestCleanupFailureAfterCommitTakesTheRetryAndMeetsTheDuplicate(t *testing.T) {
	t.Parallel()
	c := newConsumerEnv(t)
	inbox := pginbox.New(c.pool, pginbox.Options{})
	c.publish("pay-4")
	var failed atomic.Bool
	c.run(inbox, c.handle(nil), func(cfg *runtime.Config) {
		cfg.Scope = func(ctx context.Context, _ runtime.RawDelivery) (context.Context, func(context.Context) error, error) {
			return ctx, func(context.Context) error {
				if failed.CompareAndSwap(false, true) {
					return errors.New("could not release the lock file")
				}
				return nil
			}, nil
		}
	})
	recs := byAttempt(c.await(2))
	if recs[0].Commit != "committed" || recs[0].Path != runtime.PathRetried || !strings.Contains(recs[0].Reason, "cleanup") {
		t.Errorf("first delivery: %+v", recs[0])
	}
	if recs[1].Commit != "duplicate" || recs[1].Path != runtime.PathAcked || recs[1].Attempt != 2 {
		t.Errorf("retry: %+v", recs[1])
	}
	if c.runs.Load() != 1 {
		t.Errorf("handler ran %d times", c.runs.Load())
	}
	c.expectRows("pay-4", 1)
	c.expectQueues(0, 0)
}

// e. after_delivery fails after the commit, and again on the retry copy,
// which the inbox finds a duplicate: each takes the retry path (no ACK
// without after_delivery), and the last copy is ACKed as a duplicate. The
// handler ran once.
func TestAfterDeliveryFailureTakesTheRetryAlsoOnADuplicate(t *testing.T) {
	t.Parallel()
	c := newConsumerEnv(t)
	inbox := pginbox.New(c.pool, pginbox.Options{})
	c.publish("pay-5")
	var calls atomic.Int32
	c.run(inbox, c.handle(nil), func(cfg *runtime.Config) {
		cfg.AfterDelivery = func(context.Context, runtime.RawDelivery, runtime.Record) error {
			if calls.Add(1) <= 2 {
				return errors.New("audit log full")
			}
			return nil
		}
	})
	recs := byAttempt(c.await(3))
	for i, want := range []struct {
		commit string
		path   runtime.Path
	}{{"committed", runtime.PathRetried}, {"duplicate", runtime.PathRetried}, {"duplicate", runtime.PathAcked}} {
		if r := recs[i]; r.Attempt != i+1 || r.Commit != want.commit || r.Path != want.path ||
			(want.path == runtime.PathRetried) != strings.HasSuffix(r.Reason, "after_delivery: audit log full") {
			t.Errorf("attempt %d: %+v, want commit %s, path %s", i+1, r, want.commit, want.path)
		}
	}
	if c.runs.Load() != 1 {
		t.Errorf("handler ran %d times", c.runs.Load())
	}
	c.expectRows("pay-5", 1)
	c.expectQueues(0, 0)
}

// A handler that returns after its delivery's budget (it waited for its slot
// behind an abandoned handler) still has its transaction ended: committed,
// not left open with its connection and its claim's lock. The delivery is
// left to the broker, and its redelivery meets the committed claim.
func TestCommitAfterTheBudgetStillEndsTheTransaction(t *testing.T) {
	t.Parallel()
	// A step that carries the first connection on a loaded machine, and
	// the least budget it allows.
	const step = 6 * time.Second
	c := newConsumerEnv(t)
	c.spec.Prefetch, c.spec.Concurrency = 2, 1
	c.spec.HandlerTimeout = 9 * time.Second
	c.spec.SettlementBudget = c.spec.HandlerTimeout + 4*step + 2*time.Second
	// late-2 starts 3 s before its budget's end and runs 6 s: it returns
	// 3 s after the budget, 3 s before the recycle a step after it (which
	// hog-1's retry, waiting for the slot, must not meet), and 3 s inside
	// its handler timeout. Each bound it must meet on a loaded machine has
	// 3 s to spare.
	const lateStarts, lateRuns = 3 * time.Second, 6 * time.Second
	inbox := pginbox.New(c.pool, pginbox.Options{})
	c.publish("hog-1", "late-2")
	stepTimeout := func(cfg *runtime.Config) { cfg.StepTimeout = step }
	stopFirst := c.run(inbox, c.handle(func(_ context.Context, d runtime.RawDelivery) error {
		if d.MessageID() == "hog-1" && d.Attempt() == 1 {
			time.Sleep(c.spec.SettlementBudget - lateStarts) // abandoned at its timeout, holds the slot on
			return nil
		}
		time.Sleep(lateRuns)
		return nil
	}), stepTimeout)
	var late runtime.Record
	for _, rec := range c.await(3) {
		if rec.MessageID == "late-2" {
			late = rec
		}
	}
	if late.Commit != "committed" || late.Path != runtime.PathUnresolved {
		t.Fatalf("late-2: commit %s, path %s (%s)", late.Commit, late.Path, late.Reason)
	}
	stopFirst()
	var open int
	if err := c.pool.QueryRow(c.ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND state = 'idle in transaction'
		AND state_change < now() - interval '1 second' AND strpos(query, $1) > 0`, c.table).Scan(&open); err != nil || open != 0 {
		t.Errorf("%d sessions left idle in a transaction (%v)", open, err)
	}
	// The first consumer recycles late-2's channel a step after its budget,
	// and may meet it again before it stops: then it requeues it unstarted.
	c.run(inbox, c.handle(nil), stepTimeout)
	for n := 4; ; n++ {
		again := c.await(n)[n-1]
		if again.MessageID == "late-2" && again.Path == runtime.PathNotStarted {
			continue
		}
		if again.MessageID != "late-2" || again.Commit != "duplicate" || again.Path != runtime.PathAcked {
			t.Errorf("redelivery of late-2: %+v", again)
		}
		break
	}
	if c.runs.Load() != 3 {
		t.Errorf("handler ran %d times; want hog-1 twice, late-2 once", c.runs.Load())
	}
	rows, err := c.countRows(c.ctx, "k")
	claims, err2 := c.countClaims(c.ctx, c.spec.Name, "late-2")
	if rows != 2 || claims != 1 || err != nil || err2 != nil {
		t.Errorf("%d business rows (want hog-1's retry and late-2), %d claim rows of late-2 (%v, %v)", rows, claims, err, err2)
	}
	c.expectQueues(0, 0)
}

// A COMMIT always slower than the step (a deferred trigger sleeping past it)
// is cut while the step still has room to ask pg_xact_status, which says
// aborted: each attempt fails, spends its retry, and the message reaches the
// DLQ after its attempts, instead of going round a classic queue for ever as
// an ambiguous commit, which costs no attempt.
func TestCommitAlwaysSlowerThanTheStepReachesTheDLQ(t *testing.T) {
	t.Parallel()
	c := newConsumerEnv(t)
	inbox := pginbox.New(c.pool, pginbox.Options{})
	c.publish("slow-1")
	c.run(inbox, runtime.Routes{{Type: "Payment", Version: 1, ContentType: "application/json"}: func(ctx context.Context, _ runtime.RawDelivery) error {
		c.runs.Add(1)
		return c.write(ctx, "k", 12) // its COMMIT sleeps twice the step
	}}, func(cfg *runtime.Config) {
		// A step of 6 s keeps 1.5 s back for pg_xact_status: room enough
		// on a loaded machine, or the commit would be ambiguous.
		cfg.StepTimeout = 6 * time.Second
	})
	recs := c.await(c.spec.MaxAttempts)
	for i, r := range recs {
		want := runtime.PathRetried
		if i == c.spec.MaxAttempts-1 {
			want = runtime.PathDeadLettered
		}
		if r.Commit != "failed" || r.Path != want || r.Attempt != i+1 {
			t.Errorf("attempt %d: commit %s, path %s, attempt %d (%s); want failed, %s", i+1, r.Commit, r.Path, r.Attempt, r.Reason, want)
		}
	}
	c.expectRows("slow-1", 0)
	c.expectQueues(0, 1)
	if n := c.runs.Load(); n != int32(c.spec.MaxAttempts) {
		t.Errorf("handler ran %d times, want %d", n, c.spec.MaxAttempts)
	}
}
