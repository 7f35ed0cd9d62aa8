package runtime_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
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
	amqp "github.com/rabbitmq/amqp091-go"
)

// connectionNames lists the names of the broker's client connections.
func connectionNames(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("rabbitmqctl", "list_connections", "-q", "--no-table-headers", "client_properties").Output()
	if err != nil {
		t.Fatalf("rabbitmqctl list_connections: %v", err)
	}
	return strings.Split(string(out), "\n")
}

// served is what Serve returned.
type served struct {
	rep *runtime.Report
	err error
}

// serve runs Serve on a goroutine of its own and hands over what it
// returns.
func serve(ctx context.Context, services ...runtime.Service) <-chan served {
	out := make(chan served, 1)
	go func() {
		rep, err := runtime.Serve(ctx, services...)
		out <- served{rep, err}
	}()
	return out
}

// Two queues in one process under Serve, with one Publisher for the
// service's own sends and both consumers' handoffs: each queue settles its
// messages (one retried, one dead-lettered), no consumer opens a connection
// of its own (they consume on the Publisher's), and a cancel stops both with
// one combined report.
func TestBrokerServeRunsSeveralConsumersOnOnePublisher(t *testing.T) {
	t.Parallel()
	first, second := brokerSpec(t, hourRetry), brokerSpec(t, hourRetry)
	declareTopology(t, first)
	declareTopology(t, second)
	// Through a proxy of the test's own, which tells its connections from
	// other tests' publishers, named alike on the broker.
	p := newProxy(t)
	publisher := newPublisher(t, p.url(), 8)
	fail := func(_ context.Context, msg *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
		switch msg.OrderID {
		case "retry":
			return runtime.Retryable(errors.New("later"))
		case "refuse":
			return runtime.Permanent(errors.New("never"))
		}
		return nil
	}
	shared := func(cfg *runtime.Config) { cfg.Publisher = publisher }
	r1, c1 := prepare(t, first, fail, shared)
	r2, c2 := prepare(t, second, fail, shared)
	ctx, cancel := context.WithCancel(context.Background())
	ran := serve(ctx, c1, c2)
	for _, q := range []runtime.QueueSpec{first, second} {
		msgs := []runtime.Message{
			{RoutingKey: q.Name, Publishing: order(t, "ok")},
			{RoutingKey: q.Name, Publishing: order(t, "retry")},
			{RoutingKey: q.Name, Publishing: order(t, "refuse")},
		}
		for _, m := range msgs {
			if err := publisher.Send(context.Background(), m); err != nil {
				t.Fatal(err)
			}
		}
	}
	r1.await(3)
	r2.await(3)
	names := strings.Join(connectionNames(t), "\n")
	for _, q := range []runtime.QueueSpec{first, second} {
		if strings.Contains(names, "lily "+q.Name+" ") {
			t.Errorf("connections of %s: want none of its own, among\n%s", q.Name, names)
		}
	}
	if own := p.Conns(); !slices.Contains(own, "lily publisher publish") || !slices.Contains(own, "lily publisher consume") {
		t.Errorf("the publisher's connections %q: want one to publish and one to consume", own)
	}
	cancel()
	res := <-ran
	if res.err != nil {
		t.Fatalf("Serve: %v", res.err)
	}
	rep := res.rep
	if len(rep.Parts) != 2 || rep.Counts[runtime.PathAcked] != 2 || rep.Counts[runtime.PathRetried] != 2 || rep.Counts[runtime.PathDeadLettered] != 2 {
		t.Errorf("combined report: %s", rep)
	}
	for _, p := range rep.Parts {
		if p.Counts[runtime.PathAcked] != 1 || p.Counts[runtime.PathRetried] != 1 || p.Counts[runtime.PathDeadLettered] != 1 ||
			!slices.Contains([]string{first.Name, second.Name}, p.Queue) {
			t.Errorf("part: %s", p)
		}
	}
	assertCounts(t, map[string][2]int{
		first.Name: {0, 0}, bucket(first, time.Hour): {1, 0}, first.Topology.DeadLetterQueue: {1, 0},
		second.Name: {0, 0}, bucket(second, time.Hour): {1, 0}, second.Topology.DeadLetterQueue: {1, 0},
	})
}

