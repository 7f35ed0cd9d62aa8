package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/internal/frame"
	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/runtime/internal/fixture"
	amqp "github.com/rabbitmq/amqp091-go"
)

// faulty is a Telemetry that does everything a hook must not: it returns a
// context not derived from the one it got, rewrites Lily's headers on a
// copy, returns no done, and panics.
type faulty struct{}

func (faulty) Received(context.Context, string, runtime.RawDelivery) context.Context {
	return context.WithValue(context.Background(), journeyKey{}, "detached")
}

func (faulty) Publish(_ context.Context, _, _ string, p *runtime.Publishing) func(string, time.Time) {
	p.Headers["x-lily-attempt"] = int32(99)
	p.Headers["x-lily-forged"] = "forged"
	p.Headers["tenant"] = "kept"
	return nil
}

func (faulty) Settle(context.Context, string) func(string, time.Time) { panic("settle") }
func (faulty) Settled(context.Context, runtime.Record)                { panic("settled") }
func (faulty) Lost(string, string)                                    { panic("lost") }

// A faulty hook changes nothing of a settlement: each delivery ends as it
// would without it, the copy carries Lily's own headers, and each panic is
// logged.
func TestBrokerFaultyTelemetryCannotChangeASettlement(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, hourRetry)
	declareTopology(t, q)
	r := start(t, q, func(ctx context.Context, msg *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
		if ctx.Value(journeyKey{}) != "detached" {
			return runtime.Permanent(errors.New("the journey's values did not reach the handler"))
		}
		if msg.OrderID == "fails" {
			return errors.New("retry me")
		}
		return nil
	}, func(c *runtime.Config) { c.Telemetry = faulty{} })
	publish(t, q.Name, order(t, "ok"), produce(t, "fails", &fixture.OrderPlacedV1{OrderID: "fails"}))
	recs := r.await(2)
	rep := r.stop()
	paths := map[string]runtime.Path{}
	for _, rec := range recs {
		paths[rec.MessageID] = rec.Path
	}
	if paths["ok"] != runtime.PathAcked || paths["fails"] != runtime.PathRetried || len(rep.Unresolved) != 0 {
		t.Errorf("paths %v; report %s", paths, rep)
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, bucket(q, time.Hour): {1, 0}, q.Topology.DeadLetterQueue: {0, 0}})
	copies := drain(t, bucket(q, time.Hour))
	if len(copies) != 1 {
		t.Fatalf("%d copies in the bucket", len(copies))
	}
	h := copies[0].Headers
	if fmt.Sprint(h["x-lily-attempt"]) != "2" || h["x-lily-forged"] != nil || h["tenant"] != "kept" {
		t.Errorf("the copy's headers: attempt %v, forged %v, tenant %v; want 2, none, kept", h["x-lily-attempt"], h["x-lily-forged"], h["tenant"])
	}
	var panicked []string
	for _, ev := range r.events.all() {
		if ev.method != "" && ev.level == slog.LevelError {
			panicked = append(panicked, ev.method)
		}
	}
	// Settle and Settled for each of the two deliveries.
	slices.Sort(panicked)
	if want := []string{"Settle", "Settle", "Settled", "Settled"}; !slices.Equal(panicked, want) {
		t.Errorf("logged panics of %q, want %q", panicked, want)
	}
}

// The force reaches a handler whose journey's context the hook built from
// nothing: the runtime keeps its own cancellation.
func TestBrokerForceReachesAHandlerWhateverReceivedReturned(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, heldHandler)
	declareTopology(t, q)
	publish(t, q.Name, order(t, "slow"))
	started := make(chan struct{})
	r := start(t, q, func(ctx context.Context, _ *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
		close(started)
		<-ctx.Done()
		return fmt.Errorf("stopped: %w", context.Cause(ctx))
	}, func(cfg *runtime.Config) {
		cfg.Telemetry = faulty{}
		cfg.ShutdownGrace, cfg.ForceWindow = 100*time.Millisecond, 30*time.Second
	})
	<-started
	rep := r.stop()
	recs := r.recorded()
	if len(recs) != 1 || recs[0].Handler != "cancelled" || rep.Abandoned != 0 {
		t.Fatalf("records %+v; report %s", recs, rep)
	}
	// Cancelled by the force, it costs no retry: it is back in its queue.
	assertCounts(t, map[string][2]int{q.Name: {1, 0}})
}

