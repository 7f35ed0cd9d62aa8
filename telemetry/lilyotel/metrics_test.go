package lilyotel_test

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/lily-mq/lily/runtime"

	"github.com/lily-mq/lily/internal/faults"
)

// The metrics count each journey by its path, each handoff by the broker's
// answer, each inbox duplicate, and each lost session; and time each
// processing, publish and settlement.
func TestBrokerMetrics(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.start(newInbox())
	r.publish(message(id("ok"), "ok"), message(id("fail-once"), "fail-once"), message(id("refuse"), "refuse"))
	dup := id("dup")
	r.publish(message(dup, "ok"))
	r.awaitProcessed(5)
	// Sent again once its work committed: the inbox knows it.
	r.publish(message(dup, "ok"))
	spans := r.awaitProcessed(6)

	q := attribute.String("messaging.destination.subscription.name", r.q.Name)
	rm := r.awaitMetric("six processings measured", func(rm metricdata.ResourceMetrics) bool {
		return count(rm, "messaging.process.duration", q) == 6
	})
	path := func(p runtime.Path) attribute.KeyValue { return attribute.String("lily.path", string(p)) }
	to := func(dest string) attribute.KeyValue { return attribute.String("messaging.destination.name", dest) }
	confirmed := attribute.String("lily.handoff", "confirmed")
	for _, c := range []struct {
		name  string
		match []attribute.KeyValue
		want  int64
	}{
		{"lily.deliveries", []attribute.KeyValue{q, path(runtime.PathAcked)}, 4}, // ok, the retry, dup twice
		{"lily.deliveries", []attribute.KeyValue{q, path(runtime.PathRetried)}, 1},
		{"lily.deliveries", []attribute.KeyValue{q, path(runtime.PathDeadLettered)}, 1},
		{"lily.deliveries", []attribute.KeyValue{q}, 6},
		{"lily.inbox.duplicates", []attribute.KeyValue{q}, 1},
		{"lily.unresolved", []attribute.KeyValue{q}, 0},
		{"lily.handoffs", []attribute.KeyValue{q, to(r.bucket()), confirmed}, 1},
		{"lily.handoffs", []attribute.KeyValue{q, to(r.q.Topology.DeadLetterQueue), confirmed}, 1},
		{"messaging.client.consumed.messages", []attribute.KeyValue{q, attribute.String("messaging.operation.name", "process"), attribute.String("messaging.system", "rabbitmq")}, 6},
		{"messaging.client.sent.messages", []attribute.KeyValue{to(r.bucket()), attribute.String("messaging.operation.name", "send")}, 1},
		{"messaging.client.sent.messages", []attribute.KeyValue{to(r.q.Topology.DeadLetterQueue)}, 1},
	} {
		if got := sum(rm, c.name, c.match...); got != c.want {
			t.Errorf("%s %v: %d, want %d", c.name, c.match, got, c.want)
		}
	}
	for _, c := range []struct {
		name  string
		match []attribute.KeyValue
		want  uint64
	}{
		{"messaging.process.duration", []attribute.KeyValue{q, attribute.String("error.type", "retryable")}, 1},
		{"messaging.process.duration", []attribute.KeyValue{q, attribute.String("error.type", "permanent")}, 1},
		{"lily.handoff.duration", []attribute.KeyValue{q, to(r.bucket()), confirmed}, 1},
		{"lily.handoff.duration", []attribute.KeyValue{q, to(r.q.Topology.DeadLetterQueue), confirmed}, 1},
		{"messaging.client.operation.duration", []attribute.KeyValue{q, attribute.String("messaging.operation.name", "ack"), attribute.String("messaging.operation.type", "settle")}, 6},
		{"messaging.client.operation.duration", []attribute.KeyValue{to(r.bucket()), attribute.String("messaging.operation.type", "send")}, 1},
	} {
		if got := count(rm, c.name, c.match...); got != c.want {
			t.Errorf("%s %v: %d measured, want %d", c.name, c.match, got, c.want)
		}
	}
	dupSpans := where(where(named(spans, "process "+r.q.Name), "messaging.message.id", dup), "lily.commit", "duplicate")
	if len(dupSpans) != 1 {
		t.Errorf("%d process spans of %s say lily.commit=duplicate, want 1", len(dupSpans), dup)
	}

	// The broker closes this consumer's own connection, found by the name it
	// gives it: the session is lost, and the consumer connects again.
	closed, err := faults.CloseConnections(context.Background(), func(name string) bool { return name == faults.ConnectionName(r.q.Name, "consume") }, "lilyotel test")
	if err != nil || len(closed) != 1 {
		t.Fatalf("closed %q: %v", closed, err)
	}
	r.awaitMetric("a reconnect counted", func(rm metricdata.ResourceMetrics) bool { return sum(rm, "lily.reconnects", q) >= 1 })
	r.publish(message(id("after"), "ok"))
	r.awaitMetric("a delivery after the reconnect", func(rm metricdata.ResourceMetrics) bool {
		return sum(rm, "lily.deliveries", q, path(runtime.PathAcked)) == 5
	})
}

