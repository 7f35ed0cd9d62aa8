package lilyotel_test

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/telemetry/lilyotel"
)

// BenchmarkJourney is the hook's own cost for one delivery that is retried:
// Received, the handoff's Publish, the ACK's Settle and Settled, as the
// runtime calls them, with no broker. OpenTelemetry's no-op providers; the
// SDK with sampling off (the metrics still recorded); and the SDK recording
// every span, exported nowhere.
func BenchmarkJourney(b *testing.B) {
	sdkMetrics := func() *metric.MeterProvider {
		return metric.NewMeterProvider(metric.WithReader(metric.NewManualReader()))
	}
	for _, c := range []struct {
		name string
		o    lilyotel.Options
	}{
		{"noop", lilyotel.Options{TracerProvider: tracenoop.NewTracerProvider(), MeterProvider: metricnoop.NewMeterProvider()}},
		{"sdk-unsampled", lilyotel.Options{TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample())), MeterProvider: sdkMetrics()}},
		{"sdk-sampled", lilyotel.Options{TracerProvider: sdktrace.NewTracerProvider(), MeterProvider: sdkMetrics()}},
	} {
		b.Run(c.name, func(b *testing.B) {
			tel, err := lilyotel.New(c.o)
			if err != nil {
				b.Fatal(err)
			}
			p := runtime.Publishing{Headers: amqp.Table{}}
			rec := runtime.Record{Queue: "orders", Attempt: 1, Path: runtime.PathRetried, Handler: "retryable", Handoff: "confirmed", Destination: "orders.retry.1s"}
			b.ReportAllocs()
			for b.Loop() {
				clear(p.Headers)
				ctx := tel.Received(context.Background(), "orders", runtime.RawDelivery{})
				tel.Publish(ctx, "", "orders.retry.1s", &p)("confirmed", time.Now())
				tel.Settle(ctx, "ack")("ack sent", time.Now())
				tel.Settled(ctx, rec)
			}
		})
	}
}
