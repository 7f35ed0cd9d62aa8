package lilyotel_test

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/runtime/lilytest"
	"github.com/lily-mq/lily/telemetry/lilyotel"
	"github.com/lily-mq/lily/topology"
)

// slowSends makes each send span's End take a while, as a synchronous
// export does.
type slowSends struct{}

func (slowSends) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (slowSends) OnEnd(s sdktrace.ReadOnlySpan) {
	if strings.HasPrefix(s.Name(), "send ") {
		time.Sleep(50 * time.Millisecond)
	}
}
func (slowSends) Shutdown(context.Context) error   { return nil }
func (slowSends) ForceFlush(context.Context) error { return nil }

// harnessSpec is a queue for lilytest's harness, which needs no broker.
func harnessSpec(name string) runtime.QueueSpec {
	return runtime.QueueSpec{
		Name: name,
		Topology: topology.Queue{
			Type:            "classic",
			DeadLetterQueue: name + ".dlq",
			RetryDelays:     []time.Duration{retryDelay},
		},
		Prefetch:       8,
		Concurrency:    4,
		MaxAttempts:    2,
		MaxBodyBytes:   1024,
		HandlerTimeout: time.Second,
		Messages:       []envelope.Message{{Type: wireType, Inbox: envelope.InboxOptional}},
	}
}

// recorded is a Telemetry whose spans and measurements the test reads.
func recorded(t *testing.T) (*lilyotel.Telemetry, *tracetest.SpanRecorder, *metric.ManualReader) {
	t.Helper()
	spans, reader := tracetest.NewSpanRecorder(), metric.NewManualReader()
	tel, err := lilyotel.New(lilyotel.Options{
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)),
		MeterProvider:  metric.NewMeterProvider(metric.WithReader(reader)),
	})
	if err != nil {
		t.Fatal(err)
	}
	return tel, spans, reader
}

// harness runs spec's deliveries through lilytest with tel, each handled
// by handle, and closes it when the test ends.
func harness(t *testing.T, spec runtime.QueueSpec, tel *lilyotel.Telemetry, handle func(context.Context, runtime.RawDelivery) error) *lilytest.Harness {
	t.Helper()
	routes := runtime.Routes{{Type: wireType, Version: 1, ContentType: "application/json"}: handle}
	h, err := lilytest.New(spec, routes, runtime.Config{Telemetry: tel, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

// handled is a handler that succeeds.
func handled(context.Context, runtime.RawDelivery) error { return nil }

// opType is a span's messaging.operation.type.
func opType(s sdktrace.ReadOnlySpan) string {
	v, _ := attrs(s)["messaging.operation.type"].(string)
	return v
}

// seconds is the sum of histogram name's values recorded with every one of
// match.
func seconds(rm metricdata.ResourceMetrics, name string, match ...attribute.KeyValue) float64 {
	var n float64
	for _, p := range points[metricdata.Histogram[float64]](rm, name) {
		for _, dp := range p.DataPoints {
			if has(dp.Attributes, match) {
				n += dp.Sum
			}
		}
	}
	return n
}

// Each span and measurement ends when its operation did, though the
// runtime tells the hook late, once the record is written: a handoff's send
// before the ACK, or before the requeue's pause and its NACK; the
// settlement before the observer hears of the record; the processing, its
// span and its measurement alike, at its settlement. Neither the observer,
// nor the send span's own slow end, nor the requeue's pause counts in them.
func TestSpansEndAtTheAnswer(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(slowSends{}), sdktrace.WithSpanProcessor(rec))
	reader := metric.NewManualReader()
	tel, err := lilyotel.New(lilyotel.Options{TracerProvider: tp, MeterProvider: metric.NewMeterProvider(metric.WithReader(reader))})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var observed []time.Time
	routes := runtime.Routes{{Type: wireType, Version: 1, ContentType: "application/json"}: func(_ context.Context, d runtime.RawDelivery) error {
		if strings.Contains(string(d.Body()), "fail") {
			return errors.New("retry me")
		}
		return nil
	}}
	h, err := lilytest.New(harnessSpec("lilyotel.answer"), routes, runtime.Config{Telemetry: tel, Logger: slog.New(slog.DiscardHandler),
		Observe: func(runtime.Record) {
			mu.Lock()
			observed = append(observed, time.Now())
			mu.Unlock()
			time.Sleep(50 * time.Millisecond)
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	paths := []runtime.Path{
		h.Deliver(message("answer-ok", "ok")).Path,
		h.Deliver(message("answer-retried", "fail")).Path,
	}
	h.AnswerHandoffs("returned")
	paths = append(paths, h.Deliver(message("answer-requeued", "fail")).Path)
	if want := []runtime.Path{runtime.PathAcked, runtime.PathRetried, runtime.PathRequeued}; !slices.Equal(paths, want) {
		t.Fatalf("paths %q, want %q", paths, want)
	}

	// Each delivery is a trace of its own, in the order delivered.
	type journey struct{ process, send, settle sdktrace.ReadOnlySpan }
	byTrace := map[string]*journey{}
	var order []string
	for _, s := range rec.Ended() {
		id := s.SpanContext().TraceID().String()
		j := byTrace[id]
		if j == nil {
			j = &journey{}
			byTrace[id] = j
		}
		switch opType(s) {
		case "process":
			j.process = s
			order = append(order, id)
		case "send":
			j.send = s
		case "settle":
			j.settle = s
		}
	}
	if len(order) != 3 {
		t.Fatalf("%d process spans, want 3:\n%s", len(order), describe(rec.Ended()))
	}
	var process, send, settle float64
	for i, id := range order {
		j := byTrace[id]
		if j.settle == nil {
			t.Fatalf("journey %d has no settle span", i)
		}
		if j.settle.EndTime().After(observed[i]) {
			t.Errorf("journey %d: %s ended at %s, after Observe heard of its record at %s", i, j.settle.Name(),
				j.settle.EndTime().Format(time.StampMicro), observed[i].Format(time.StampMicro))
		}
		if !j.process.EndTime().Equal(j.settle.EndTime()) {
			t.Errorf("journey %d: %s ended at %s, not at its settlement, %s", i, j.process.Name(),
				j.process.EndTime().Format(time.StampMicro), j.settle.EndTime().Format(time.StampMicro))
		}
		settle += j.settle.EndTime().Sub(j.settle.StartTime()).Seconds()
		process += j.process.EndTime().Sub(j.process.StartTime()).Seconds()
		if (j.send != nil) != (i > 0) {
			t.Fatalf("journey %d: send span %v", i, j.send)
		}
		if j.send == nil {
			continue
		}
		if j.send.EndTime().After(j.settle.StartTime()) {
			t.Errorf("journey %d: %s ended at %s, after %s started at %s", i, j.send.Name(),
				j.send.EndTime().Format(time.StampMicro), j.settle.Name(), j.settle.StartTime().Format(time.StampMicro))
		}
		send += j.send.EndTime().Sub(j.send.StartTime()).Seconds()
	}

	// The measurements are the spans' durations.
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		match []attribute.KeyValue
		want  float64
	}{
		{"messaging.process.duration", nil, process},
		{"messaging.client.operation.duration", []attribute.KeyValue{attribute.String("messaging.operation.type", "settle")}, settle},
		{"messaging.client.operation.duration", []attribute.KeyValue{attribute.String("messaging.operation.type", "send")}, send},
		{"lily.handoff.duration", nil, send},
	} {
		if got := seconds(rm, c.name, c.match...); math.Abs(got-c.want) > 1e-6 {
			t.Errorf("%s %v: %.6f s in all, want %.6f s", c.name, c.match, got, c.want)
		}
	}
}
