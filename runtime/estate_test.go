package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/internal/faults"
	"github.com/lily-mq/lily/internal/queue"
	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/runtime/internal/fixture"
	"github.com/lily-mq/lily/topology"
)

// otherTeamsExchange declares an exchange as its owner would, outside Lily,
// and deletes it when the test ends.
func otherTeamsExchange(t *testing.T, name, kind string) {
	t.Helper()
	ch := channel(t, dial(t))
	if err := ch.ExchangeDeclare(name, kind, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteExchanges(t, name) })
}

func deleteExchanges(t *testing.T, names ...string) {
	conn, err := amqp.Dial(brokerURL(t))
	if err != nil {
		t.Errorf("cleanup: %v", err)
		return
	}
	defer conn.Close()
	for _, n := range names {
		if ch, err := conn.Channel(); err == nil {
			_ = ch.ExchangeDelete(n, false, false)
			_ = ch.Close()
		}
	}
}

// boundToOtherTeams declares another team's fanout exchange, named prefix
// and the test's name, and the topology of a queue bound to it.
func boundToOtherTeams(t *testing.T, prefix string) (string, runtime.QueueSpec) {
	t.Helper()
	exchange := prefix + strings.ReplaceAll(t.Name(), "/", ".")
	otherTeamsExchange(t, exchange, topology.Fanout)
	q := brokerSpec(t, func(q *runtime.QueueSpec) {
		q.Topology.Exchanges = []topology.Exchange{{Name: exchange, Type: topology.Fanout, External: true}}
		q.Topology.Bindings = []topology.Binding{{Source: exchange}}
	})
	declareTopology(t, q)
	return exchange, q
}

// publishTo publishes msg to exchange with key, confirmed; not mandatory, as
// a producer that does not know who is bound.
func publishTo(t *testing.T, exchange, key string, msg amqp.Publishing) {
	t.Helper()
	ch := channel(t, dial(t))
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	dc, err := ch.PublishWithDeferredConfirm(exchange, key, false, false, msg)
	if err != nil || !dc.Wait() {
		t.Fatalf("publish to %s with key %s: %v, not confirmed", exchange, key, err)
	}
}

// Two queues of ours, one classic and one quorum, are bound with different
// patterns to a topic exchange another team owns. The classic one fails each
// message's first attempt: its retry copy dead-letters straight back to it,
// never through the exchange, so the quorum queue sees each message once.
// Each queue carries the arguments its schema sets.
func TestBrokerTopicExchangeRetryStaysWithItsQueue(t *testing.T) {
	t.Parallel()
	exchange := "lilytest.payments." + strings.ReplaceAll(t.Name(), "/", ".")
	otherTeamsExchange(t, exchange, topology.Topic)
	bind := func(q *runtime.QueueSpec, key string) {
		q.Topology.Exchanges = []topology.Exchange{{Name: exchange, Type: topology.Topic, External: true}}
		q.Topology.Bindings = []topology.Binding{{Source: exchange, RoutingKey: key}}
	}
	billing := brokerSpec(t, func(q *runtime.QueueSpec) {
		bind(q, "payment.#")
		q.Topology.Arguments = map[string]any{"x-max-priority": int64(5), "x-max-length": int64(1000), "x-overflow": "reject-publish-dlx", "x-message-ttl": int64(3_600_000)}
		q.Topology.RetryDelays = []time.Duration{200 * time.Millisecond}
	})
	audit := brokerSpec(t, func(q *runtime.QueueSpec) {
		bind(q, "payment.*.eu")
		q.Topology.Type = topology.Quorum
		q.Topology.Arguments = map[string]any{"x-single-active-consumer": true, "x-quorum-initial-group-size": int64(1)}
	})
	var mu sync.Mutex
	attempts := map[string][]int{}
	b := start(t, billing, func(_ context.Context, msg *fixture.OrderPlacedV1, d runtime.RawDelivery) error {
		if d.Attempt() == 1 {
			return runtime.Retryable(errors.New("ledger busy"))
		}
		return nil
	})
	a := start(t, audit, func(_ context.Context, msg *fixture.OrderPlacedV1, d runtime.RawDelivery) error {
		mu.Lock()
		defer mu.Unlock()
		attempts[msg.OrderID] = append(attempts[msg.OrderID], d.Attempt())
		return nil
	})
	awaitConsumer(t, billing.Name)
	awaitConsumer(t, audit.Name)
	ids := []string{"p-1", "p-2", "p-3"}
	for _, id := range ids {
		publishTo(t, exchange, "payment.authorized.eu", order(t, id))
	}
	publishTo(t, exchange, "payment.authorized.us", order(t, "p-us"))

	recs := b.await(2 * (len(ids) + 1))
	acked := 0
	for _, r := range recs {
		if r.Path == runtime.PathAcked {
			acked++
		}
	}
	if acked != len(ids)+1 {
		t.Errorf("billing acked %d of %d: %+v", acked, len(ids)+1, recs)
	}
	a.await(len(ids))
	assertCounts(t, map[string][2]int{
		billing.Name: {0, 0}, bucket(billing, 200*time.Millisecond): {0, 0}, billing.Topology.DeadLetterQueue: {0, 0},
		audit.Name: {0, 0}, audit.Topology.DeadLetterQueue: {0, 0},
	})
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		if got := attempts[id]; len(got) != 1 || got[0] != 1 {
			t.Errorf("audit handled %s at attempts %v, want once, at 1: a retry copy reached it", id, got)
		}
	}
	if len(attempts) != len(ids) {
		t.Errorf("audit handled %v, want only the .eu payments", attempts)
	}
	args := queueArguments(t)
	for name, want := range map[string][]string{
		billing.Name: {`{"x-max-priority",5}`, `{"x-max-length",1000}`, `{"x-overflow","reject-publish-dlx"}`, `{"x-message-ttl",3600000}`, `{"x-dead-letter-routing-key"`},
		audit.Name:   {`{"x-single-active-consumer",true}`, `{"x-quorum-initial-group-size",1}`, `{"x-queue-type","quorum"}`},
	} {
		for _, w := range want {
			if !strings.Contains(args[name], w) {
				t.Errorf("queue %s arguments %s, want %s", name, args[name], w)
			}
		}
	}
}

