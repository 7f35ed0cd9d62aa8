package lilyotel_test

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/runtime/lilytest"
)

// Each handoff of a journey is counted and timed: at a quorum queue's
// delivery limit, a retry handoff that failed (its bucket gone) and the DLQ
// handoff that follows it both, though the record names only the last.
func TestEveryHandoffIsCounted(t *testing.T) {
	tel, rec, reader := recorded(t)
	spec := harnessSpec("lilyotel.handoffs")
	spec.Topology.Type, spec.Topology.DeliveryLimit = "quorum", 3
	h := harness(t, spec, tel, func(context.Context, runtime.RawDelivery) error { return errors.New("retry me") })
	h.AnswerHandoffs("returned")
	m := message("two-handoffs", "fail")
	m.Headers["x-delivery-count"] = int64(spec.Topology.DeliveryLimit)
	r := h.Deliver(m, lilytest.Redelivered())
	dlq := spec.Topology.DeadLetterQueue
	if r.Destination != dlq || r.Handoff != "returned" {
		t.Fatalf("result %+v: want the DLQ's handoff, returned, last", r)
	}
	retry := ""
	for _, s := range rec.Ended() {
		if opType(s) == "send" && attrs(s)["messaging.destination.name"] != dlq {
			retry, _ = attrs(s)["messaging.destination.name"].(string)
		}
	}
	if retry == "" {
		t.Fatalf("no send span to the retry bucket:\n%s", describe(rec.Ended()))
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	q := attribute.String("messaging.destination.subscription.name", spec.Name)
	returned := attribute.String("lily.handoff", "returned")
	for _, dest := range []string{retry, dlq} {
		to := attribute.String("messaging.destination.name", dest)
		if n := sum(rm, "lily.handoffs", q, to, returned); n != 1 {
			t.Errorf("lily.handoffs to %s returned: %d, want 1", dest, n)
		}
		if n := count(rm, "lily.handoff.duration", q, to, returned); n != 1 {
			t.Errorf("lily.handoff.duration to %s returned: %d measured, want 1", dest, n)
		}
	}
	if n := sum(rm, "lily.handoffs"); n != 2 {
		t.Errorf("lily.handoffs: %d in all, want 2", n)
	}
}
