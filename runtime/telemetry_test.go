package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/runtime/internal/fixture"
)

// journeyKey is the context key under which journeys keeps a journey's message id.
type journeyKey struct{}

// deliveryKey is the context key under which journeys keeps which delivery of
// its message a journey is: "id#1", "id#2" and so on.
type deliveryKey struct{}

// journeys is a Telemetry that writes down every call it gets, in order, per
// message and per delivery of each, and what each Received could read. A
// requeued delivery's redelivery may be received before the hook's ends of
// the delivery before it, which follow the NACK, and a retry's before those
// that follow the ACK: only a delivery's own calls come in a set order.
type journeys struct {
	mu       sync.Mutex
	seen     map[string][]string
	received map[string]int // the deliveries of each message so far
	headers  map[string]any // the trace header each delivery carried, as Received read it
	lost     int
}

func newJourneys() *journeys {
	return &journeys{seen: map[string][]string{}, received: map[string]int{}, headers: map[string]any{}}
}

// add writes call down for the journey of ctx: under its message id, and
// under its delivery's key when it has one.
func (c *journeys) add(ctx context.Context, call string) {
	id, _ := ctx.Value(journeyKey{}).(string)
	delivery, _ := ctx.Value(deliveryKey{}).(string)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen[id] = append(c.seen[id], call)
	if delivery != "" {
		c.seen[delivery] = append(c.seen[delivery], call)
	}
}

func (c *journeys) Received(ctx context.Context, queue string, d runtime.RawDelivery) context.Context {
	id := d.MessageID()
	v, _ := d.Header("traceparent")
	c.mu.Lock()
	c.headers[fmt.Sprint(id, "@", d.Attempt())] = v
	c.received[id]++
	delivery := fmt.Sprint(id, "#", c.received[id])
	c.mu.Unlock()
	ctx = context.WithValue(context.WithValue(ctx, journeyKey{}, id), deliveryKey{}, delivery)
	c.add(ctx, fmt.Sprintf("received %s attempt %d body %d", queue, d.Attempt(), len(d.Body())))
	return ctx
}

func (c *journeys) Publish(ctx context.Context, exchange, key string, p *runtime.Publishing) func(string, time.Time) {
	id, _ := ctx.Value(journeyKey{}).(string)
	p.Headers["traceparent"] = "from " + id
	return func(evidence string, _ time.Time) {
		c.add(ctx, fmt.Sprintf("publish %q %s %s", exchange, key, evidence))
	}
}

func (c *journeys) Settle(ctx context.Context, op string) func(string, time.Time) {
	return func(evidence string, _ time.Time) { c.add(ctx, op+" "+evidence) }
}

func (c *journeys) Settled(ctx context.Context, r runtime.Record) {
	c.add(ctx, "settled "+string(r.Path))
}

func (c *journeys) Lost(string, string) {
	c.mu.Lock()
	c.lost++
	c.mu.Unlock()
}

func (c *journeys) of(id string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.seen[id])
}