// hollow is a faulty hook whose Received returns a context that embeds
// none: every value lookup in it panics.
type hollow struct{ faulty }

type hollowCtx struct{ context.Context }

func (hollow) Received(context.Context, string, runtime.RawDelivery) context.Context {
	return hollowCtx{}
}

// A context from Received whose values cannot be read is ignored, and
// logged: built on it, the handler's context would panic on the delivery's
// goroutine, where nothing recovers, and end the process.
func TestBrokerUnreadableTelemetryContextIsIgnored(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t)
	declareTopology(t, q)
	r := start(t, q, ack, func(c *runtime.Config) { c.Telemetry = hollow{} })
	publish(t, q.Name, order(t, "hollow-1"))
	if rec := r.await(1)[0]; rec.Path != runtime.PathAcked || rec.Handler != "ok" {
		t.Errorf("record %+v", rec)
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, q.Topology.DeadLetterQueue: {0, 0}})
	r.stop()
	if !r.events.has(func(ev event) bool {
		return ev.method == "Received" && ev.level == slog.LevelError && strings.Contains(ev.detail, "values cannot be read")
	}) {
		t.Error("the unreadable context was not logged")
	}
}

// clobber is a faulty hook whose Publish drops every header and forges a
// CloudEvent's type and time.
type clobber struct{ faulty }

func (clobber) Received(ctx context.Context, _ string, _ runtime.RawDelivery) context.Context {
	return ctx
}

func (clobber) Publish(_ context.Context, _, _ string, p *runtime.Publishing) func(string, time.Time) {
	p.Headers = amqp.Table{"cloudEvents_type": "com.acme.forged.v9", "cloudEvents_time": "yesterday", "tenant": "added"}
	return nil
}

// A hook cannot change the headers a handoff copy's envelope is read by: a
// CloudEvent's retry copy keeps its attributes, whatever the hook wrote, and
// its next attempt is read as the same event and handled.
func TestBrokerTelemetryCannotChangeACopysEnvelope(t *testing.T) {
	t.Parallel()
	q := foreignSpec(t)
	declareTopology(t, q)
	publish(t, q.Name, binaryEvent("evt-r", `{"payment_id":"retry-binary","amount_cents":7}`, 2))
	h := &foreignHandler{seen: map[string][]seen{}}
	r, c := prepareRoutes(t, q, fixture.LilytestForeignRoutes(h), func(cfg *runtime.Config) { cfg.Telemetry = clobber{} })
	r.launch(c)
	recs := byAttempt(r.await(2))
	wantPath(t, recs[0], runtime.PathRetried)
	wantPath(t, recs[1], runtime.PathAcked)
	if recs[1].Attempt != 2 || recs[1].Type != "com.acme.payment.authorized" || recs[1].Version != 2 {
		t.Errorf("the retry copy's record %+v", recs[1])
	}
	h.mu.Lock()
	got := h.seen["retry-binary"]
	h.mu.Unlock()
	if len(got) != 2 || got[1].id != "evt-r" || got[1].attempt != 2 {
		t.Errorf("the handler saw %+v", got)
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, q.Topology.DeadLetterQueue: {0, 0}})
	r.stop()
}

// unencodable is a faulty hook whose Publish writes header under name.
type unencodable struct {
	faulty
	name  string
	value any
}

func (u unencodable) Publish(_ context.Context, _, _ string, p *runtime.Publishing) func(string, time.Time) {
	p.Headers[u.name] = u.value
	return nil
}

