package runtime_test

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"maps"
	"net/url"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/runtime/internal/fixture"

	// Every test package takes -update, so that `go test ./... -update` runs.
	"github.com/lily-mq/lily/internal/queue"
	"github.com/lily-mq/lily/internal/services"
	_ "github.com/lily-mq/lily/internal/update"
)

// brokerURL is the real RabbitMQ the broker tests run against; under -short
// it skips them.
func brokerURL(t testing.TB) string {
	t.Helper()
	return services.RabbitMQ(t)
}

func dial(t *testing.T) *amqp.Connection {
	t.Helper()
	conn, err := amqp.Dial(brokerURL(t))
	if err != nil {
		t.Fatalf("RabbitMQ is not reachable at %s (start it: rabbitmq-server -detached): %v", brokerURL(t), err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func channel(t *testing.T, conn *amqp.Connection) *amqp.Channel {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("open channel: %v", err)
	}
	return ch
}

// brokerSpec is the generated spec of the test schema's queue, renamed to a
// queue of its own for one test, changed by tweaks, and deleted with its
// buckets and DLQ when the test ends.
func brokerSpec(t *testing.T, tweaks ...func(*runtime.QueueSpec)) runtime.QueueSpec {
	brokerURL(t) // skipped under -short before it touches the broker
	var b [3]byte
	_, _ = rand.Read(b[:])
	q := fixture.LilytestQueueSpec()
	q.Name += "." + strings.ReplaceAll(t.Name(), "/", ".") + "." + hex.EncodeToString(b[:])
	q.Topology.DeadLetterQueue = q.Name + ".dlq"
	for _, f := range tweaks {
		f(&q)
	}
	t.Cleanup(func() { deleteQueues(t, q) })
	return q
}

func deleteQueues(t *testing.T, q runtime.QueueSpec) {
	conn, err := amqp.Dial(brokerURL(t))
	if err != nil {
		t.Errorf("cleanup: %v", err)
		return
	}
	defer conn.Close()
	names := []string{q.Name, q.Topology.DeadLetterQueue}
	for _, d := range q.Topology.RetryDelays {
		names = append(names, bucket(q, d))
	}
	for _, n := range names {
		ch, err := conn.Channel()
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		_, _ = ch.QueueDelete(n, false, false, false)
		_ = ch.Close()
	}
}

// declareTopology declares q's topology up front, so a test can publish before
// the consumer starts.
func declareTopology(t *testing.T, q runtime.QueueSpec) {
	t.Helper()
	if err := runtime.DeclareTopology(dial(t), q); err != nil {
		t.Fatal(err)
	}
}

func publish(t *testing.T, queue string, msgs ...amqp.Publishing) {
	t.Helper()
	ch := channel(t, dial(t))
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		dc, err := ch.PublishWithDeferredConfirm("", queue, true, false, m)
		if err != nil {
			t.Fatalf("publish: %v", err)
		}
		if !dc.Wait() {
			t.Fatalf("publish to %s not confirmed", queue)
		}
	}
}

// order is OrderPlaced v1 with order id and message id id, as the generated
// producer builds it.
func order(t *testing.T, id string) amqp.Publishing {
	t.Helper()
	return produce(t, id, &fixture.OrderPlacedV1{OrderID: id})
}

func produce(t *testing.T, id string, msg *fixture.OrderPlacedV1) amqp.Publishing {
	t.Helper()
	p, err := fixture.NewOrderPlacedV1(id, msg)
	if err != nil {
		t.Fatalf("produce %s: %v", id, err)
	}
	return p
}

// handler is a test's implementation of the generated handler interface.
type handler func(ctx context.Context, msg *fixture.OrderPlacedV1, d runtime.RawDelivery) error

func (h handler) HandleOrderPlacedV1(ctx context.Context, msg *fixture.OrderPlacedV1, d runtime.RawDelivery) error {
	return h(ctx, msg, d)
}

// running is a consumer under test and the records it has written so far.
type running struct {
	t       *testing.T
	cancel  context.CancelFunc
	done    chan struct{}
	report  *runtime.Report
	err     error
	mu      sync.Mutex
	records []runtime.Record
	arrived chan struct{}
	// events are the consumer's diagnostics, unless a test gave it a logger.
	events eventLog
}

func start(t *testing.T, q runtime.QueueSpec, h handler, tweak ...func(*runtime.Config)) *running {
	t.Helper()
	r, c := prepare(t, q, h, tweak...)
	return r.launch(c)
}

// prepare builds a consumer of q through the test schema's generated routes,
// calling h, whose records the returned running collects; a test may set its
// hooks before launching it.
func prepare(t *testing.T, q runtime.QueueSpec, h handler, tweak ...func(*runtime.Config)) (*running, *runtime.Consumer) {
	t.Helper()
	return prepareRoutes(t, q, fixture.LilytestRoutes(h), tweak...)
}

// prepareRoutes builds a consumer of q that dispatches by routes.
func prepareRoutes(t *testing.T, q runtime.QueueSpec, routes runtime.Routes, tweak ...func(*runtime.Config)) (*running, *runtime.Consumer) {
	t.Helper()
	r := &running{t: t, done: make(chan struct{}), arrived: make(chan struct{}, 1024)}
	cfg := runtime.Config{URLs: []string{brokerURL(t)}, Logger: slog.New(&r.events), Observe: r.observe, ShutdownGrace: 5 * time.Second, ForceWindow: time.Second}
	for _, f := range tweak {
		f(&cfg)
	}
	c, err := runtime.NewConsumer(q, routes, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Tests that break a queue or an exchange of ours under the consumer
	// (a bucket or a DLQ deleted) count on it staying broken: only the
	// tests of drift.go declare the topology again while consuming.
	c.SetTopologyEvery(time.Hour)
	return r, c
}

func (r *running) launch(c *runtime.Consumer) *running {
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() {
		defer close(r.done)
		r.report, r.err = c.Run(ctx)
	}()
	r.t.Cleanup(func() { r.stop() })
	return r
}

func (r *running) observe(rec runtime.Record) {
	r.mu.Lock()
	r.records = append(r.records, rec)
	r.mu.Unlock()
	r.arrived <- struct{}{}
}

func (r *running) recorded() []runtime.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]runtime.Record(nil), r.records...)
}

