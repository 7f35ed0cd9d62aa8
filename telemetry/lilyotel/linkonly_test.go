package lilyotel_test

import (
	"context"
	"testing"
	"time"

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
	foreign := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled, Remote: true})
	spec := harnessSpec("q")
	spec.Messages = []envelope.Message{{Type: "t", Inbox: envelope.InboxOptional}}
	routes := runtime.Routes{{Type: "t", Version: 1, ContentType: "application/json"}: func(context.Context, runtime.RawDelivery) error { return nil }}
	p := runtime.NewPublishing(envelope.Message{Type: "t"}, 1, "m-1", []byte(`{}`))
	p.Headers["traceparent"] = "00-" + foreign.TraceID().String() + "-" + foreign.SpanID().String() + "-01"
	d, err := lilytest.RawDelivery(spec, routes, p)
	if err != nil {
		t.Fatal(err)
	}
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