// An external exchange that does not exist ends Run with the broker's 404,
// before any queue is declared.
func TestBrokerExternalExchangeMissingEndsRun(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, func(q *runtime.QueueSpec) {
		q.Topology.Exchanges = []topology.Exchange{{Name: "lilytest.nobody.owns.this", Type: topology.Fanout, External: true}}
		q.Topology.Bindings = []topology.Binding{{Source: "lilytest.nobody.owns.this"}}
	})
	_, c := prepare(t, q, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error { return nil })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := c.Run(ctx)
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != amqp.NotFound || !strings.Contains(err.Error(), "lilytest.nobody.owns.this") {
		t.Fatalf("Run: %v, want the 404 of the missing exchange", err)
	}
	ch := channel(t, dial(t))
	if _, err := ch.QueueDeclarePassive(q.Name, true, false, false, false, nil); !errors.As(err, &ae) || ae.Code != amqp.NotFound {
		t.Errorf("the queue was declared all the same: %v", err)
	}
}

// An external queue that does not exist (its name misspelt in the schema)
// is checked before its DLQ and retry buckets are declared: its 404 leaves
// no queue of that name on the broker.
func TestBrokerExternalQueueMissingLeavesNothing(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, func(q *runtime.QueueSpec) {
		q.Topology.External = true
		q.Topology.RetryDelays = []time.Duration{time.Second, time.Minute}
	})
	err := runtime.DeclareTopology(dial(t), q)
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != amqp.NotFound || !strings.Contains(err.Error(), "declare queue "+q.Name+":") {
		t.Fatalf("DeclareTopology: %v, want the 404 of the missing queue", err)
	}
	conn := dial(t)
	for _, name := range []string{q.Topology.DeadLetterQueue, bucket(q, time.Second), bucket(q, time.Minute)} {
		ch := channel(t, conn)
		_, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
		_ = ch.Close()
		if !errors.As(err, &ae) || ae.Code != amqp.NotFound {
			t.Errorf("queue %s was declared for a queue that does not exist: %v", name, err)
		}
	}
}