// The hook sees each journey from receipt to settlement in one context, each
// handoff before its publish (what it adds travels with the copy), each
// settlement with its evidence; and a poison delivery's view reads nothing.
func TestBrokerTelemetryFollowsEachJourney(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, func(q *runtime.QueueSpec) {
		q.MaxAttempts = 2
		q.Topology.RetryDelays = []time.Duration{50 * time.Millisecond}
	})
	declareTopology(t, q)
	tel := newJourneys()
	h := handler(func(ctx context.Context, msg *fixture.OrderPlacedV1, d runtime.RawDelivery) error {
		if ctx.Value(journeyKey{}) != d.MessageID() {
			return runtime.Permanent(fmt.Errorf("the handler's context is not the journey's"))
		}
		if msg.OrderID == "fails" {
			return fmt.Errorf("retry me")
		}
		return nil
	})
	r := start(t, q, h, func(c *runtime.Config) { c.Telemetry = tel })
	poison := order(t, "poison")
	poison.Headers["x-lily-attempt"] = "not a number"
	poison.Headers["traceparent"] = "00-hostile"
	publish(t, q.Name, order(t, "ok"), produce(t, "fails", &fixture.OrderPlacedV1{OrderID: "fails"}), poison)
	// ok; fails at attempts 1 and 2 (retried, then dead-lettered); poison.
	r.await(4)
	r.stop()

	want := map[string][]string{
		"ok": {"received " + q.Name + " attempt 1 body 17", "ack ack sent", "settled acked"},
		// A handoff's publish ends before the ACK's settlement: a slow end
		// of the one does not count in the other's duration.
		"fails#1": {"received " + q.Name + " attempt 1 body 20", `publish "" ` + bucket(q, 50*time.Millisecond) + " confirmed", "ack ack sent", "settled retried"},
		"fails#2": {"received " + q.Name + " attempt 2 body 20", `publish "" ` + q.Topology.DeadLetterQueue + " confirmed", "ack ack sent", "settled dead-lettered"},
		"fails#3": nil,
		// The poison delivery's view has no id, attempt, header or body.
		"": {"received " + q.Name + " attempt 0 body 0", `publish "" ` + q.Topology.DeadLetterQueue + " confirmed", "ack ack sent", "settled dead-lettered"},
	}
	for id, calls := range want {
		if got := tel.of(id); !slices.Equal(got, calls) {
			t.Errorf("%q's calls:\n got %q\nwant %q", id, got, calls)
		}
	}
	// The retry copy carried what Publish added; the DLQ copies do too.
	if got := tel.headers["fails@2"]; got != "from fails" {
		t.Errorf("the retry delivery's traceparent: %v, want the one its handoff wrote", got)
	}
	if got := tel.headers["@0"]; got != nil {
		t.Errorf("Received read %v from a poison delivery", got)
	}
	dlq := drain(t, q.Topology.DeadLetterQueue)
	if len(dlq) != 2 {
		t.Fatalf("%d copies in the DLQ, want 2", len(dlq))
	}
	for _, d := range dlq {
		want := "from fails"
		if d.MessageId == "poison" {
			want = "from "
		}
		if d.Headers["traceparent"] != want {
			t.Errorf("DLQ copy %s: traceparent %v, want %q", d.MessageId, d.Headers["traceparent"], want)
		}
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, bucket(q, 50*time.Millisecond): {0, 0}})
}

// A Publisher's Send goes through the hook too, with its caller's context,
// and the caller's message is left as it was.
func TestBrokerTelemetrySeesPublisherSends(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t)
	declareTopology(t, q)
	tel := newJourneys()
	p, err := runtime.NewPublisher(runtime.Config{URLs: []string{brokerURL(t)}, Telemetry: tel}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := context.WithValue(t.Context(), journeyKey{}, "sender")
	msg := runtime.Message{RoutingKey: q.Name, Publishing: order(t, "sent")}
	if err := p.Send(ctx, msg); err != nil {
		t.Fatal(err)
	}
	if err := p.Send(ctx, runtime.Message{RoutingKey: q.Name + ".missing", Publishing: order(t, "lost")}); err == nil {
		t.Fatal("a send to no queue was confirmed")
	}
	if _, ok := msg.Headers["traceparent"]; ok {
		t.Error("the hook's header was written into the caller's message")
	}
	want := []string{`publish "" ` + q.Name + " confirmed", `publish "" ` + q.Name + ".missing returned"}
	if got := tel.of("sender"); !slices.Equal(got, want) {
		t.Errorf("calls %q, want %q", got, want)
	}
	got := drain(t, q.Name)
	if len(got) != 1 || got[0].Headers["traceparent"] != "from sender" {
		t.Errorf("the queue holds %d messages; the first's traceparent: %v", len(got), headerOf(got, "traceparent"))
	}
}

func headerOf(ds []amqp.Delivery, key string) any {
	if len(ds) == 0 {
		return nil
	}
	return ds[0].Headers[key]
}

// A delivery requeued at the shutdown before it started was prefetched and
// never handed to the application: the hook is told nothing of it, as the
// messaging conventions give such a message no span, and the report has its
// record.
func TestBrokerTelemetryIsToldNothingOfANotStartedDelivery(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, heldHandler, func(q *runtime.QueueSpec) { q.Concurrency, q.Prefetch = 1, 2 })
	declareTopology(t, q)
	tel := newJourneys()
	started := make(chan struct{})
	r := start(t, q, func(ctx context.Context, _ *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
		close(started)
		<-ctx.Done()
		return nil
	}, func(c *runtime.Config) {
		c.Telemetry = tel
		c.ShutdownGrace, c.ForceWindow = 100*time.Millisecond, 30*time.Second
	})
	publish(t, q.Name, order(t, "first"), order(t, "second"))
	<-started
	awaitTaken(t, q.Name) // both deliveries: neither is settled before the stop
	rep := r.stop()
	if rep.Counts[runtime.PathAcked] != 1 || rep.Counts[runtime.PathNotStarted] != 1 {
		t.Errorf("report: %s", rep)
	}
	if got := tel.of(""); len(got) != 0 {
		t.Errorf("the hook was told of the not-started delivery: %q", got)
	}
	if got := tel.of("first"); len(got) == 0 || got[len(got)-1] != "settled acked" {
		t.Errorf("the started delivery's calls: %q", got)
	}
	assertCounts(t, map[string][2]int{q.Name: {1, 0}})
}

