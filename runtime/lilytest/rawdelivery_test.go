package lilytest_test

import (
	"context"
	"strings"
	"testing"

	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/runtime/internal/fixture"
	"github.com/lily-mq/lily/runtime/lilytest"
)

// RawDelivery reads a message as the guard does, for a handler method called
// directly; the guard's verdict comes back as the error.
func TestRawDeliveryThroughTheGuard(t *testing.T) {
	spec := fixture.LilytestQueueSpec()
	d, err := lilytest.RawDelivery(spec, order(t, "raw-1"), lilytest.Attempt(2), lilytest.Redelivered(), lilytest.Via("shop", "orders.eu"))
	if err != nil {
		t.Fatal(err)
	}
	if d.MessageID() != "raw-1" || d.Type() != fixture.OrderPlacedType || d.Version() != 1 || d.Attempt() != 2 ||
		!d.Redelivered() || d.Exchange() != "shop" || d.RoutingKey() != "orders.eu" || string(d.Body()) != `{"order_id":"raw-1"}` {
		t.Errorf("delivery: id %q type %q v%d attempt %d redelivered %v exchange %q key %q body %s",
			d.MessageID(), d.Type(), d.Version(), d.Attempt(), d.Redelivered(), d.Exchange(), d.RoutingKey(), d.Body())
	}
	var saw string
	h := handler(func(_ context.Context, msg *fixture.OrderPlacedV1, d runtime.RawDelivery) error {
		saw = msg.OrderID + "/" + d.MessageID()
		return nil
	})
	if err := h.HandleOrderPlacedV1(context.Background(), &fixture.OrderPlacedV1{OrderID: "raw-1"}, d); err != nil || saw != "raw-1/raw-1" {
		t.Errorf("handler: %v, saw %q", err, saw)
	}

	for name, p := range hostile(t) {
		if _, err := lilytest.RawDelivery(spec, p); err == nil || !strings.Contains(err.Error(), "poison") {
			t.Errorf("%s: %v, want poison", name, err)
		}
	}
	big := produce(t, "big-1", &fixture.OrderPlacedV1{OrderID: "big-1", Padding: new(strings.Repeat("x", 4096))})
	if _, err := lilytest.RawDelivery(spec, big); err == nil || !strings.Contains(err.Error(), "oversized: body of") {
		t.Errorf("oversized: %v", err)
	}
}