// Lily declares owned exchanges and an exchange-to-exchange binding: an
// owned topic exchange feeds an internal headers exchange, to which the queue
// is bound by a header match. Only the message that passes both arrives; the
// rest go to the topic exchange's alternate exchange.
func TestBrokerOwnedExchangesAndHeadersMatch(t *testing.T) {
	t.Parallel()
	prefix := "lilytest.owned." + strings.ReplaceAll(t.Name(), "/", ".")
	src, hx, unrouted := prefix+".events", prefix+".by-region", prefix+".unrouted"
	t.Cleanup(func() { deleteExchanges(t, src, hx, unrouted) })
	q := brokerSpec(t, func(q *runtime.QueueSpec) {
		q.Topology.Exchanges = []topology.Exchange{
			{Name: src, Type: topology.Topic, Durable: true, AlternateExchange: unrouted},
			{Name: hx, Type: topology.Headers, Durable: true, Internal: true},
			{Name: unrouted, Type: topology.Fanout, Durable: true},
		}
		q.Topology.Bindings = []topology.Binding{
			{Source: src, Exchange: hx, RoutingKey: "order.#"},
			{Source: hx, Arguments: map[string]any{"x-match": "all", "region": "eu"}},
		}
	})
	declareTopology(t, q)
	// What the alternate exchange gets, a queue of the test's own shows.
	ch := channel(t, dial(t))
	lost := q.Name + ".unrouted"
	if _, err := ch.QueueDeclare(lost, false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	// Auto-delete goes with a consumer, and drain takes none.
	t.Cleanup(func() { _, _ = ch.QueueDelete(lost, false, false, false) })
	if err := ch.QueueBind(lost, "", unrouted, false, nil); err != nil {
		t.Fatal(err)
	}
	withRegion := func(id, region string) amqp.Publishing {
		m := order(t, id)
		m.Headers["region"] = region
		return m
	}
	publishTo(t, src, "order.placed", withRegion("eu-1", "eu"))
	publishTo(t, src, "order.placed", withRegion("us-1", "us"))
	publishTo(t, src, "invoice.sent", withRegion("eu-2", "eu"))
	c := start(t, q, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error { return nil })
	if rec := c.await(1)[0]; rec.MessageID != "eu-1" || rec.Path != runtime.PathAcked {
		t.Errorf("record %+v, want eu-1 acked", rec)
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, q.Topology.DeadLetterQueue: {0, 0}, lost: {1, 0}})
	if got := drain(t, lost); len(got) != 1 || got[0].MessageId != "eu-2" {
		t.Errorf("the alternate exchange got %d messages, want eu-2 alone", len(got))
	}
	if got := len(c.recorded()); got != 1 {
		t.Errorf("%d records, want 1 (us-1 matches no binding and is dropped by the headers exchange)", got)
	}
}

// An external queue, declared by its owner without Lily's arguments, gets
// its dead-lettering and its retry bucket's TTL from the policies `lilygen
// topology` writes: an oversized body is dead-lettered by the broker into
// the DLQ, and a retry comes back from its bucket.
func TestBrokerExternalQueueByPolicy(t *testing.T) {
	// Its policies match only its own queues' names.
	t.Parallel()
	q := brokerSpec(t, func(q *runtime.QueueSpec) {
		q.Topology.External = true
		q.Topology.RetryDelays = []time.Duration{200 * time.Millisecond}
	})
	ch := channel(t, dial(t))
	if _, err := ch.QueueDeclare(q.Name, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for _, p := range queue.Policies(queue.Topology{Name: q.Name, Queue: q.Topology}) {
		def, _ := json.Marshal(p.Definition)
		if out, err := exec.Command("rabbitmqctl", "set_policy", "--apply-to", "queues", "--priority", "10", p.Name, p.Pattern, string(def)).CombinedOutput(); err != nil {
			t.Fatalf("rabbitmqctl set_policy: %v\n%s", err, out)
		}
		t.Cleanup(func() { _ = exec.Command("rabbitmqctl", "clear_policy", p.Name).Run() })
	}
	big := produce(t, "big-1", &fixture.OrderPlacedV1{OrderID: "big-1", Padding: new(strings.Repeat("x", 2000))})
	publish(t, q.Name, big, order(t, "again-1"))
	c := start(t, q, func(_ context.Context, _ *fixture.OrderPlacedV1, d runtime.RawDelivery) error {
		if d.Attempt() == 1 {
			return errors.New("try again")
		}
		return nil
	})
	paths := map[string][]runtime.Path{}
	for _, r := range byAttempt(c.await(3)) {
		paths[r.MessageID] = append(paths[r.MessageID], r.Path)
	}
	if got := paths["big-1"]; len(got) != 1 || got[0] != runtime.PathBrokerDeadLettered {
		t.Errorf("big-1 took %v, want broker-dead-lettered", got)
	}
	if got := paths["again-1"]; len(got) != 2 || got[0] != runtime.PathRetried || got[1] != runtime.PathAcked {
		t.Errorf("again-1 took %v, want retried then acked", got)
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, bucket(q, 200*time.Millisecond): {0, 0}, q.Topology.DeadLetterQueue: {1, 0}})
	if got := drain(t, q.Topology.DeadLetterQueue); len(got) != 1 || got[0].MessageId != "big-1" {
		t.Errorf("the DLQ holds %d messages, want big-1", len(got))
	}
	// The bucket names its type, which no policy can set; the rest is the
	// policies'.
	if args := queueArguments(t); args[q.Name] != "[]" || args[bucket(q, 200*time.Millisecond)] != `[{"x-queue-type","classic"}]` {
		t.Errorf("arguments: queue %s, bucket %s; want none but the bucket's type: the policies carry them", args[q.Name], args[bucket(q, 200*time.Millisecond)])
	}
}

