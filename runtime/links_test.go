package runtime_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/internal/faults"
	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/runtime/internal/fixture"
)

// sharedPublisher is a Publisher reaching the broker at url, for consumers
// to share.
func sharedPublisher(t *testing.T, url string) *runtime.Publisher {
	t.Helper()
	pub, err := runtime.NewPublisher(runtime.Config{URLs: []string{url}, ReconnectMax: 200 * time.Millisecond}, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pub.Close)
	return pub
}

// sharing makes a consumer name pub. Its own URL leads nowhere: it consumes
// on the Publisher's connection, or not at all.
func sharing(t *testing.T, pub *runtime.Publisher) func(*runtime.Config) {
	return func(cfg *runtime.Config) {
		cfg.Publisher, cfg.URLs, cfg.ReconnectMax = pub, []string{deadNode(t)}, 200*time.Millisecond
	}
}

// consuming lists p's consuming connections.
func consuming(p *proxy) []string {
	return slices.DeleteFunc(p.Conns(), func(name string) bool { return !strings.HasSuffix(name, " consume") })
}

// Consumers naming one Publisher consume on one connection, reached through
// the Publisher's URLs: one dial serves them all, again after the
// connection is lost, and it stays open while any of them runs.
func TestBrokerConsumersNamingAPublisherShareOneConnection(t *testing.T) {
	t.Parallel()
	p := newProxy(t)
	pub := sharedPublisher(t, p.url())
	qa, qb := brokerSpec(t, hourRetry), brokerSpec(t, hourRetry)
	declareTopology(t, qa)
	declareTopology(t, qb)
	a := start(t, qa, ack, sharing(t, pub))
	b := start(t, qb, func(_ context.Context, msg *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
		if msg.OrderID == "b-1" {
			return errors.New("retry it, through the publisher")
		}
		return nil
	}, sharing(t, pub))
	publish(t, qa.Name, order(t, "a-1"))
	publish(t, qb.Name, order(t, "b-1"))
	if rec := a.await(1)[0]; rec.Path != runtime.PathAcked {
		t.Errorf("a's record %+v, want acked", rec)
	}
	if rec := b.await(1)[0]; rec.Path != runtime.PathRetried || rec.Handoff != "confirmed" {
		t.Errorf("b's record %+v, want retried with a confirmed handoff", rec)
	}
	if got := consuming(p); len(got) != 1 || got[0] != "lily publisher consume" {
		t.Errorf("consuming connections %v, want the publisher's one", got)
	}
	assertCounts(t, map[string][2]int{qa.Name: {0, 0}, qb.Name: {0, 0}, bucket(qb, time.Hour): {1, 0}})
	// Proven before the loss, which would leave it ambiguous.
	eventually(t, 2*time.Minute, "a-1's ACK proven", func() bool {
		return a.events.has(func(ev event) bool { return ev.stage == "ack-proven" && ev.messageID == "a-1" })
	})

	p.CutConns(func(name string) bool { return strings.HasSuffix(name, " consume") })
	eventually(t, 2*time.Minute, "both consumers reconnected", func() bool { return a.reconnects() >= 1 && b.reconnects() >= 1 })
	if got := consuming(p); len(got) != 1 {
		t.Errorf("consuming connections after the loss %v, want one", got)
	}
	publish(t, qa.Name, order(t, "a-2"))
	publish(t, qb.Name, order(t, "b-2"))
	if rec := a.await(2)[1]; rec.MessageID != "a-2" || rec.Path != runtime.PathAcked {
		t.Errorf("a's record %+v, want a-2 acked", rec)
	}
	if rec := b.await(2)[1]; rec.MessageID != "b-2" || rec.Path != runtime.PathAcked {
		t.Errorf("b's record %+v, want b-2 acked", rec)
	}

	// a stops: b goes on, on the connection they shared.
	sessions := b.reconnects()
	if rep := a.stop(); rep.Counts[runtime.PathAcked] != 2 || len(rep.Unresolved) != 0 || rep.AcksProven != 2 {
		t.Errorf("a's report: %+v", rep)
	}
	publish(t, qb.Name, order(t, "b-3"))
	if rec := b.await(3)[2]; rec.MessageID != "b-3" || rec.Path != runtime.PathAcked || rec.Redelivered {
		t.Errorf("b's record %+v, want b-3 acked", rec)
	}
	if got := consuming(p); len(got) != 1 || b.reconnects() != sessions {
		t.Errorf("consuming connections once a stopped %v, b's sessions since %d; want b's, on the same session", got, b.reconnects()-sessions)
	}
	// The last consumer to stop closes it.
	if rep := b.stop(); len(rep.Unresolved) != 0 {
		t.Errorf("b's report: %+v", rep)
	}
	eventually(t, 2*time.Minute, "the consuming connection closed", func() bool { return len(consuming(p)) == 0 })
	assertCounts(t, map[string][2]int{qa.Name: {0, 0}, qb.Name: {0, 0}, bucket(qb, time.Hour): {1, 0}})
}

