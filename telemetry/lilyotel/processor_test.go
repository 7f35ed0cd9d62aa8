package lilyotel_test

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

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
