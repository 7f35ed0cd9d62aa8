package lilyotel_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

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

// fieldsPanic is a propagator whose Fields panics, before lilyotel has
// changed anything.
type fieldsPanic struct{ propagation.TraceContext }

func (fieldsPanic) Fields() []string { panic("fields") }

// injectPanicsWith is a propagator whose Inject panics with v.
type injectPanicsWith struct {
	propagation.TraceContext
	v any
}

func (p injectPanicsWith) Inject(context.Context, propagation.TextMapCarrier) { panic(p.v) }

// A propagator that panics as lilyotel writes a handoff's trace context ends
// the copy's send span at once, as failed, before its panic goes on: the
// runtime drops a Publish that panicked, done and all, and the span would
// never end. The copy goes all the same, but what the broker said of it
// lilyotel is not told: the send is in none of the send's counts. The
// journey's are.
func TestAPanickingPropagatorLeavesNoSpanOpen(t *testing.T) {
	spans, reader := tracetest.NewSpanRecorder(), metric.NewManualReader()
	tel, err := lilyotel.New(lilyotel.Options{
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)),
		MeterProvider:  metric.NewMeterProvider(metric.WithReader(reader)),
		Propagator:     injectPanics{},
	})
	if err != nil {
		t.Fatal(err)
	}
	h := harness(t, harnessSpec("rv-otel-inject-open"), tel, func(_ context.Context, d runtime.RawDelivery) error {
		if strings.Contains(string(d.Body()), "refuse") {
			return runtime.Permanent(errors.New("refused"))
		}
		return runtime.Retryable(errors.New("again"))
	})
	paths := []runtime.Path{h.Deliver(message("m-retry", "fail")).Path, h.Deliver(message("m-dlq", "refuse")).Path}
	if want := []runtime.Path{runtime.PathRetried, runtime.PathDeadLettered}; !slices.Equal(paths, want) {
		t.Fatalf("paths %q, want %q", paths, want)
	}
	ended := spans.Ended()
	if open := len(spans.Started()) - len(ended); open != 0 {
		t.Errorf("%d of %d spans left open; ended:\n%s", open, len(spans.Started()), describe(ended))
	}
	sends := where(ended, "messaging.operation.type", "send")
	if len(sends) != 2 {
		t.Fatalf("%d send spans ended, want 2:\n%s", len(sends), describe(ended))
	}
	for _, s := range sends {
		if got := attrs(s)["error.type"]; got != "_OTHER" {
			t.Errorf("%s: error.type %v, want _OTHER", s.Name(), got)
		}
		if st := s.Status(); st.Code != codes.Error || st.Description != "propagator panicked: inject" {
			t.Errorf("%s: status %v %q, want Error %q", s.Name(), st.Code, st.Description, "propagator panicked: inject")
		}
	}
	// The journeys tell of their handoffs still.
	if n := len(where(ended, "lily.handoff", "confirmed")); n != 2 {
		t.Errorf("%d process spans with lily.handoff=confirmed, want 2:\n%s", n, describe(ended))
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	send := attribute.String("messaging.operation.type", "send")
	for _, c := range []struct {
		what      string
		got, want int64
	}{
		{"lily.handoffs", sum(rm, "lily.handoffs"), 0},
		{"lily.handoff.duration values", int64(count(rm, "lily.handoff.duration")), 0},
		{"messaging.client.sent.messages", sum(rm, "messaging.client.sent.messages"), 0},
		{"messaging.client.operation.duration values (send)", int64(count(rm, "messaging.client.operation.duration", send)), 0},
		{"lily.deliveries (retried)", sum(rm, "lily.deliveries", attribute.String("lily.path", "retried")), 1},
		{"lily.deliveries (dead-lettered)", sum(rm, "lily.deliveries", attribute.String("lily.path", "dead-lettered")), 1},
	} {
		if c.got != c.want {
			t.Errorf("%s: %d, want %d", c.what, c.got, c.want)
		}
	}
}

// A Publish whose propagator panics (a Send's, here: no journey) panics on
// with the propagator's value, its send span ended first, failed, the panic
// in its status bounded and escaped.
func TestAPanickingPropagatorPanicsOnWithItsSpanEnded(t *testing.T) {
	long := "\x1b[31m" + strings.Repeat("x", 10_000)
	for _, c := range []struct {
		name string
		prop propagation.TextMapPropagator
		v    any
	}{
		{"fields", fieldsPanic{}, "fields"},
		{"inject", injectPanicsWith{v: long}, long},
	} {
		t.Run(c.name, func(t *testing.T) {
			spans := tracetest.NewSpanRecorder()
			tel, err := lilyotel.New(lilyotel.Options{TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)), Propagator: c.prop})
			if err != nil {
				t.Fatal(err)
			}
			p := runtime.Publishing{Headers: amqp.Table{}}
			var got any
			func() {
				defer func() { got = recover() }()
				tel.Publish(context.Background(), "orders", "eu.created", &p)
				t.Error("Publish returned")
			}()
			if got != c.v {
				t.Errorf("Publish panicked with %.40q, want %.40q", got, c.v)
			}
			s := one(t, "send", spans.Ended())
			if open := len(spans.Started()) - len(spans.Ended()); open != 0 {
				t.Errorf("%d spans left open", open)
			}
			st := s.Status()
			if st.Code != codes.Error || !strings.HasPrefix(st.Description, "propagator panicked: ") {
				t.Errorf("status %v %.60q, want Error, propagator panicked: …", st.Code, st.Description)
			}
			if len(st.Description) > 300 || strings.ContainsRune(st.Description, '\x1b') {
				t.Errorf("status description %d bytes, escape %t: not bounded and escaped: %.60q", len(st.Description), strings.ContainsRune(st.Description, '\x1b'), st.Description)
			}
			if got := attrs(s)["error.type"]; got != "_OTHER" {
				t.Errorf("error.type %v, want _OTHER", got)
			}
		})
	}
}
