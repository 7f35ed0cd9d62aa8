package lilyotel_test

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/telemetry/lilyotel"
)

// injectPanics is a propagator whose Inject panics, once lilyotel has
// removed the fields it writes from the message's headers.
type injectPanics struct{ propagation.TraceContext }

func (injectPanics) Inject(context.Context, propagation.TextMapCarrier) { panic("inject") }

// A propagator that panics in Inject leaves a retry copy with the trace
// context it had: the runtime drops the whole of a Publish that panicked,
// the fields lilyotel removed before it too.
func TestAPanickingInjectLeavesTheCopysTraceContext(t *testing.T) {
	tel, err := lilyotel.New(lilyotel.Options{TracerProvider: sdktrace.NewTracerProvider(), Propagator: injectPanics{}})
	if err != nil {
		t.Fatal(err)
	}
	h := harness(t, harnessSpec("rv-otel-inject"), tel, func(context.Context, runtime.RawDelivery) error {
		return runtime.Retryable(errors.New("again"))
	})
	const traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	m := message("m-1", "ok")
	m.Headers["traceparent"] = traceparent
	m.Headers["tracestate"] = "vendor=kept"
	res := h.Deliver(m)
	if res.Path != runtime.PathRetried || res.Copy == nil {
		t.Fatalf("path %s, copy %v; want retried with a copy", res.Path, res.Copy)
	}
	if got := res.Copy.Headers; got["traceparent"] != traceparent || got["tracestate"] != "vendor=kept" {
		t.Errorf("the copy's trace context: traceparent %v, tracestate %v; want %s, vendor=kept", got["traceparent"], got["tracestate"], traceparent)
	}
}