// A consumer whose channel does not close when it stops (the broker never
// sees the close) closes the connection it shares: its unsettled delivery
// would otherwise stay unacknowledged for as long as the other consumer
// runs. The other loses its session, says why, and consumes again.
func TestBrokerChannelLeftOpenClosesTheSharedConnection(t *testing.T) {
	t.Parallel()
	p := newProxy(t)
	pub := sharedPublisher(t, p.url())
	// a's handler outlives the shutdown, not its timeout: its delivery is
	// left unsettled.
	qa := brokerSpec(t, hourRetry, func(q *runtime.QueueSpec) { q.HandlerTimeout = time.Hour })
	qb := brokerSpec(t, hourRetry)
	declareTopology(t, qa)
	declareTopology(t, qb)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	var running atomic.Bool
	a := start(t, qa, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error {
		running.Store(true)
		<-release // ignores its context: abandoned at the final abort
		return nil
	}, sharing(t, pub), func(cfg *runtime.Config) { cfg.StepTimeout = 2 * time.Second })
	b := start(t, qb, ack, sharing(t, pub))
	publish(t, qa.Name, order(t, "held"))
	publish(t, qb.Name, order(t, "b-1"))
	b.await(1)
	eventually(t, 2*time.Minute, "a's handler running", running.Load)

	var dropped atomic.Bool
	p.Intercept(func(f faults.Frame) faults.Action {
		if f.Dir == faults.ToBroker && f.Is(faults.ChannelClose) && strings.HasSuffix(f.Conn, " consume") && dropped.CompareAndSwap(false, true) {
			return faults.Drop
		}
		return faults.Forward
	})
	rep := a.stop()
	if !dropped.Load() {
		t.Fatal("a's channel close never came")
	}
	if len(rep.Unresolved) != 1 || rep.Unresolved[0].MessageID != "held" || rep.Abandoned != 1 {
		t.Errorf("a's report: unresolved %+v, abandoned %d; want held, abandoned", rep.Unresolved, rep.Abandoned)
	}
	// Back in its queue, not held unacknowledged by a channel no one reads.
	assertCounts(t, map[string][2]int{qa.Name: {1, 0}, bucket(qa, time.Hour): {0, 0}})
	eventually(t, 2*time.Minute, "b reconnected", func() bool { return b.reconnects() >= 1 })
	if !b.events.has(func(ev event) bool {
		return ev.stage == "intake-lost" && strings.Contains(ev.detail, "did not close cleanly")
	}) {
		t.Error("b's loss is not explained")
	}
	publish(t, qb.Name, order(t, "b-2"))
	if rec := b.await(2)[1]; rec.MessageID != "b-2" || rec.Path != runtime.PathAcked {
		t.Errorf("b's record %+v, want b-2 acked", rec)
	}
	assertCounts(t, map[string][2]int{qb.Name: {0, 0}})
}