// slowEnd is a Telemetry whose ends of a publish and of a settlement block,
// as span.End does under a synchronous span processor exporting to a
// collector that is away.
type slowEnd struct{ d time.Duration }

func (slowEnd) Received(ctx context.Context, _ string, _ runtime.RawDelivery) context.Context {
	return ctx
}
func (s slowEnd) Publish(context.Context, string, string, *runtime.Publishing) func(string, time.Time) {
	return func(string, time.Time) { time.Sleep(s.d) }
}
func (s slowEnd) Settle(context.Context, string) func(string, time.Time) {
	return func(string, time.Time) { time.Sleep(s.d) }
}
func (slowEnd) Settled(context.Context, runtime.Record) {}
func (slowEnd) Lost(string, string)                     {}

// Observe hears of a record before the hook's ends, which may be slow: a
// stop waits for those only until its step ends, and Observe is never
// called after Run returned (docs/runtime.md). Observe had come after the
// ends, seconds after Run returned.
func TestBrokerObserveComesBeforeSlowTelemetryEnds(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, heldHandler)
	declareTopology(t, q)
	publish(t, q.Name, order(t, "observed-before-ends"))
	handled := make(chan struct{})
	var mu sync.Mutex
	var observed []string
	r, c := prepare(t, q, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error {
		close(handled)
		return runtime.Permanent(errors.New("refused"))
	}, func(cfg *runtime.Config) {
		cfg.ShutdownGrace, cfg.ForceWindow, cfg.StepTimeout = 300*time.Millisecond, 100*time.Millisecond, 2*time.Second
		cfg.Telemetry = slowEnd{10 * time.Second}
		cfg.Observe = func(rec runtime.Record) {
			mu.Lock()
			defer mu.Unlock()
			observed = append(observed, rec.MessageID+" "+string(rec.Path))
		}
	})
	r.launch(c)
	<-handled
	rep := r.stop()
	mu.Lock()
	got := slices.Clone(observed)
	mu.Unlock()
	if want := []string{"observed-before-ends " + string(runtime.PathDeadLettered)}; !slices.Equal(got, want) {
		t.Fatalf("observed %q by the time Run returned, want %q; report %s", got, want, rep)
	}
	if n := rep.Counts[runtime.PathDeadLettered]; n != 1 {
		t.Errorf("report counts %d dead-lettered, want 1: %s", n, rep)
	}
	if ready, unacked := queueCounts(t, q.Topology.DeadLetterQueue); ready != 1 || unacked != 0 {
		t.Errorf("DLQ holds %d ready, %d unacked; want the one copy", ready, unacked)
	}
	if ready, unacked := queueCounts(t, q.Name); ready != 0 || unacked != 0 {
		t.Errorf("queue holds %d ready, %d unacked; want the original settled", ready, unacked)
	}
}

// A hook slow to end a handoff's publish is told once the original is
// settled: it cannot spend the budget the ACK needs, which would leave the
// original unresolved beside its copy in the bucket.
func TestBrokerSlowTelemetryCannotSpendTheBudget(t *testing.T) {
	t.Parallel()
	// A step that carries the first connection on a loaded machine, the
	// least budget it allows, and a hook that ends past that budget.
	const step = 2 * time.Second
	q := brokerSpec(t, hourRetry, func(q *runtime.QueueSpec) {
		q.HandlerTimeout = 100 * time.Millisecond
		q.SettlementBudget = q.HandlerTimeout + 4*step + 2*time.Second
	})
	declareTopology(t, q)
	publish(t, q.Name, order(t, "slow-span-1"))
	c := start(t, q, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error {
		return errors.New("retry me")
	}, func(cfg *runtime.Config) {
		cfg.Telemetry, cfg.StepTimeout = slowEnd{q.SettlementBudget + time.Second}, step
	})
	rec := c.await(1)[0]
	wantPath(t, rec, runtime.PathRetried)
	if rec.Handoff != "confirmed" {
		t.Errorf("record %+v", rec)
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, bucket(q, time.Hour): {1, 0}})
}

