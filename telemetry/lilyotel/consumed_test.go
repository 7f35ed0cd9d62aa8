package lilyotel_test

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/runtime/lilytest"
)

// messaging.client.consumed.messages counts the messages delivered to the
// application: a delivery rejected before any user code (poison, over the
// body limit, of a version no route takes) is not one. It still has its
// process span, and lily.deliveries counts it by its path.
func TestRejectedDeliveriesAreNotConsumed(t *testing.T) {
	tel, spans, reader := recorded(t)
	spec := harnessSpec("lilyotel.consumed")
	h := harness(t, spec, tel, handled)
	h.Deliver(message("consumed-ok", "ok"))
	oversized := message("consumed-oversized", strings.Repeat("x", 2*spec.MaxBodyBytes))
	unsupported := runtime.NewPublishing(envelope.Message{Type: wireType}, 9, "consumed-v9", []byte(`{}`))
	poison := message("consumed-poison", "ok")
	poison.MessageId = "" // Lily's envelope requires one
	for _, p := range []struct {
		name string
		res  lilytest.Result
	}{{"oversized", h.Deliver(oversized)}, {"unsupported", h.Deliver(unsupported)}, {"poison", h.Deliver(poison)}} {
		if p.res.Rejection != p.name {
			t.Fatalf("%s: rejection %q", p.name, p.res.Rejection)
		}
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	q := attribute.String("messaging.destination.subscription.name", spec.Name)
	if n := sum(rm, "messaging.client.consumed.messages", q); n != 1 {
		t.Errorf("messaging.client.consumed.messages: %d, want 1 (the rejected ones are not the application's)", n)
	}
	if n := sum(rm, "lily.deliveries", q); n != 4 {
		t.Errorf("lily.deliveries: %d, want 4", n)
	}
	if n := len(where(spans.Ended(), "messaging.operation.type", "process")); n != 4 {
		t.Errorf("%d process spans, want 4", n)
	}
}