// reconnects counts the sessions the consumer opened after its first.
func (r *running) reconnects() int {
	n := 0
	for _, ev := range r.events.all() {
		if ev.stage == "connected" {
			n++
		}
	}
	return max(n-1, 0)
}

// bucket names q's retry bucket for delay d.
func bucket(q runtime.QueueSpec, d time.Duration) string { return queue.RetryBucket(q.Name, d) }

// await waits until n records were written, for two minutes at most, and
// returns them.
func (r *running) await(n int) []runtime.Record {
	r.t.Helper()
	deadline := time.After(2 * time.Minute)
	for {
		r.mu.Lock()
		got := append([]runtime.Record(nil), r.records...)
		r.mu.Unlock()
		if len(got) >= n {
			return got
		}
		select {
		case <-r.arrived:
		case <-r.done:
			r.t.Fatalf("consumer stopped after %d of %d records: %v", len(got), n, r.err)
		case <-deadline:
			r.t.Fatalf("%d of %d records after two minutes; the last: %+v", len(got), n, got[max(len(got)-3, 0):])
		}
	}
}

// byAttempt returns recs with each message's records in attempt order;
// records of one attempt keep theirs. Two deliveries of one message are not
// recorded in the order they came: a delivery's record follows its ACK or
// NACK, and the requeue's redelivery, or the retry copy back from its
// bucket, may be recorded first.
func byAttempt(recs []runtime.Record) []runtime.Record {
	sorted := slices.Clone(recs)
	slices.SortStableFunc(sorted, func(a, b runtime.Record) int { return cmp.Compare(a.Attempt, b.Attempt) })
	return sorted
}

// wantPaths checks how many of recs took each path, whatever the order they
// were recorded in (see byAttempt).
func wantPaths(t *testing.T, recs []runtime.Record, want map[runtime.Path]int) {
	t.Helper()
	got := map[runtime.Path]int{}
	for _, rec := range recs {
		got[rec.Path]++
	}
	if !maps.Equal(got, want) {
		t.Fatalf("paths %v, want %v; records %+v", got, want, recs)
	}
}