// A queue whose declaration the broker refuses when the process starts (it
// exists with other arguments: a 406) is one team's deployment to mend, not
// the process's: its consumer retries it alone, not ready and saying why,
// while the other queue of the same Serve runs. Once an operator deletes
// the queue, it is declared as the schema says and its message handled.
func TestBrokerServeWaitsForAQueueTheBrokerRefuses(t *testing.T) {
	t.Parallel()
	good, bad := brokerSpec(t), brokerSpec(t)
	declareTopology(t, good)
	ch := channel(t, dial(t))
	defer ch.Close()
	if _, err := ch.QueueDeclare(bad.Name, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	ack := func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error { return nil }
	r1, c1 := prepare(t, good, ack)
	r2, c2 := prepare(t, bad, ack, func(cfg *runtime.Config) { cfg.ReconnectMax = 200 * time.Millisecond })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := serve(ctx, c1, c2)
	eventually(t, time.Minute, "the refused queue retried", func() bool {
		h := c2.Health()
		return !h.Ready && strings.HasPrefix(h.Why, "the broker refuses the topology, retrying until it is mended: ") &&
			strings.Contains(h.Why, "PRECONDITION_FAILED")
	})
	publish(t, good.Name, order(t, "meanwhile"))
	if recs := r1.await(1); recs[0].MessageID != "meanwhile" || recs[0].Path != runtime.PathAcked {
		t.Errorf("the other queue's message: %s %v", recs[0].MessageID, recs[0].Path)
	}
	if _, err := ch.QueueDelete(bad.Name, false, false, false); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "the mended queue consumed", func() bool { return c2.Health().Ready })
	publish(t, bad.Name, order(t, "mended"))
	if recs := r2.await(1); recs[0].MessageID != "mended" || recs[0].Path != runtime.PathAcked {
		t.Errorf("the mended queue's message: %s %v", recs[0].MessageID, recs[0].Path)
	}
	cancel()
	res := <-ran
	if res.err != nil || res.rep == nil || len(res.rep.Parts) != 2 {
		t.Fatalf("Serve: %v, %v", res.rep, res.err)
	}
	if lost := fmt.Sprint(res.rep.Parts[1].Lost); !strings.Contains(lost, "PRECONDITION_FAILED") {
		t.Errorf("the refused queue's report does not say it was refused: %s", lost)
	}
	assertCounts(t, map[string][2]int{good.Name: {0, 0}, bad.Name: {0, 0}, bad.Topology.DeadLetterQueue: {0, 0}})
}

// When one service cannot start at all (no broker at its URL), Serve stops
// the others gracefully and says why.
func TestBrokerServeStopsTheOthersWhenOneCannotStart(t *testing.T) {
	t.Parallel()
	good, lost := brokerSpec(t), brokerSpec(t)
	declareTopology(t, good)
	ack := func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error { return nil }
	_, c1 := prepare(t, good, ack)
	_, c2 := prepare(t, lost, ack, func(cfg *runtime.Config) { cfg.URLs = []string{"amqp://guest:guest@127.0.0.1:1/"} })
	rep, err := runtime.Serve(context.Background(), c1, c2)
	if err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("Serve: %v, want the refused dial", err)
	}
	if rep == nil || len(rep.Parts) != 1 || rep.Parts[0].Queue != good.Name {
		t.Errorf("report: %v, want the good queue's", rep)
	}
}