// An external queue deleted by its owner while the consumer runs is
// refused at the next connection (the broker cancels the consumer, and the
// new session's passive check answers 404): the passive check is the
// owner's to mend. Run does not end; it retries with the backoff, says so
// at error and in Health, and consumes again once the owner has declared
// the queue anew. An external exchange deleted is passed over at a
// reconnect instead (TestBrokerExchangeMissingAtReconnectIsConsumedPast).
func TestBrokerExternalQueueDeletedIsWaitedFor(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, func(q *runtime.QueueSpec) { q.Topology.External = true })
	ch := channel(t, dial(t))
	if _, err := ch.QueueDeclare(q.Name, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	r, c := prepare(t, q, ack, func(cfg *runtime.Config) { cfg.ReconnectMax = time.Second })
	r.launch(c)
	publish(t, q.Name, order(t, "before"))
	r.await(1)
	if _, err := ch.QueueDelete(q.Name, false, false, false); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "Health to say the topology is refused", func() bool {
		h := c.Health()
		return !h.Ready && strings.Contains(h.Why, "the broker refuses the topology, retrying until it is mended") && strings.Contains(h.Why, q.Name)
	})
	if !r.events.has(func(ev event) bool {
		return ev.stage == "topology-refused" && ev.level == slog.LevelError && strings.Contains(ev.detail, "external exchange or queue does not exist")
	}) {
		t.Error("no topology-refused event at error")
	}
	select {
	case <-r.done:
		t.Fatalf("Run ended: %v", r.err)
	default:
	}
	if _, err := ch.QueueDeclare(q.Name, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "the consumer to be ready again", func() bool { return c.Health().Ready })
	publish(t, q.Name, order(t, "after"))
	if rec := r.await(2)[1]; rec.MessageID != "after" || rec.Path != runtime.PathAcked {
		t.Errorf("after the queue came back: %+v", rec)
	}
	rep := r.stop()
	if !slices.ContainsFunc(rep.Lost, func(why string) bool { return strings.Contains(why, "external exchange or queue does not exist") }) {
		t.Errorf("report's lost intake %q lacks the refusal", rep.Lost)
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}})
}

// A user whose permission to configure the queue is taken away under a
// running consumer is refused at the next connection (a 403 on the
// declare's channel): Run retries, says so at error and in Health, and
// consumes again once the permission is given back.
func TestBrokerPermissionTakenAwayIsWaitedFor(t *testing.T) {
	t.Parallel()
	user := brokerUser(t, "refused", "secret")
	q := brokerSpec(t)
	declareTopology(t, q)
	p := newProxy(t)
	r, c := prepare(t, q, ack, through(p), func(cfg *runtime.Config) {
		cfg.ReconnectMax = time.Second
		cfg.Credentials = func(context.Context) (string, string, error) { return user, "secret", nil }
	})
	r.launch(c)
	publish(t, q.Name, order(t, "before"))
	r.await(1)
	rabbitmqctl(t, "set_permissions", "-p", "/", user, "^$", ".*", ".*")
	p.cut()
	eventually(t, time.Minute, "Health to say the topology is refused", func() bool {
		return strings.Contains(c.Health().Why, "the broker refuses the topology, retrying until it is mended") &&
			strings.Contains(c.Health().Why, "403")
	})
	if !r.events.has(func(ev event) bool { return ev.stage == "topology-refused" && ev.level == slog.LevelError }) {
		t.Error("no topology-refused event at error")
	}
	rabbitmqctl(t, "set_permissions", "-p", "/", user, ".*", ".*", ".*")
	eventually(t, time.Minute, "the consumer to be ready again", func() bool { return c.Health().Ready })
	publish(t, q.Name, order(t, "after"))
	if rec := r.await(2)[1]; rec.MessageID != "after" || rec.Path != runtime.PathAcked {
		t.Errorf("after the permission came back: %+v", rec)
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, q.Topology.DeadLetterQueue: {0, 0}})
	if rep := r.stop(); !slices.ContainsFunc(rep.Lost, func(why string) bool { return strings.Contains(why, "403") }) {
		t.Errorf("report's lost intake %q lacks the refusal", rep.Lost)
	}
}

