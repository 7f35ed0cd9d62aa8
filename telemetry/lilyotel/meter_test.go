package lilyotel_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/telemetry/lilyotel"
)

// panickyMeters make instruments that panic as they record.
type panickyMeters struct{ noop.MeterProvider }

func (panickyMeters) Meter(string, ...metric.MeterOption) metric.Meter { return panickyMeter{} }

type panickyMeter struct{ noop.Meter }

func (panickyMeter) Int64Counter(string, ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	return panickyCounter{}, nil
}

func (panickyMeter) Float64Histogram(string, ...metric.Float64HistogramOption) (metric.Float64Histogram, error) {
	return panickyHistogram{}, nil
}

type panickyCounter struct{ noop.Int64Counter }

func (panickyCounter) Add(context.Context, int64, ...metric.AddOption) { panic("counter") }
func (panickyCounter) Enabled(context.Context) bool                    { return true }

type panickyHistogram struct{ noop.Float64Histogram }

func (panickyHistogram) Record(context.Context, float64, ...metric.RecordOption) { panic("histogram") }
func (panickyHistogram) Enabled(context.Context) bool                            { return true }

// A meter that panics costs the measurements, not the spans: each span a
// journey started ends, its handoff's and its settlement's and its own.
func TestAPanickingMeterLeavesNoSpanOpen(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	tel, err := lilyotel.New(lilyotel.Options{
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)),
		MeterProvider:  panickyMeters{},
	})
	if err != nil {
		t.Fatal(err)
	}
	h := harness(t, harnessSpec("rv-otel-meter"), tel, func(_ context.Context, d runtime.RawDelivery) error {
		switch {
		case strings.Contains(string(d.Body()), "refuse"):
			return runtime.Permanent(errors.New("refused"))
		case strings.Contains(string(d.Body()), "fail"):
			return runtime.Retryable(errors.New("again"))
		}
		return nil
	})
	for _, m := range []struct {
		id, do string
		want   runtime.Path
	}{{"m-ok", "ok", runtime.PathAcked}, {"m-retry", "fail", runtime.PathRetried}, {"m-dlq", "refuse", runtime.PathDeadLettered}} {
		if got := h.Deliver(message(m.id, m.do)).Path; got != m.want {
			t.Fatalf("%s: path %s, want %s", m.id, got, m.want)
		}
	}
	ended := spans.Ended()
	if open := len(spans.Started()) - len(ended); open != 0 {
		t.Errorf("%d of %d spans left open; ended:\n%s", open, len(spans.Started()), describe(ended))
	}
	if len(ended) != 8 { // 3 process, 3 ack, 2 send
		t.Errorf("%d spans ended, want 8:\n%s", len(ended), describe(ended))
	}
}