// brimming is a Telemetry whose Publish fills the copy's headers to room
// bytes short of a frame: within it alone, past it with the publish id.
type brimming struct {
	faulty
	name string
	room int
}

func (b brimming) Publish(_ context.Context, _, _ string, p *runtime.Publishing) func(string, time.Time) {
	p.Headers[b.name] = ""
	n := frame.Size - frame.Overhead - frame.ContentHeader(*p) - b.room
	p.Headers[b.name] = strings.Repeat("b", max(n, 0))
	return nil
}

// A header the hook wrote that AMQP cannot carry (a type it has no word for),
// that the broker would refuse (a NaN, a name over 255 bytes), or that makes
// the headers too large for a frame, with the publish id or without, is
// dropped, and the handoff goes on as without the hook, rather than failing
// every time.
func TestBrokerTelemetryHeaderAMQPCannotCarryIsDropped(t *testing.T) {
	t.Parallel()
	for _, hook := range []runtime.Telemetry{
		unencodable{name: "tenant", value: []string{"not", "an", "AMQP", "value"}},
		unencodable{name: "tenant", value: math.NaN()},
		unencodable{name: strings.Repeat("k", 300), value: "v"},
		unencodable{name: "tenant", value: strings.Repeat("b", 140_000)},
		brimming{name: "tenant", room: 10},
	} {
		name := "tenant"
		if u, ok := hook.(unencodable); ok {
			name = u.name
		}
		t.Run(fmt.Sprintf("%.60v", hook), func(t *testing.T) {
			t.Parallel()
			q := brokerSpec(t, hourRetry)
			declareTopology(t, q)
			r := start(t, q, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error {
				return errors.New("retry me")
			}, func(c *runtime.Config) { c.Telemetry = hook })
			publish(t, q.Name, order(t, "fails"))
			if recs := r.await(1); recs[0].Path != runtime.PathRetried {
				t.Errorf("records %+v", recs)
			}
			r.stop()
			assertCounts(t, map[string][2]int{q.Name: {0, 0}, bucket(q, time.Hour): {1, 0}})
			copies := drain(t, bucket(q, time.Hour))
			if len(copies) != 1 || copies[0].Headers[name] != nil || fmt.Sprint(copies[0].Headers["x-lily-attempt"]) != "2" {
				t.Errorf("copies %d; the first's header %.40v", len(copies), headerOf(copies, name))
			}
		})
	}
}

// A Send whose caller wrote headers AMQP cannot carry (a type it has no
// word for, more than a frame) fails on its own: the hook, whose header was
// sound, is not blamed for them.
func TestBrokerTelemetryIsNotBlamedForTheCallersHeaders(t *testing.T) {
	t.Parallel()
	exchange, _, _ := publishTopology(t)
	var events eventLog
	p := newPublisher(t, brokerURL(t), 4, func(c *runtime.Config) { c.Telemetry, c.Logger = newJourneys(), slog.New(&events) })
	for _, h := range []amqp.Table{{"x-tags": []string{"a", "b"}}, {"tenant": strings.Repeat("b", 140_000)}} {
		m := message(t, exchange, "ok.1", "theirs")
		m.Headers = h
		if err := p.Send(context.Background(), m); err == nil || errors.Is(err, runtime.ErrUnconfirmed) {
			t.Errorf("a send with headers %.40v: %v, want not sent", h, err)
		}
	}
	if events.has(func(ev event) bool { return ev.method == "Publish" }) {
		t.Errorf("the hook was blamed: %+v", events.all())
	}
}

// b3 is a Telemetry that writes, beside its trace context, a header of
// another propagator's (B3's single header), as a composite propagator does.
type b3 struct{ *journeys }

func (b b3) Publish(ctx context.Context, exchange, key string, p *runtime.Publishing) func(string, time.Time) {
	p.Headers["b3"] = "80f198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1-1"
	return b.journeys.Publish(ctx, exchange, key, p)
}

