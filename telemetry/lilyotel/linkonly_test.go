package lilyotel_test

import (
	"context"
	"maps"
	"testing"
	"time"

	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/runtime/lilytest"
	"github.com/lily-mq/lily/telemetry/lilyotel"
)

// With LinkOnly, a delivery's creation context is linked, never the
// process span's parent: a producer does not choose the consumer's trace,
// nor, through a parent-based sampler, whether its spans are sampled.
// Without it, the creation context is both.
func TestLinkOnlyStartsARootThatLinks(t *testing.T) {
	d, _ := fromAForeignTrace(t, nil)
	for _, linkOnly := range []bool{false, true} {
		spans := tracetest.NewSpanRecorder()
		tel, err := lilyotel.New(lilyotel.Options{TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)), LinkOnly: linkOnly})
		if err != nil {
			t.Fatal(err)
		}
		ctx := tel.Received(context.Background(), "q", d)
		span := trace.SpanFromContext(ctx).(sdktrace.ReadOnlySpan)
		parent, links := span.Parent(), span.Links()
		if len(links) != 1 || !links[0].SpanContext.Equal(foreign) {
			t.Errorf("LinkOnly %t: links %v, want the creation context", linkOnly, links)
		}
		if got := parent.Equal(foreign); got == linkOnly || (linkOnly && parent.IsValid()) {
			t.Errorf("LinkOnly %t: parent %v, trace %v", linkOnly, parent, span.SpanContext().TraceID())
		}
	}
}

// A copy's trace context is written whole: a tracestate the message came
// with belongs to the producer's trace, and does not travel beside the
// traceparent of another.
func TestPublishWritesTheWholeTraceContext(t *testing.T) {
	tel, err := lilyotel.New(lilyotel.Options{TracerProvider: sdktrace.NewTracerProvider()})
	if err != nil {
		t.Fatal(err)
	}
	p := runtime.NewPublishing(envelope.Message{Type: "t"}, 1, "m-1", []byte(`{}`))
	// Not a creation context the conventions keep: upper-case hex.
	p.Headers["traceparent"] = "00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01"
	p.Headers["tracestate"] = "evil=injected"
	tel.Publish(context.Background(), "", "q.dlq", &p)("confirmed", time.Now())
	if tp, _ := p.Headers["traceparent"].(string); tp == "00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01" || p.Headers["tracestate"] != nil {
		t.Errorf("headers %v: want a traceparent of the send span's and no tracestate", p.Headers)
	}
}

// With LinkOnly, a producer chooses no baggage either: the handler's
// context carries the consumer's own, and so do a Send from it and a copy
// of the delivery. Without it, the delivery's baggage is the journey's.
func TestLinkOnlyKeepsTheProducersBaggageOut(t *testing.T) {
	d, p := fromAForeignTrace(t, map[string]any{"baggage": "tenant=admin,role=superuser"})
	own, err := baggage.Parse("tenant=shop")
	if err != nil {
		t.Fatal(err)
	}
	ambient := baggage.ContextWithBaggage(context.Background(), own)
	prop := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	for _, linkOnly := range []bool{false, true} {
		tel, err := lilyotel.New(lilyotel.Options{TracerProvider: sdktrace.NewTracerProvider(), Propagator: prop, LinkOnly: linkOnly})
		if err != nil {
			t.Fatal(err)
		}
		want := "tenant=admin,role=superuser"
		if linkOnly {
			want = "tenant=shop"
		}
		ctx := tel.Received(ambient, "q", d)
		if links := trace.SpanFromContext(ctx).(sdktrace.ReadOnlySpan).Links(); len(links) != 1 || !links[0].SpanContext.Equal(foreign) {
			t.Errorf("LinkOnly %t: links %v, want the creation context", linkOnly, links)
		}
		if got := baggage.FromContext(ctx); !sameBaggage(got.String(), want) {
			t.Errorf("LinkOnly %t: the handler's baggage is %q, want %q", linkOnly, got, want)
		}
		send := runtime.NewPublishing(envelope.Message{Type: "t"}, 1, "m-2", []byte(`{}`))
		tel.Publish(ctx, "", "elsewhere", &send)("confirmed", time.Now())
		copied := runtime.NewPublishing(envelope.Message{Type: "t"}, 1, "m-1", []byte(`{}`))
		for k, v := range p.Headers {
			copied.Headers[k] = v
		}
		copied.Headers[envelope.HeaderFailureQueue] = "q"
		tel.Publish(ctx, "", "q.dlq", &copied)("confirmed", time.Now())
		for what, h := range map[string]any{"a Send": send.Headers["baggage"], "a DLQ copy": copied.Headers["baggage"]} {
			if got, _ := h.(string); !sameBaggage(got, want) {
				t.Errorf("LinkOnly %t: %s carries baggage %v, want %q", linkOnly, what, h, want)
			}
		}
	}
}

// sameBaggage tells whether two baggage headers hold the same members, in
// whatever order.
func sameBaggage(a, b string) bool {
	x, errA := baggage.Parse(a)
	y, errB := baggage.Parse(b)
	if errA != nil || errB != nil || x.Len() != y.Len() {
		return false
	}
	for _, m := range x.Members() {
		if y.Member(m.Key()).Value() != m.Value() {
			return false
		}
	}
	return true
}

// The propagator's fields are its own: a Send's baggage is its context's,
// and a baggage header the message came with, which could be a forwarded
// delivery's, is not kept beside it.
func TestPublishWritesBaggageFromTheContext(t *testing.T) {
	tel, err := lilyotel.New(lilyotel.Options{TracerProvider: sdktrace.NewTracerProvider(),
		Propagator: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})})
	if err != nil {
		t.Fatal(err)
	}
	own, err := baggage.Parse("tenant=shop")
	if err != nil {
		t.Fatal(err)
	}
	for ctx, want := range map[context.Context]any{
		context.Background(): nil,
		baggage.ContextWithBaggage(context.Background(), own): "tenant=shop",
	} {
		p := runtime.NewPublishing(envelope.Message{Type: "t"}, 1, "m-1", []byte(`{}`))
		p.Headers["baggage"] = "tenant=admin"
		tel.Publish(ctx, "", "q", &p)("confirmed", time.Now())
		if got := p.Headers["baggage"]; got != want {
			t.Errorf("context's baggage %q: the message carries baggage %v, want %v", baggage.FromContext(ctx), got, want)
		}
	}
}

// foreign is the creation context a producer of another trace sends.
var foreign = trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled, Remote: true})

// fromAForeignTrace is a delivery whose traceparent is foreign's, with
// headers besides it, and the publishing it was read from.
func fromAForeignTrace(t *testing.T, headers map[string]any) (runtime.RawDelivery, runtime.Publishing) {
	t.Helper()
	spec := harnessSpec("q")
	spec.Messages = []envelope.Message{{Type: "t", Inbox: envelope.InboxOptional}}
	routes := runtime.Routes{{Type: "t", Version: 1, ContentType: "application/json"}: func(context.Context, runtime.RawDelivery) error { return nil }}
	p := runtime.NewPublishing(envelope.Message{Type: "t"}, 1, "m-1", []byte(`{}`))
	p.Headers["traceparent"] = "00-" + foreign.TraceID().String() + "-" + foreign.SpanID().String() + "-01"
	maps.Copy(p.Headers, headers)
	d, err := lilytest.RawDelivery(spec, routes, p)
	if err != nil {
		t.Fatal(err)
	}
	return d, p
}