// A hook slow to end a handoff's publish is told once the journey's record
// is in the report: a stop that comes meanwhile finds the delivery settled,
// not in flight with a handoff that "had no confirm yet".
func TestBrokerSlowTelemetryEndAtTheStopLeavesTheRecord(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, heldHandler)
	declareTopology(t, q)
	publish(t, q.Name, order(t, "slow-end-1"))
	handled := make(chan struct{})
	c := start(t, q, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error {
		close(handled)
		return runtime.Permanent(errors.New("refused"))
	}, func(cfg *runtime.Config) {
		cfg.ShutdownGrace, cfg.ForceWindow = 300*time.Millisecond, 100*time.Millisecond
		cfg.Telemetry = slowEnd{3 * time.Second}
	})
	<-handled
	rep := c.stop()
	if rep.Counts[runtime.PathDeadLettered] != 1 || rep.Counts[runtime.PathUnresolved] != 0 || len(rep.Unresolved) != 0 || len(rep.PossibleCopies) != 0 {
		t.Errorf("report: %s", rep)
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, q.Topology.DeadLetterQueue: {1, 0}})
}

// publishes is journeys that also writes down each publish as it starts.
type publishes struct{ *journeys }

func (c publishes) Publish(ctx context.Context, exchange, key string, p *runtime.Publishing) func(string, time.Time) {
	c.add(ctx, "start "+key)
	return c.journeys.Publish(ctx, exchange, key, p)
}

// Every publish the hook is told of starting is ended, once: a retry
// handoff that failed (its bucket gone) and the DLQ handoff that follows it
// in the same journey, once the quorum queue's delivery limit is reached.
func TestBrokerTelemetryEndsEveryHandoffOfAJourney(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, hourRetry, func(q *runtime.QueueSpec) { q.Topology.Type, q.Topology.DeliveryLimit = "quorum", 2 })
	declareTopology(t, q)
	tel := publishes{newJourneys()}
	c := start(t, q, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error {
		return errors.New("retry me")
	}, func(cfg *runtime.Config) { cfg.Telemetry = tel })
	awaitConsumer(t, q.Name)
	if _, err := channel(t, dial(t)).QueueDelete(bucket(q, time.Hour), false, false, false); err != nil {
		t.Fatal(err)
	}
	msg := order(t, "limit-1")
	publish(t, q.Name, msg)
	wantPaths(t, c.await(3), map[runtime.Path]int{runtime.PathRequeued: 2, runtime.PathDeadLettered: 1})
	c.stop()
	retry, dlq := bucket(q, time.Hour), q.Topology.DeadLetterQueue
	received := fmt.Sprintf("received %s attempt 1 body %d", q.Name, len(msg.Body))
	returned := []string{received, "start " + retry, `publish "" ` + retry + " returned", "requeue nack sent", "settled requeued"}
	for i, want := range [][]string{returned, returned, {
		received, "start " + retry, "start " + dlq,
		`publish "" ` + retry + " returned", `publish "" ` + dlq + " confirmed", "ack ack sent", "settled dead-lettered",
	}, nil} {
		if got := tel.of(fmt.Sprint("limit-1#", i+1)); !slices.Equal(got, want) {
			t.Errorf("delivery %d's calls:\n got %q\nwant %q", i+1, got, want)
		}
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, dlq: {1, 0}})
}

// slowSettled is a Telemetry whose Settled blocks for one message until
// released, as the process span's End does under a synchronous span
// processor whose collector is away; entered, when set, is closed once it
// blocks, and returned, when set, once it has returned.
type slowSettled struct {
	slowEnd
	id                         string
	entered, release, returned chan struct{}
}

func (s slowSettled) Settled(_ context.Context, r runtime.Record) {
	if r.MessageID == s.id {
		if s.entered != nil {
			close(s.entered)
		}
		<-s.release
		if s.returned != nil {
			close(s.returned)
		}
	}
}