// A header the hook adds to the copy of a message at the producer's bound
// of 64 headers would make the copy poison at its next attempt: the hook's
// headers are dropped, once and logged, and the retry is handled.
func TestBrokerTelemetryHeaderBeyondTheGuardsLimitsIsDropped(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t)
	declareTopology(t, q)
	r := start(t, q, func(_ context.Context, _ *fixture.OrderPlacedV1, d runtime.RawDelivery) error {
		if d.Attempt() == 1 {
			return errors.New("retry me")
		}
		return nil
	}, func(c *runtime.Config) { c.Telemetry = b3{newJourneys()} })
	m := order(t, "full")
	for i := 0; len(m.Headers) < envelope.MaxHeaders; i++ {
		m.Headers[fmt.Sprint("h", i)] = int64(i)
	}
	publish(t, q.Name, m)
	recs := byAttempt(r.await(2))
	wantPath(t, recs[0], runtime.PathRetried)
	wantPath(t, recs[1], runtime.PathAcked)
	if recs[1].Attempt != 2 || recs[1].Rejection != "" {
		t.Errorf("the retry copy's record %+v", recs[1])
	}
	r.stop()
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, q.Topology.DeadLetterQueue: {0, 0}})
	var dropped int
	for _, ev := range r.events.all() {
		if ev.method == "Publish" && ev.level == slog.LevelError && strings.Contains(ev.detail, "too many headers") {
			dropped++
		}
	}
	if dropped != 1 {
		t.Errorf("the hook's headers dropped and logged %d times, want once", dropped)
	}
}

// headless is a Telemetry whose Publish drops the publishing's headers.
type headless struct{ faulty }

func (headless) Publish(_ context.Context, _, _ string, p *runtime.Publishing) func(string, time.Time) {
	p.Headers = nil
	return nil
}

// A hook that drops the headers of a Send that had none does not fail it:
// the publish id still has a table to go in.
func TestBrokerTelemetryDroppingHeadersLeavesTheSend(t *testing.T) {
	t.Parallel()
	exchange, ok, _ := publishTopology(t)
	p := newPublisher(t, brokerURL(t), 4, func(c *runtime.Config) { c.Telemetry = headless{} })
	m := message(t, exchange, "ok.1", "headless")
	m.Headers = nil
	if err := p.Send(context.Background(), m); err != nil {
		t.Fatalf("send: %v", err)
	}
	if got := ids(t, ok); fmt.Sprint(got) != "map[headless:1]" {
		t.Errorf("the queue holds %v", got)
	}
}

// heldEnds is a Telemetry whose send ends wait until release is closed: a
// span exported synchronously to a collector that is away.
type heldEnds struct {
	*journeys
	release  chan struct{}
	started  chan string // each Publish's routing key
	finished chan string // each done's evidence, once released
}

func (h heldEnds) Publish(_ context.Context, _, key string, _ *runtime.Publishing) func(string, time.Time) {
	h.started <- key
	return func(evidence string, _ time.Time) {
		<-h.release
		h.finished <- evidence
	}
}

// heldEndsPublisher declares a queue of t's own and returns it, with a
// Publisher of window 1 logging to events whose Telemetry is tel, and
// release, which lets tel's ends return (run when t ends too). The answer
// comes a step after the confirm: a step short beside the 30 s the tests
// wait for it, and long enough for the first Send's dial and confirm on a
// loaded machine.
func heldEndsPublisher(t *testing.T, events *eventLog) (q runtime.QueueSpec, tel heldEnds, release func(), p *runtime.Publisher) {
	t.Helper()
	q = brokerSpec(t)
	declareTopology(t, q)
	tel = heldEnds{journeys: newJourneys(), release: make(chan struct{}), started: make(chan string, 3), finished: make(chan string, 3)}
	release = sync.OnceFunc(func() { close(tel.release) })
	p = newPublisher(t, brokerURL(t), 1, func(c *runtime.Config) {
		c.Telemetry, c.Logger, c.StepTimeout = tel, slog.New(events), 5*time.Second
	})
	t.Cleanup(release)
	return q, tel, release, p
}