// A consumer that starts as the shared connection dies (open, but no longer
// answering) does not take it for a node that cannot serve: with a single
// URL, that was its one attempt, and Run failed. It dials a new connection.
func TestBrokerConsumerStartingOnADyingSharedConnectionDialsAnew(t *testing.T) {
	t.Parallel()
	p := newProxy(t)
	dying, err := amqp.Dial(p.url())
	if err != nil {
		t.Fatal(err)
	}
	p.freeze() // nothing it sends reaches the broker any more
	pub := sharedPublisher(t, brokerURL(t))
	pub.ShareConsuming(dying)
	q := brokerSpec(t)
	declareTopology(t, q)
	publish(t, q.Name, order(t, "anew-1"))
	// The attempt on the dying connection ends at the step; the step
	// carries the new connection's declarations on a loaded machine.
	r := start(t, q, ack, func(cfg *runtime.Config) { cfg.Publisher, cfg.StepTimeout = pub, 3*time.Second })
	if rec := r.await(1)[0]; rec.MessageID != "anew-1" || rec.Path != runtime.PathAcked {
		t.Errorf("record %+v, want anew-1 acked", rec)
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}})
}

// A consume the broker refuses on the channel (another connection holds the
// queue exclusively) says nothing against the node: the shared connection is
// not passed over, and the next consumer to start joins it.
func TestBrokerRefusedConsumeKeepsTheSharedConnection(t *testing.T) {
	t.Parallel()
	p := newProxy(t)
	pub := sharedPublisher(t, p.url())
	qa, qz, qb := brokerSpec(t), brokerSpec(t), brokerSpec(t)
	for _, q := range []runtime.QueueSpec{qa, qz, qb} {
		declareTopology(t, q)
	}
	if _, err := channel(t, dial(t)).Consume(qz.Name, "holder", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	a := start(t, qa, ack, sharing(t, pub))
	publish(t, qa.Name, order(t, "a-1"))
	a.await(1)
	_, z := prepare(t, qz, ack, sharing(t, pub))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := z.Run(ctx); err == nil || !strings.Contains(err.Error(), "ACCESS_REFUSED") {
		t.Errorf("a consumer of a queue held exclusively ran: %v", err)
	}
	b := start(t, qb, ack, sharing(t, pub))
	publish(t, qb.Name, order(t, "b-1"))
	if rec := b.await(1)[0]; rec.Path != runtime.PathAcked {
		t.Errorf("b's record %+v, want acked", rec)
	}
	if got := consuming(p); len(got) != 1 || a.reconnects() != 0 {
		t.Errorf("consuming connections %v, a's reconnects %d; want one, none", got, a.reconnects())
	}
	assertCounts(t, map[string][2]int{qa.Name: {0, 0}, qb.Name: {0, 0}})
}

// A consume the broker does not answer, nor the channel.close after it (a
// quorum queue without a leader blocks its channel), says nothing against
// the shared connection's other channels: the consumers already on it keep
// their sessions, at each of the hung queue's attempts, and consume on;
// the hung queue consumes once the broker answers.
func TestBrokerHungConsumeKeepsTheSharedConnection(t *testing.T) {
	t.Parallel()
	p := newProxy(t)
	pub := sharedPublisher(t, p.url())
	qa, qb := brokerSpec(t), brokerSpec(t)
	declareTopology(t, qa)
	declareTopology(t, qb)
	var on atomic.Bool
	hung := stuckConsume(p, qb.Name, &on)
	fast := func(cfg *runtime.Config) { cfg.StepTimeout = time.Second }
	a := start(t, qa, ack, sharing(t, pub), fast)
	b := start(t, qb, ack, sharing(t, pub), fast)
	t.Cleanup(func() { on.Store(false) }) // before the stops: their closes pass
	publish(t, qa.Name, order(t, "a-1"))
	publish(t, qb.Name, order(t, "b-1"))
	a.await(1)
	b.await(1)
	on.Store(true)
	// The queue deleted: the broker cancels b's consumer, and b's next
	// sessions' consumes hang, the first on the connection a consumes on.
	ch := channel(t, dial(t))
	if _, err := ch.QueueDelete(qb.Name, false, false, false); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "three of b's consumes hung", func() bool {
		return hung.Load() >= 3 && b.events.has(func(ev event) bool {
			return ev.stage == "intake-lost" && strings.Contains(ev.detail, "consume "+qb.Name)
		})
	})
	publish(t, qa.Name, order(t, "a-2"))
	if rec := a.await(2)[1]; rec.MessageID != "a-2" || rec.Path != runtime.PathAcked {
		t.Errorf("a's record %+v, want a-2 acked", rec)
	}
	if n := a.reconnects(); n != 0 {
		for _, ev := range a.events.all() {
			if ev.stage == "intake-lost" {
				t.Logf("a lost: %s", ev.detail)
			}
		}
		t.Errorf("a lost its session %d times to b's hung consumes", n)
	}
	on.Store(false)
	publish(t, qb.Name, order(t, "b-2"))
	if rec := b.await(2)[1]; rec.MessageID != "b-2" || rec.Path != runtime.PathAcked {
		t.Errorf("b's record %+v, want b-2 acked", rec)
	}
	// a's, passed over, and b's: each connection dialed for a hung
	// attempt closed with it.
	eventually(t, 2*time.Minute, "two consuming connections", func() bool { return len(consuming(p)) == 2 })
	assertCounts(t, map[string][2]int{qa.Name: {0, 0}, qb.Name: {0, 0}})
}