// A settled delivery leaves its concurrency slot before the hook's ends:
// the deliveries waiting for the slot are not held past their budgets
// behind a slow Settled (and requeued not started as the channel is
// recycled). The shutdown still waits for that Settled.
func TestBrokerSlowSettledLeavesTheSlot(t *testing.T) {
	t.Parallel()
	// Long enough for a first connection on a loaded machine; the budget is
	// the least it allows, 10.1 s, which a delivery behind the slow
	// Settled would outwait.
	const step = 2 * time.Second
	q := brokerSpec(t, func(q *runtime.QueueSpec) {
		q.Concurrency, q.Prefetch = 1, 3
		q.HandlerTimeout = 100 * time.Millisecond
		q.SettlementBudget = q.HandlerTimeout + 4*step + 2*time.Second
	})
	declareTopology(t, q)
	publish(t, q.Name, order(t, "slow-settled-1"), order(t, "next-1"), order(t, "next-2"), order(t, "next-3"))
	tel := slowSettled{id: "slow-settled-1", release: make(chan struct{}), returned: make(chan struct{})}
	c := start(t, q, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error { return nil },
		func(cfg *runtime.Config) { cfg.Telemetry, cfg.StepTimeout = tel, step })
	var released sync.Once
	t.Cleanup(func() { released.Do(func() { close(tel.release) }) }) // before the consumer's stop
	for _, rec := range c.await(4) {
		wantPath(t, rec, runtime.PathAcked)
	}
	stopped := make(chan *runtime.Report)
	go func() { stopped <- c.stop() }()
	select {
	case <-stopped:
		t.Fatal("Run returned while the hook's Settled still ran")
	case <-time.After(300 * time.Millisecond):
	}
	released.Do(func() { close(tel.release) })
	rep := <-stopped
	select {
	case <-tel.returned:
	default:
		t.Error("Run returned before the hook's Settled did")
	}
	if rep.Counts[runtime.PathAcked] != 4 || rep.Counts[runtime.PathNotStarted] != 0 {
		t.Errorf("report: %s", rep)
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}})
}

// facts is journeys that also writes down the failure queue each publish
// showed it.
type facts struct{ *journeys }

func (c facts) Publish(ctx context.Context, exchange, key string, p *runtime.Publishing) func(string, time.Time) {
	c.add(ctx, fmt.Sprintf("failure queue %v", p.Headers[envelope.HeaderFailureQueue]))
	return c.journeys.Publish(ctx, exchange, key, p)
}

// Only a handoff's copy shows the hook failure facts, by which it tells the
// copy (its destination a queue Lily picked) from a Send: a Send of a copy
// a handler received, forwarded with its headers, shows none, and its
// message still carries them.
func TestBrokerTelemetryTellsACopyFromASend(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, hourRetry)
	declareTopology(t, q)
	tel := facts{newJourneys()}
	c := start(t, q, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error {
		return errors.New("retry me")
	}, func(cfg *runtime.Config) { cfg.Telemetry = tel })
	publish(t, q.Name, order(t, "copied"))
	wantPath(t, c.await(1)[0], runtime.PathRetried)
	c.stop()
	p, err := runtime.NewPublisher(runtime.Config{URLs: []string{brokerURL(t)}, Telemetry: tel}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	forwarded := drain(t, bucket(q, time.Hour))[0]
	msg := runtime.Message{RoutingKey: q.Name, Publishing: order(t, "forwarded")}
	msg.Headers = forwarded.Headers
	if err := p.Send(context.WithValue(t.Context(), journeyKey{}, "sender"), msg); err != nil {
		t.Fatal(err)
	}
	if got := tel.of("copied"); len(got) < 2 || got[1] != "failure queue "+q.Name {
		t.Errorf("the handoff's calls: %q", got)
	}
	if got := tel.of("sender"); len(got) == 0 || got[0] != "failure queue <nil>" {
		t.Errorf("the Send's calls: %q", got)
	}
	if got := drain(t, q.Name); len(got) != 1 || got[0].Headers[envelope.HeaderFailureQueue] != q.Name {
		t.Errorf("the queue holds %d messages; the first's failure queue: %v", len(got), headerOf(got, envelope.HeaderFailureQueue))
	}
}

// clocks is a Telemetry that writes down each delivery's calls as they
// follow one another: each start with when it was called, each end, in the
// place after its start, with the instant the runtime said its answer came.
type clocks struct {
	mu       sync.Mutex
	seen     map[string][]timed // by delivery: "id#1", "id#2", …
	received map[string]int
	observed map[string]time.Time
}

type timed struct {
	what string
	at   time.Time
}

func newClocks() *clocks {
	return &clocks{seen: map[string][]timed{}, received: map[string]int{}, observed: map[string]time.Time{}}
}