// A Send's slow telemetry end does not hold its answer: Send returns the
// confirm within a step and leaves the end running, logged. With the
// window's worth of ends still running, the next Send waits for one before
// it publishes, and a ctx that ends first leaves nothing published and the
// hook untold. Once the end returns, its place serves the next Send.
func TestBrokerSlowSendEndLeavesTheAnswer(t *testing.T) {
	t.Parallel()
	var events eventLog
	q, tel, release, p := heldEndsPublisher(t, &events)

	answer := make(chan error, 1)
	go func() {
		answer <- p.Send(t.Context(), runtime.Message{RoutingKey: q.Name, Publishing: order(t, "first")})
	}()
	select {
	case err := <-answer:
		if err != nil {
			t.Fatalf("the first send: %v, want confirmed", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the first send waited for its telemetry end")
	}
	if !events.has(func(ev event) bool {
		return ev.stage == "telemetry" && ev.method == "Publish" && strings.Contains(ev.detail, "left it running")
	}) {
		t.Errorf("the slow end was not logged: %+v", events.all())
	}
	assertCounts(t, map[string][2]int{q.Name: {1, 0}})

	// The window (1) is taken by the end still running.
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	err := p.Send(ctx, runtime.Message{RoutingKey: q.Name, Publishing: order(t, "second")})
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, runtime.ErrUnconfirmed) {
		t.Errorf("the send behind the ends: %v, want not sent at its deadline", err)
	}
	assertCounts(t, map[string][2]int{q.Name: {1, 0}})

	release()
	if got := <-tel.finished; got != "confirmed" {
		t.Errorf("the first send's end was told %q, want confirmed", got)
	}
	if err := p.Send(t.Context(), runtime.Message{RoutingKey: q.Name, Publishing: order(t, "third")}); err != nil {
		t.Fatalf("the send after the end returned: %v", err)
	}
	if got := <-tel.finished; got != "confirmed" {
		t.Errorf("the third send's end was told %q, want confirmed", got)
	}
	close(tel.started)
	var keys []string
	for k := range tel.started {
		keys = append(keys, k)
	}
	if len(keys) != 2 {
		t.Errorf("the hook was told of %d sends, want 2 (not of the one that waited)", len(keys))
	}
	if got := ids(t, q.Name); !maps.Equal(got, map[string]int{"first": 1, "third": 1}) {
		t.Errorf("the queue holds %v, want first and third once each", got)
	}
}

// A Send waiting for a place among the telemetry hook's ends fails at
// Close, as a Send waiting for a publish slot does, rather than wait for
// its ctx: nothing published, the hook untold.
func TestBrokerSendBehindTheEndsFailsAtClose(t *testing.T) {
	t.Parallel()
	var events eventLog
	q, tel, _, p := heldEndsPublisher(t, &events)
	if err := p.Send(t.Context(), runtime.Message{RoutingKey: q.Name, Publishing: order(t, "first")}); err != nil {
		t.Fatalf("the first send: %v, want confirmed", err)
	}

	// The window (1) is taken by the first end, still running; Close may
	// come before the second Send waits or while it does: either way it
	// fails.
	second := make(chan error, 1)
	go func() {
		second <- p.Send(t.Context(), runtime.Message{RoutingKey: q.Name, Publishing: order(t, "second")})
	}()
	p.Close()
	select {
	case err := <-second:
		if err == nil || !strings.Contains(err.Error(), "the publisher has closed") || errors.Is(err, runtime.ErrUnconfirmed) {
			t.Errorf("the send behind the ends: %v, want not sent, the publisher closed", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the send behind the ends still waits after Close")
	}
	if n := len(tel.started); n != 1 {
		t.Errorf("the hook was told of %d sends, want 1 (not of the one that waited)", n)
	}
	assertCounts(t, map[string][2]int{q.Name: {1, 0}})
}