// publishing lists p's publishing connections.
func publishing(p *proxy) []string {
	return slices.DeleteFunc(p.Conns(), func(name string) bool { return !strings.HasSuffix(name, " publish") })
}

// Consumers naming one Publisher each hold a channel of their own on its
// connection once they hand a message off, beside the Publisher's own and
// its looks for an exchange. A broker's channel_max (here 3, asked by the
// URL) that they outnumber sends the next channel to another connection of
// the same role, which closes once it holds no channel: every handoff is
// confirmed. Before, every channel open past the limit failed ("channel id
// space exhausted"), and so did each handoff of the consumers left without
// one.
func TestBrokerPublisherSpillsPastChannelMax(t *testing.T) {
	t.Parallel()
	p := newProxy(t)
	pub := sharedPublisher(t, p.url()+"?channel_max=3")
	qs := make([]runtime.QueueSpec, 5)
	for i := range qs {
		qs[i] = brokerSpec(t, hourRetry)
		declareTopology(t, qs[i])
	}
	if err := faults.OnChannel(brokerURL(t), func(ch *amqp.Channel) error {
		return ch.QueueBind(qs[0].Name, qs[0].Name, "amq.direct", false, nil)
	}); err != nil {
		t.Fatal(err)
	}
	if err := pub.Send(context.Background(), message(t, "amq.direct", qs[0].Name, "sent")); err != nil {
		t.Fatalf("Send: %v", err)
	}
	retry := func(_ context.Context, msg *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
		if msg.OrderID == "sent" {
			return nil
		}
		return errors.New("retry it, through the publisher")
	}
	rs := make([]*running, len(qs))
	for i, q := range qs {
		rs[i] = start(t, q, retry, sharing(t, pub))
		publish(t, q.Name, order(t, "r-"+strconv.Itoa(i)))
	}
	for i, r := range rs {
		want := 1
		if i == 0 {
			want = 2 // and "sent", acked
		}
		recs := r.await(want)
		for _, rec := range recs {
			if rec.MessageID != "sent" && (rec.Path != runtime.PathRetried || rec.Handoff != "confirmed") {
				t.Errorf("queue %d: record %+v, want retried with a confirmed handoff", i, rec)
			}
		}
	}
	if got := publishing(p); len(got) < 2 {
		t.Errorf("publishing connections %v, want more than one", got)
	}
	// Another exchange: its look needs a channel too.
	if err := pub.Send(context.Background(), message(t, "amq.topic", "", "unrouted")); !errors.Is(err, runtime.ErrReturned) {
		t.Errorf("Send to amq.topic: %v, want returned", err)
	}
	for _, r := range rs {
		if rep := r.stop(); len(rep.Unresolved) != 0 {
			t.Errorf("report: %+v", rep)
		}
	}
	eventually(t, 2*time.Minute, "one publishing connection left", func() bool { return len(publishing(p)) == 1 })
	if err := pub.Send(context.Background(), message(t, "", qs[1].Name, "after")); err != nil {
		t.Errorf("Send once the consumers stopped: %v", err)
	}
	for _, q := range qs {
		if ready, _ := queueCounts(t, bucket(q, time.Hour)); ready != 1 {
			t.Errorf("%s holds %d, want its retry copy", bucket(q, time.Hour), ready)
		}
	}
}