// A queue an operator declares again with other arguments under a running
// consumer is refused at the next connection (a 406): Run retries, says so
// at error and in Health, and consumes again once the queue is mended.
func TestBrokerQueueDeclaredWithOtherArgumentsIsWaitedFor(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t)
	declareTopology(t, q)
	p := newProxy(t)
	r, c := prepare(t, q, ack, through(p), func(cfg *runtime.Config) { cfg.ReconnectMax = time.Second })
	r.launch(c)
	publish(t, q.Name, order(t, "before"))
	r.await(1)
	// Held off while the operator works, so that it cannot declare the
	// queue first.
	p.freeze()
	ch := channel(t, dial(t))
	if _, err := ch.QueueDelete(q.Name, false, false, false); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(q.Name, true, false, false, false, amqp.Table{"x-max-length": int32(1000)}); err != nil {
		t.Fatal(err)
	}
	p.cut()
	eventually(t, time.Minute, "Health to say the topology is refused", func() bool {
		return strings.Contains(c.Health().Why, "the broker refuses the topology, retrying until it is mended") && strings.Contains(c.Health().Why, "PRECONDITION_FAILED")
	})
	if !r.events.has(func(ev event) bool { return ev.stage == "topology-refused" && ev.level == slog.LevelError }) {
		t.Error("no topology-refused event at error")
	}
	eventually(t, time.Minute, "three attempts refused", func() bool {
		return len(slices.DeleteFunc(r.events.all(), func(ev event) bool { return ev.stage != "topology-refused" })) >= 3
	})
	if _, err := ch.QueueDelete(q.Name, false, false, false); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "the consumer to be ready again", func() bool { return c.Health().Ready })
	publish(t, q.Name, order(t, "after"))
	if rec := r.await(2)[1]; rec.MessageID != "after" || rec.Path != runtime.PathAcked {
		t.Errorf("after the queue was mended: %+v", rec)
	}
	rep := r.stop()
	if rep.Counts[runtime.PathAcked] != 2 {
		t.Errorf("report: %s", rep)
	}
	// Each attempt was refused alike: one line counts them.
	if refusals := slices.DeleteFunc(slices.Clone(rep.Lost), func(why string) bool { return !strings.Contains(why, "PRECONDITION_FAILED") }); len(refusals) != 1 || !strings.Contains(refusals[0], " times in a row)") {
		t.Errorf("lost %q; want the refusal once, counted", rep.Lost)
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}})
}

// In a vhost whose default queue type is quorum, a queue declared without
// x-queue-type is made a quorum queue. Lily's classic queues name their
// type, so they stay classic there: the runtime reads them as classic.
func TestBrokerClassicQueuesStayClassicInAQuorumVhost(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	q := brokerSpec(t, func(q *runtime.QueueSpec) { q.Topology.Type = queue.Classic })
	vhost := q.Name + ".vhost"
	if _, err := faults.Rabbitmqctl(ctx, "add_vhost", vhost, "--default-queue-type", "quorum"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = faults.Rabbitmqctl(context.Background(), "delete_vhost", vhost) })
	if _, err := faults.Rabbitmqctl(ctx, "set_permissions", "-p", vhost, "guest", ".*", ".*", ".*"); err != nil {
		t.Fatal(err)
	}
	uri, err := amqp.ParseURI(brokerURL(t))
	if err != nil {
		t.Fatal(err)
	}
	uri.Vhost = vhost
	conn, err := amqp.Dial(uri.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := runtime.DeclareTopology(conn, q); err != nil {
		t.Fatal(err)
	}
	out, err := faults.Rabbitmqctl(ctx, "list_queues", "-p", vhost, "-q", "--no-table-headers", "name", "type")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2+len(q.Topology.RetryDelays) {
		t.Errorf("the vhost holds %q, want the queue, its DLQ and its buckets", lines)
	}
	for _, l := range lines {
		if f := strings.Fields(l); len(f) != 2 || f[1] != "classic" {
			t.Errorf("queue %q: want classic", l)
		}
	}
}