// add writes what down for ctx's delivery, and returns a function that
// writes its end in the place after it.
func (c *clocks) add(ctx context.Context, what string) func(string, time.Time) {
	delivery, _ := ctx.Value(deliveryKey{}).(string)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen[delivery] = append(c.seen[delivery], timed{what, time.Now()}, timed{})
	i := len(c.seen[delivery]) - 1
	return func(evidence string, at time.Time) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.seen[delivery][i] = timed{evidence, at}
	}
}

func (c *clocks) Received(ctx context.Context, _ string, d runtime.RawDelivery) context.Context {
	c.mu.Lock()
	c.received[d.MessageID()]++
	delivery := fmt.Sprint(d.MessageID(), "#", c.received[d.MessageID()])
	c.seen[delivery] = []timed{{"received", time.Now()}}
	c.mu.Unlock()
	return context.WithValue(ctx, deliveryKey{}, delivery)
}

func (c *clocks) Publish(ctx context.Context, _, key string, _ *runtime.Publishing) func(string, time.Time) {
	return c.add(ctx, "publish "+key)
}

func (c *clocks) Settle(ctx context.Context, op string) func(string, time.Time) {
	return c.add(ctx, op)
}

func (c *clocks) Settled(ctx context.Context, _ runtime.Record) {
	delivery, _ := ctx.Value(deliveryKey{}).(string)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen[delivery] = append(c.seen[delivery], timed{"settled", time.Now()})
}

func (*clocks) Lost(string, string) {}

func (c *clocks) observe(rec runtime.Record) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.observed[rec.MessageID] = time.Now()
}

func (c *clocks) of(delivery string) []timed {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.seen[delivery])
}

// Each end is told the instant its answer came, not when it is called, once
// the record is in the report: a handoff's publish ends before the requeue's
// pause and the NACK after it, or before the DLQ's publish and the ACK; a
// settlement before Observe hears of its record.
func TestBrokerTelemetryEndsAtTheAnswer(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, hourRetry, func(q *runtime.QueueSpec) { q.Topology.Type, q.Topology.DeliveryLimit = "quorum", 2 })
	declareTopology(t, q)
	tel := newClocks()
	c := start(t, q, func(_ context.Context, msg *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
		if msg.OrderID == "fails" {
			return errors.New("retry me")
		}
		return nil
	}, func(cfg *runtime.Config) {
		cfg.Telemetry = tel
		inner := cfg.Observe
		cfg.Observe = func(rec runtime.Record) {
			tel.observe(rec)
			// A slow observer: its time is not the ACK's.
			time.Sleep(50 * time.Millisecond)
			inner(rec)
		}
	})
	awaitConsumer(t, q.Name)
	if _, err := channel(t, dial(t)).QueueDelete(bucket(q, time.Hour), false, false, false); err != nil {
		t.Fatal(err)
	}
	publish(t, q.Name, order(t, "ok"), produce(t, "fails", &fixture.OrderPlacedV1{OrderID: "fails"}))
	wantPaths(t, c.await(4), map[runtime.Path]int{runtime.PathAcked: 1, runtime.PathRequeued: 2, runtime.PathDeadLettered: 1})
	c.stop()
	retry, dlq := bucket(q, time.Hour), q.Topology.DeadLetterQueue
	for delivery, want := range map[string][]string{
		"ok#1":    {"received", "ack", "ack sent", "settled"},
		"fails#1": {"received", "publish " + retry, "returned", "requeue", "nack sent", "settled"},
		"fails#2": {"received", "publish " + retry, "returned", "requeue", "nack sent", "settled"},
		"fails#3": {"received", "publish " + retry, "returned", "publish " + dlq, "confirmed", "ack", "ack sent", "settled"},
	} {
		got := tel.of(delivery)
		var names []string
		for i, e := range got {
			names = append(names, e.what)
			if i > 0 && e.at.Before(got[i-1].at) {
				t.Errorf("%s: %q at %s, before %q at %s", delivery, e.what, e.at.Format(time.StampMicro), got[i-1].what, got[i-1].at.Format(time.StampMicro))
			}
		}
		if !slices.Equal(names, want) {
			t.Errorf("%s's calls: %q, want %q", delivery, names, want)
		}
	}
	ok := tel.of("ok#1")
	if len(ok) == 4 {
		tel.mu.Lock()
		observed := tel.observed["ok"]
		tel.mu.Unlock()
		if acked := ok[2].at; observed.Before(acked) {
			t.Errorf("the ACK's end was told %s, after Observe heard of its record at %s", acked.Format(time.StampMicro), observed.Format(time.StampMicro))
		}
	}
}