// A delivery waiting for the one slot when its session is lost is not
// started, and its requeue cannot be sent: it is unresolved, and counted so
// like every unresolved record of the report (the one that held the slot,
// whose ACK cannot be sent either, among them), though it has no span.
func TestBrokerUnresolvedNotStartedIsCounted(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.q.Concurrency = 1
	// Held until the session is lost, which rabbitmqctl's two runs may take
	// seconds to bring about on a loaded machine: it must not time out first.
	r.q.HandlerTimeout = 2 * patience
	started := make(chan struct{}, 4)
	release := make(chan struct{})
	routes := runtime.Routes{{Type: wireType, Version: 1, ContentType: "application/json"}: func(context.Context, runtime.RawDelivery) error {
		started <- struct{}{}
		<-release
		return nil
	}}
	cfg := runtime.Config{URLs: []string{r.url}, Telemetry: r.tel, Logger: slog.New(slog.DiscardHandler), ShutdownGrace: 5 * time.Second, ForceWindow: time.Second}
	c, err := runtime.NewConsumer(r.q, routes, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reported := make(chan *runtime.Report, 1)
	// Its goroutines carry the queue's name, for waitingForSlot.
	go pprof.Do(ctx, pprof.Labels(consumerLabel, r.q.Name), func(ctx context.Context) {
		rep, _ := c.Run(ctx)
		reported <- rep
	})
	r.publish(message(id("held"), "ok"), message(id("waiting"), "ok"))
	select {
	case <-started:
	case <-time.After(patience):
		t.Fatal("no handler started")
	}
	// The second read by the consumer, and waiting for the slot. That the
	// broker has no message ready says only that the client library holds
	// it, which drops what the consumer has not read when the connection
	// closes.
	for deadline := time.Now().Add(patience); !waitingForSlot(t, r.q.Name); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the second delivery not waiting for the slot within %s", patience)
		}
	}
	closed, err := faults.CloseConnections(context.Background(), func(name string) bool { return name == faults.ConnectionName(r.q.Name, "consume") }, "lilyotel test")
	if err != nil || len(closed) != 1 {
		t.Fatalf("closed %q: %v", closed, err)
	}
	q := attribute.String("messaging.destination.subscription.name", r.q.Name)
	r.awaitMetric("the session's loss", func(rm metricdata.ResourceMetrics) bool { return sum(rm, "lily.reconnects", q) >= 1 })
	close(release)
	acked := attribute.String("lily.path", string(runtime.PathAcked))
	r.awaitMetric("both acked in the next session", func(rm metricdata.ResourceMetrics) bool { return sum(rm, "lily.deliveries", q, acked) == 2 })
	cancel()
	rep := <-reported
	rm := r.collect()
	unresolved := attribute.String("lily.path", string(runtime.PathUnresolved))
	if n := int64(rep.Counts[runtime.PathUnresolved]); n != 2 || sum(rm, "lily.unresolved", q) != n || sum(rm, "lily.deliveries", q, unresolved) != n {
		t.Errorf("the report has %d unresolved, lily.unresolved %d, lily.deliveries of them %d; want 2 each",
			n, sum(rm, "lily.unresolved", q), sum(rm, "lily.deliveries", q, unresolved))
	}
	notStarted := 0
	for _, u := range rep.Unresolved {
		if strings.Contains(u.Reason, "not started") {
			notStarted++
		}
	}
	if notStarted != 1 {
		t.Errorf("unresolved: %+v; want one not started", rep.Unresolved)
	}
}

// consumerLabel is the goroutine label naming the queue whose consumer a
// goroutine is, where a test sets it.
const consumerLabel = "lilyotel.consumer"

// waitingForSlot tells whether the consumer of queue has read a delivery and
// waits for a concurrency slot for it. The runtime shows it nowhere (its
// "received" event and the hook's Received come once the slot is taken), so
// this reads the goroutine profile: the consume loop's goroutine, labelled
// for queue, stopped in awaitSlot.
func waitingForSlot(t *testing.T, queue string) bool {
	t.Helper()
	var b strings.Builder
	if err := pprof.Lookup("goroutine").WriteTo(&b, 1); err != nil {
		t.Fatal(err)
	}
	label := fmt.Sprintf("%q:%q", consumerLabel, queue)
	for g := range strings.SplitSeq(b.String(), "\n\n") {
		if strings.Contains(g, label) && strings.Contains(g, "lily/runtime.(*Consumer).awaitSlot") {
			return true
		}
	}
	return false
}

// inbox is an in-memory runtime.Inbox: a message id's claim commits with its
// work, and a later claim of it is a duplicate.
type inbox struct {
	mu        sync.Mutex
	committed map[string]bool
}

func newInbox() *inbox { return &inbox{committed: map[string]bool{}} }

func (in *inbox) Begin(_ context.Context, _, messageID string) (runtime.InboxTx, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.committed[messageID] {
		return nil, fmt.Errorf("%s: %w", messageID, runtime.ErrDuplicate)
	}
	return &claim{in: in, id: messageID}, nil
}

type claim struct {
	in *inbox
	id string
}

func (c *claim) Bind(ctx context.Context) context.Context { return ctx }

func (c *claim) Commit(context.Context) error {
	c.in.mu.Lock()
	defer c.in.mu.Unlock()
	c.in.committed[c.id] = true
	return nil
}

func (c *claim) Rollback(context.Context) {}