// A queue whose home node is down when the process starts (RabbitMQ
// answers its declare with a 404 "down or inaccessible"; here a real 404's
// reason rewritten at a proxy) is out of reach, not misdeployed: its
// consumer retries it alone, not ready and saying why, while the other
// queue of the same Serve runs; once the queue is back, its message is
// handled.
func TestBrokerServeWaitsForAQueueWhoseNodeIsDown(t *testing.T) {
	t.Parallel()
	good := brokerSpec(t)
	declareTopology(t, good)
	away := brokerSpec(t, func(q *runtime.QueueSpec) { q.Topology.External = true })
	p := newProxy(t)
	p.Rewrite(func(f faults.Frame, raw []byte) []byte {
		if f.Dir != faults.ToClient || !f.Is(faults.ChannelClose) || binary.BigEndian.Uint16(raw[11:13]) != amqp.NotFound {
			return raw
		}
		reason := "NOT_FOUND - home node 'rabbit@gone' of durable queue '" + away.Name + "' in vhost '/' is down or inaccessible"
		payload := append(slices.Clone(raw[7:13]), byte(len(reason)))
		payload = append(append(payload, reason...), raw[14+int(raw[13]):len(raw)-1]...)
		frame := binary.BigEndian.AppendUint32(slices.Clone(raw[:3]), uint32(len(payload)))
		return append(append(frame, payload...), raw[len(raw)-1])
	})
	ack := func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error { return nil }
	r1, c1 := prepare(t, good, ack)
	r2, c2 := prepare(t, away, ack, func(cfg *runtime.Config) { cfg.URLs, cfg.ReconnectMax = []string{p.url()}, 200*time.Millisecond })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := serve(ctx, c1, c2)
	eventually(t, time.Minute, "the queue out of reach retried", func() bool {
		h := c2.Health()
		return !h.Ready && strings.HasPrefix(h.Why, "connected, not consuming: ") && strings.Contains(h.Why, "home node 'rabbit@gone'") &&
			r2.events.has(func(e event) bool { return strings.Contains(e.detail, "home node 'rabbit@gone'") })
	})
	publish(t, good.Name, order(t, "meanwhile"))
	if recs := r1.await(1); recs[0].Path != runtime.PathAcked {
		t.Errorf("the other queue's message: %v", recs[0].Path)
	}
	// Its node is back: the queue is there again, with a message waiting.
	ch := channel(t, dial(t))
	if _, err := ch.QueueDeclare(away.Name, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	_ = ch.Close()
	publish(t, away.Name, order(t, "waited"))
	if recs := r2.await(1); recs[0].MessageID != "waited" || recs[0].Path != runtime.PathAcked {
		t.Errorf("the queue back: %s %v", recs[0].MessageID, recs[0].Path)
	}
	cancel()
	res := <-ran
	if res.err != nil || res.rep == nil || len(res.rep.Parts) != 2 {
		t.Fatalf("Serve: %v, %v", res.rep, res.err)
	}
	if lost := fmt.Sprint(res.rep.Parts[1].Lost); !strings.Contains(lost, "home node 'rabbit@gone'") {
		t.Errorf("the queue's report does not say it was out of reach: %s", lost)
	}
	assertCounts(t, map[string][2]int{good.Name: {0, 0}, away.Name: {0, 0}, away.Topology.DeadLetterQueue: {0, 0}})
}

// A queue another connection declared exclusive (a 405 RESOURCE_LOCKED on
// the declare) is the holder's to let go, as the 403 of an exclusive
// consumer is: under Serve its consumer waits for it alone, not ready and
// saying so at error, while the other queue runs; once the holder's
// connection ends, the queue is declared and consumed. Run alone returns
// the refusal at the first connection, as any refusal.
func TestBrokerServeWaitsForAQueueHeldExclusively(t *testing.T) {
	t.Parallel()
	good, held := brokerSpec(t), brokerSpec(t)
	declareTopology(t, good)
	holder := dial(t)
	if _, err := channel(t, holder).QueueDeclare(held.Name, false, false, true, false, nil); err != nil {
		t.Fatal(err)
	}
	_, lone := prepare(t, held, ack)
	alone, stop := context.WithTimeout(context.Background(), time.Minute)
	defer stop()
	if _, err := lone.Run(alone); err == nil || !strings.Contains(err.Error(), "RESOURCE_LOCKED") {
		t.Errorf("Run alone: %v, want the 405", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r1, c1 := prepare(t, good, ack)
	r2, c2 := prepare(t, held, ack, func(cfg *runtime.Config) { cfg.ReconnectMax = 200 * time.Millisecond })
	ran := serve(ctx, c1, c2)
	eventually(t, time.Minute, "the held queue waited for", func() bool {
		h := c2.Health()
		return !h.Ready && strings.HasPrefix(h.Why, "the broker refuses the topology, retrying until it is mended: ") &&
			strings.Contains(h.Why, "RESOURCE_LOCKED") &&
			r2.events.has(func(ev event) bool { return ev.stage == "topology-refused" && ev.level == slog.LevelError })
	})
	publish(t, good.Name, order(t, "meanwhile"))
	if recs := r1.await(1); recs[0].MessageID != "meanwhile" || recs[0].Path != runtime.PathAcked {
		t.Errorf("the other queue's message: %s %v", recs[0].MessageID, recs[0].Path)
	}
	// The holder goes, and its exclusive queue with it.
	_ = holder.Close()
	eventually(t, time.Minute, "the queue let go consumed", func() bool { return c2.Health().Ready })
	publish(t, held.Name, order(t, "let-go"))
	if recs := r2.await(1); recs[0].MessageID != "let-go" || recs[0].Path != runtime.PathAcked {
		t.Errorf("the queue let go: %s %v", recs[0].MessageID, recs[0].Path)
	}
	cancel()
	res := <-ran
	if res.err != nil || res.rep == nil || len(res.rep.Parts) != 2 {
		t.Fatalf("Serve: %v, %v", res.rep, res.err)
	}
	if lost := fmt.Sprint(res.rep.Parts[1].Lost); !strings.Contains(lost, "RESOURCE_LOCKED") {
		t.Errorf("the held queue's report does not say it was refused: %s", lost)
	}
	assertCounts(t, map[string][2]int{good.Name: {0, 0}, held.Name: {0, 0}})
}

// stuckConsume makes the broker behind p, while on holds, answer a
// basic.consume of queue name as a channel process blocked in it does (a
// quorum queue without a leader): neither the consume nor the
// channel.close that follows it is answered. It counts the consumes held.
func stuckConsume(p *proxy, name string, on *atomic.Bool) *atomic.Int32 {
	type key struct {
		conn string
		ch   uint16
	}
	var mu sync.Mutex
	stuck := map[key]bool{}
	var held atomic.Int32
	p.Rewrite(func(f faults.Frame, raw []byte) []byte {
		if f.Dir != faults.ToBroker || f.Type != 1 || !on.Load() {
			return raw
		}
		mu.Lock()
		defer mu.Unlock()
		k := key{f.Conn, f.Channel}
		switch {
		case f.Method == (faults.Method{Class: 20, ID: 10}): // channel.open: the number reused
			delete(stuck, k)
		case f.Is(faults.BasicConsume):
			// After the header, the method ids and the reserved short,
			// the queue's name as a short string.
			if n := int(raw[13]); string(raw[14:14+n]) == name {
				stuck[k] = true
				held.Add(1)
				return nil
			}
		case f.Is(faults.ChannelClose) && stuck[k]:
			return nil
		}
		return raw
	})
	return &held
}

// A queue whose consume the broker does not answer at the start (a quorum
// queue without a leader: out of reach, not misdeployed) is retried alone
// under Serve, not ready, while the other queue runs; once the broker
// answers, its message is handled. A lone Run still fails at the start.
func TestBrokerServeWaitsForAQueueWhoseConsumeHangs(t *testing.T) {
	t.Parallel()
	good, hung := brokerSpec(t), brokerSpec(t)
	declareTopology(t, good)
	declareTopology(t, hung)
	p := newProxy(t)
	var on atomic.Bool
	on.Store(true)
	stuckConsume(p, hung.Name, &on)
	viaProxy := func(cfg *runtime.Config) {
		cfg.URLs, cfg.StepTimeout, cfg.ReconnectMax = []string{p.url()}, time.Second, 200*time.Millisecond
	}
	_, lone := prepare(t, hung, ack, viaProxy)
	alone, stop := context.WithTimeout(context.Background(), time.Minute)
	defer stop()
	if _, err := lone.Run(alone); err == nil || !strings.Contains(err.Error(), "did not return in time") {
		t.Errorf("Run alone: %v, want the consume not answered", err)
	}
	r1, c1 := prepare(t, good, ack)
	r2, c2 := prepare(t, hung, ack, viaProxy)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := serve(ctx, c1, c2)
	eventually(t, time.Minute, "the hung queue retried", func() bool {
		h := c2.Health()
		return !h.Ready && strings.HasPrefix(h.Why, "connected, not consuming: ") && strings.Contains(h.Why, "did not return in time") &&
			r2.events.has(func(ev event) bool {
				return ev.stage == "intake-lost" && strings.Contains(ev.detail, "consume "+hung.Name) &&
					strings.Contains(ev.detail, "did not return in time")
			})
	})
	publish(t, good.Name, order(t, "meanwhile"))
	if recs := r1.await(1); recs[0].MessageID != "meanwhile" || recs[0].Path != runtime.PathAcked {
		t.Errorf("the other queue's message: %s %v", recs[0].MessageID, recs[0].Path)
	}
	on.Store(false)
	publish(t, hung.Name, order(t, "answered"))
	if recs := r2.await(1); recs[0].MessageID != "answered" || recs[0].Path != runtime.PathAcked {
		t.Errorf("the queue answered: %s %v", recs[0].MessageID, recs[0].Path)
	}
	cancel()
	res := <-ran
	if res.err != nil || res.rep == nil || len(res.rep.Parts) != 2 {
		t.Fatalf("Serve: %v, %v", res.rep, res.err)
	}
	if lost := fmt.Sprint(res.rep.Parts[1].Lost); !strings.Contains(lost, "did not return in time") {
		t.Errorf("the queue's report does not say it was out of reach: %s", lost)
	}
	assertCounts(t, map[string][2]int{good.Name: {0, 0}, hung.Name: {0, 0}})
}

// A first connection the node took and that then closed under the session's
// opening (a network blip, a node restarting) is no setup mistake: under
// Serve the consumer retries it alone, as a declare not answered in time,
// and the other queues run. A lone Run returns it, as it does a dial that
// fails.
func TestBrokerServeRetriesAFirstConnectionDroppedWhileOpening(t *testing.T) {
	t.Parallel()
	good, cut := brokerSpec(t), brokerSpec(t)
	declareTopology(t, good)
	declareTopology(t, cut)
	p := newProxy(t)
	var cuts atomic.Int64
	cuts.Store(2)
	p.Intercept(func(f faults.Frame) faults.Action {
		// queue.declare: the first declare of the connection's session.
		if f.Dir == faults.ToBroker && f.Is(faults.Method{Class: 50, ID: 10}) && cuts.Add(-1) >= 0 {
			return faults.CutBefore
		}
		return faults.Forward
	})
	viaProxy := func(cfg *runtime.Config) {
		cfg.URLs, cfg.ReconnectMax = []string{p.url()}, 200*time.Millisecond
	}
	_, lone := prepare(t, cut, ack, viaProxy)
	alone, stop := context.WithTimeout(context.Background(), time.Minute)
	defer stop()
	if _, err := lone.Run(alone); err == nil || !strings.Contains(err.Error(), "declare queue") {
		t.Errorf("Run alone: %v, want the declare's connection closed", err)
	}
	r1, c1 := prepare(t, good, ack)
	r2, c2 := prepare(t, cut, ack, viaProxy)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := serve(ctx, c1, c2)
	eventually(t, time.Minute, "both ready", func() bool {
		select {
		case res := <-ran:
			t.Fatalf("Serve returned: %v", res.err)
		default:
		}
		return c1.Health().Ready && c2.Health().Ready
	})
	publish(t, good.Name, order(t, "meanwhile"))
	if recs := r1.await(1); recs[0].MessageID != "meanwhile" || recs[0].Path != runtime.PathAcked {
		t.Errorf("the other queue's message: %s %v", recs[0].MessageID, recs[0].Path)
	}
	publish(t, cut.Name, order(t, "reopened"))
	if recs := r2.await(1); recs[0].MessageID != "reopened" || recs[0].Path != runtime.PathAcked {
		t.Errorf("the queue whose connection dropped: %s %v", recs[0].MessageID, recs[0].Path)
	}
	cancel()
	res := <-ran
	if res.err != nil || res.rep == nil || len(res.rep.Parts) != 2 {
		t.Fatalf("Serve: %v, %v", res.rep, res.err)
	}
	if lost := fmt.Sprint(res.rep.Parts[1].Lost); !strings.Contains(lost, "declare queue") {
		t.Errorf("the queue's report does not say its first connection dropped: %s", lost)
	}
	assertCounts(t, map[string][2]int{good.Name: {0, 0}, cut.Name: {0, 0}})
}

// A stop while the first connection is being dialed stops the dial: the
// Credentials' ctx ends with it, and no connection opens after Serve
// returned, though the function ignores its ctx and returns.
func TestBrokerStopDuringTheFirstDialEndsIt(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t)
	declareTopology(t, q)
	p := newProxy(t)
	var opened atomic.Bool
	p.Intercept(func(f faults.Frame) faults.Action {
		if f.Dir == faults.ToBroker && f.Is(faults.Method{Class: 10, ID: 40}) { // connection.open
			opened.Store(true)
		}
		return faults.Forward
	})
	asked := make(chan struct{})
	var once sync.Once
	var ctxEnded, returned atomic.Bool
	_, c := prepare(t, q, ack, func(cfg *runtime.Config) {
		cfg.URLs, cfg.StepTimeout = []string{p.url()}, 10*time.Second
		cfg.Credentials = func(ctx context.Context) (string, string, error) {
			once.Do(func() { close(asked) })
			time.Sleep(2 * time.Second)
			ctxEnded.Store(ctx.Err() != nil)
			returned.Store(true)
			return "guest", "guest", nil
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-asked
		cancel()
	}()
	if _, err := runtime.Serve(ctx, c); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "Credentials returned", returned.Load)
	if !ctxEnded.Load() {
		t.Error("the Credentials' ctx did not end with the stop")
	}
	time.Sleep(time.Second) // what the dial would still do, it does at once
	if opened.Load() {
		t.Error("a connection opened after Serve returned")
	}
}
