package lilytest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/runtime/internal/fixture"
	"github.com/lily-mq/lily/runtime/lilytest"
)

// The per-delivery path without a broker: the guard, dispatch, the
// extractor, the handler, decide, the executor and the record, with the
// fake broker's ACK (and, retried, its confirm) answered at once. Each runs
// with Config.Telemetry unset and set to a hook that does nothing, so that
// benchstat (-col /telemetry) shows what the hook costs when unset: the
// runtime checks for nil and calls nothing.

// noTelemetry is a Telemetry that does nothing.
type noTelemetry struct{}

func (noTelemetry) Received(ctx context.Context, _ string, _ runtime.RawDelivery) context.Context {
	return ctx
}

func (noTelemetry) Publish(context.Context, string, string, *runtime.Publishing) func(string, time.Time) {
	return ignore
}

func (noTelemetry) Settle(context.Context, string) func(string, time.Time) { return ignore }
func (noTelemetry) Settled(context.Context, runtime.Record)                {}
func (noTelemetry) Lost(string, string)                                    {}

func ignore(string, time.Time) {}

var errBusy = runtime.Retryable(errors.New("busy"))

func BenchmarkDeliverAck(b *testing.B) {
	benchDeliver(b, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error { return nil }, runtime.PathAcked)
}

func BenchmarkDeliverRetry(b *testing.B) {
	benchDeliver(b, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error { return errBusy }, runtime.PathRetried)
}

func benchDeliver(b *testing.B, h handler, want runtime.Path) {
	p, err := fixture.NewOrderPlacedV1("bench-1", &fixture.OrderPlacedV1{OrderID: "bench-1"})
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		telemetry runtime.Telemetry
	}{{"unset", nil}, {"noop", noTelemetry{}}} {
		b.Run("telemetry="+tc.name, func(b *testing.B) {
			hs, err := lilytest.New(fixture.LilytestQueueSpec(), fixture.LilytestRoutes(h), runtime.Config{Logger: quiet, Telemetry: tc.telemetry})
			if err != nil {
				b.Fatal(err)
			}
			defer hs.Close()
			b.ReportAllocs()
			for b.Loop() {
				if res := hs.Deliver(p); res.Path != want {
					b.Fatalf("path %s (%s), want %s", res.Path, res.Reason, want)
				}
			}
		})
	}
}