// stop shuts the consumer down and returns its report.
func (r *running) stop() *runtime.Report {
	r.cancel()
	<-r.done
	if r.err != nil {
		r.t.Errorf("Run: %v", r.err)
	}
	return r.report
}

// queueCounts reads a queue's ready and unacknowledged counts from the broker.
func queueCounts(t *testing.T, name string) (ready, unacked int) {
	t.Helper()
	c, ok := services.QueueCounts(t)[name]
	if !ok {
		t.Fatalf("queue %s does not exist", name)
	}
	return c.Ready, c.Unacked
}

// assertCounts checks where the messages are, queue by queue. rabbitmqctl
// reads a quorum queue's counts from statistics it refreshes every few
// seconds, so the counts are polled until both they and the queues' own
// answers to a passive declare (their ready messages, at once) agree with
// want. The passive declares are cheap and come first; rabbitmqctl runs
// once they agree, once a round for every queue.
func assertCounts(t *testing.T, want map[string][2]int) {
	t.Helper()
	conn := dial(t)
	passive := map[string]int{}
	var counts map[string]services.Counts
	agree := func() bool {
		for name, w := range want {
			c, ok := counts[name]
			if passive[name] != w[0] || !ok || c != (services.Counts{Ready: w[0], Unacked: w[1]}) {
				return false
			}
		}
		return true
	}
	// Generous: each rabbitmqctl run takes seconds on a loaded machine.
	for deadline := time.Now().Add(time.Minute); ; {
		ready := true
		for name, w := range want {
			ch := channel(t, conn)
			q, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
			if err != nil {
				t.Fatalf("queue %s: %v", name, err)
			}
			_ = ch.Close()
			passive[name] = q.Messages
			ready = ready && q.Messages == w[0]
		}
		wait := 100 * time.Millisecond
		if ready || time.Now().After(deadline) {
			counts = services.QueueCounts(t)
			wait = time.Second
		}
		if agree() || time.Now().After(deadline) {
			break
		}
		time.Sleep(wait)
	}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		w := want[name]
		c, ok := counts[name]
		if !ok {
			t.Errorf("queue %s does not exist", name)
		} else if c != (services.Counts{Ready: w[0], Unacked: w[1]}) || passive[name] != w[0] {
			t.Errorf("queue %s: %d ready (%d by a passive declare), %d unacked; want %d ready, %d unacked", name, c.Ready, passive[name], c.Unacked, w[0], w[1])
		}
	}
}

// longHeartbeat is url asking for a heartbeat of 60 s, the broker's own
// proposal and the longest a client can ask for (10 s by default). A test
// that stalls the client's direction through a proxy stalls its heartbeats
// too, and the broker closes a connection silent for two or three of
// them: under load, what the test does while it stalls can take longer
// than the default's 20 to 30 s.
func longHeartbeat(t *testing.T, rawURL string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	query := u.Query()
	query.Set("heartbeat", "60")
	u.RawQuery = query.Encode()
	return u.String()
}

// drain takes every message out of a queue.
func drain(t *testing.T, queue string) []amqp.Delivery {
	t.Helper()
	return drainOn(t, dial(t), queue)
}

// drainOn takes every message out of a queue on conn.
func drainOn(t *testing.T, conn *amqp.Connection, queue string) []amqp.Delivery {
	t.Helper()
	ch := channel(t, conn)
	defer ch.Close()
	var out []amqp.Delivery
	for {
		d, ok, err := ch.Get(queue, true)
		if err != nil {
			t.Fatalf("get %s: %v", queue, err)
		}
		if !ok {
			return out
		}
		out = append(out, d)
	}
}

// eventually polls ok until it holds, and fails the test if it does not
// within the given time.
func eventually(t *testing.T, within time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		began := time.Now()
		if ok() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
		// A check that takes long (a rabbitmqctl run) waits as long
		// again, so a poll keeps at most half a core busy.
		time.Sleep(max(10*time.Millisecond, time.Since(began)))
	}
}

// awaitConsumer waits until a consumer is attached to the queue.
func awaitConsumer(t *testing.T, queue string) {
	t.Helper()
	conn := dial(t)
	eventually(t, 2*time.Minute, "a consumer on "+queue, func() bool {
		ch := channel(t, conn)
		q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		_ = ch.Close()
		return err == nil && q.Consumers > 0
	})
}

