package lilyotel_test

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/telemetry/lilyotel"
)

// panicsAtEnd is a span processor that panics at the end of each span
// whose name begins with prefix: a synchronous exporter (WithSyncer) that
// panics.
type panicsAtEnd struct{ prefix string }

func (panicsAtEnd) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (p panicsAtEnd) OnEnd(s sdktrace.ReadOnlySpan) {
	if strings.HasPrefix(s.Name(), p.prefix) {
		panic("exporter exploded")
	}
}
func (panicsAtEnd) Shutdown(context.Context) error   { return nil }
func (panicsAtEnd) ForceFlush(context.Context) error { return nil }

// An exporter that panics as a process span ends costs the span, not the
// journey's measurements: they are recorded before the span ends.
func TestAPanickingExporterKeepsTheProcessMeasurements(t *testing.T) {
	reader := metric.NewManualReader()
	tel, err := lilyotel.New(lilyotel.Options{
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(panicsAtEnd{"process "})),
		MeterProvider:  metric.NewMeterProvider(metric.WithReader(reader)),
	})
	if err != nil {
		t.Fatal(err)
	}
	h := harness(t, harnessSpec("rv-otel-exporter"), tel, handled)
	if res := h.Deliver(message("m-1", "ok")); res.Path != runtime.PathAcked {
		t.Fatalf("path %s, want acked", res.Path)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	consumed, processed := sum(rm, "messaging.client.consumed.messages"), count(rm, "messaging.process.duration")
	if consumed != 1 || processed != 1 {
		t.Errorf("messaging.client.consumed.messages %d, messaging.process.duration %d values; want 1 and 1", consumed, processed)
	}
}

// panicsAtStart is a span processor that panics at the start of each span
// whose name begins with prefix.
type panicsAtStart struct{ prefix string }

func (p panicsAtStart) OnStart(_ context.Context, s sdktrace.ReadWriteSpan) {
	if strings.HasPrefix(s.Name(), p.prefix) {
		panic("OnStart exploded")
	}
}
func (panicsAtStart) OnEnd(sdktrace.ReadOnlySpan)      {}
func (panicsAtStart) Shutdown(context.Context) error   { return nil }
func (panicsAtStart) ForceFlush(context.Context) error { return nil }

// A settle span with no journey (Received panicked) knows neither its
// destination nor its queue: it leaves them out, and so does its
// measurement, rather than carry them empty.
func TestASettleWithoutAJourneyCarriesNoEmptyNames(t *testing.T) {
	spans, reader := tracetest.NewSpanRecorder(), metric.NewManualReader()
	tel, err := lilyotel.New(lilyotel.Options{
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(panicsAtStart{"process "}), sdktrace.WithSpanProcessor(spans)),
		MeterProvider:  metric.NewMeterProvider(metric.WithReader(reader)),
	})
	if err != nil {
		t.Fatal(err)
	}
	h := harness(t, harnessSpec("rv-otel-journeyless"), tel, handled)
	if res := h.Deliver(message("m-1", "ok")); res.Path != runtime.PathAcked {
		t.Fatalf("path %s, want acked", res.Path)
	}
	acks := named(spans.Ended(), "ack")
	if len(acks) != 1 {
		t.Fatalf("%d ack spans; ended:\n%s", len(acks), describe(spans.Ended()))
	}
	for k, v := range attrs(acks[0]) {
		if v == "" {
			t.Errorf("the ack span carries %s empty", k)
		}
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, p := range points[metricdata.Histogram[float64]](rm, "messaging.client.operation.duration") {
		for _, dp := range p.DataPoints {
			for _, kv := range dp.Attributes.ToSlice() {
				if kv.Value.Type() == attribute.STRING && kv.Value.AsString() == "" {
					t.Errorf("messaging.client.operation.duration carries %s empty", kv.Key)
				}
			}
		}
	}
}