// awaitTaken waits until none of the queue's messages is ready: the consumer
// has taken them all.
func awaitTaken(t *testing.T, queue string) {
	t.Helper()
	awaitReady(t, queue, "every message of "+queue+" taken", 0)
}

// awaitReady waits until the queue holds n ready messages. A passive declare
// counts at once, as rabbitmqctl's statistics do not, and answers in
// milliseconds where a rabbitmqctl run, shared with the binary's other
// tests, can take seconds on a loaded machine: a count that holds only
// for a while (until a step times out) is still seen.
func awaitReady(t *testing.T, queue, what string, n int) {
	t.Helper()
	conn := dial(t)
	eventually(t, 2*time.Minute, what, func() bool {
		ch := channel(t, conn)
		defer ch.Close()
		state, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		return err == nil && state.Messages == n
	})
}

// heldHandler gives the queue of a test that holds its handler (until the
// test releases it, or until the shutdown's force) a handler timeout of a
// minute: on a loaded machine the test's steps before the release may take
// longer than the fixture's 2 s, and the timeout would decide instead.
func heldHandler(q *runtime.QueueSpec) { q.HandlerTimeout = time.Minute }

// hourRetry gives a queue one retry bucket of an hour: no copy comes back
// during a test.
func hourRetry(q *runtime.QueueSpec) { q.Topology.RetryDelays = []time.Duration{time.Hour} }

// brokerUser adds a user of the test's own to the broker, named from role,
// with password and every permission on /, deleted when the test ends.
func brokerUser(t *testing.T, role, password string) string {
	t.Helper()
	brokerURL(t) // skipped under -short before rabbitmqctl changes the broker
	var b [3]byte
	_, _ = rand.Read(b[:])
	user := "lilytest-" + role + "-" + hex.EncodeToString(b[:])
	rabbitmqctl(t, "add_user", user, password)
	t.Cleanup(func() { _ = exec.Command("rabbitmqctl", "delete_user", user).Run() })
	rabbitmqctl(t, "set_permissions", "-p", "/", user, ".*", ".*", ".*")
	return user
}

// rabbitmqctl runs the broker's rabbitmqctl with args, failing t when it fails.
func rabbitmqctl(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("rabbitmqctl", args...).CombinedOutput(); err != nil {
		t.Fatalf("rabbitmqctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// userSteps counts, by message id, the user code a consumer runs around its
// handler: Scope's opens, the Inbox's claims and AfterDelivery's calls.
type userSteps struct {
	mu  sync.Mutex
	ran map[string]map[string]int // step, message id → calls
}

// watch sets cfg's Scope, Inbox and AfterDelivery to count their calls in a
// new userSteps; each lets the delivery go on.
func watch(cfg *runtime.Config) *userSteps {
	u := &userSteps{ran: map[string]map[string]int{}}
	cfg.Scope = func(ctx context.Context, d runtime.RawDelivery) (context.Context, func(context.Context) error, error) {
		u.note("scope", d.MessageID())
		return ctx, nil, nil
	}
	cfg.Inbox = u
	cfg.AfterDelivery = func(_ context.Context, d runtime.RawDelivery, _ runtime.Record) error {
		u.note("after_delivery", d.MessageID())
		return nil
	}
	return u
}

func (u *userSteps) note(step, id string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.ran[step] == nil {
		u.ran[step] = map[string]int{}
	}
	u.ran[step][id]++
}

func (u *userSteps) Begin(_ context.Context, _, id string) (runtime.InboxTx, error) {
	u.note("claim", id)
	return openTx{}, nil
}

// expect fails t unless each step ran once for each of ids, and for no
// other message.
func (u *userSteps) expect(t *testing.T, ids map[string]bool) {
	t.Helper()
	want := map[string]int{}
	for id := range ids {
		want[id] = 1
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, step := range []string{"scope", "claim", "after_delivery"} {
		if !maps.Equal(u.ran[step], want) {
			t.Errorf("%s ran %v; want %v", step, u.ran[step], want)
		}
	}
}

// openTx is a claim's transaction that commits whatever it is asked to.
type openTx struct{}

func (openTx) Bind(ctx context.Context) context.Context { return ctx }
func (openTx) Commit(context.Context) error             { return nil }
func (openTx) Rollback(context.Context)                 {}
