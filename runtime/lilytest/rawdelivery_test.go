package lilytest_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/runtime/internal/fixture"
	"github.com/lily-mq/lily/runtime/internal/guard"
	"github.com/lily-mq/lily/runtime/lilytest"
)

// RawDelivery reads a message as the guard and dispatch do, for a handler
// method called directly; what would stop it before any handler comes back
// as ErrRejected, named as the record would name it.
func TestRawDeliveryThroughTheGuardAndDispatch(t *testing.T) {
	spec, routes := fixture.LilytestQueueSpec(), fixture.LilytestRoutes(handler(ok))
	d, err := lilytest.RawDelivery(spec, routes, order(t, "raw-1"), lilytest.Attempt(2), lilytest.Redelivered(), lilytest.Via("shop", "orders.eu"))
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

	rejected := func(name string, p runtime.Publishing, want string) {
		t.Helper()
		if _, err := lilytest.RawDelivery(spec, routes, p); !errors.Is(err, lilytest.ErrRejected) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want ErrRejected %s", name, err, want)
		}
	}
	for name, p := range hostile(t) {
		rejected(name, p, "as poison: ")
	}
	rejected("oversized", produce(t, "big-1", &fixture.OrderPlacedV1{OrderID: "big-1", Padding: new(strings.Repeat("x", 4096))}), "as oversized: body of")
	v9 := order(t, "v9-1")
	v9.Headers[guard.HeaderVersion] = int64(9)
	rejected("v9", v9, "as unsupported: OrderPlaced v9 as application/json has no route")
}

// An exchange's or a routing key's name beyond ASCII reads as it was
// published, as a queue's name and the publisher's telemetry have it; what
// would harm a log line or a trace view (controls, bidirectional
// formatting, invalid UTF-8) is escaped.
func TestRawDeliveryKeepsAUTF8Name(t *testing.T) {
	spec, routes := fixture.LilytestQueueSpec(), fixture.LilytestRoutes(handler(ok))
	for _, tc := range []struct{ exchange, key, wantExchange, wantKey string }{
		{"sklep-zamówień", "orders-zamówienia", "sklep-zamówień", "orders-zamówienia"},
		{"shop\u202e", "orders\x1b[2J\xff\u0085", `shop\xe2\x80\xae`, `orders\x1b[2J\xff\xc2\x85`},
		{"", strings.Repeat("é", 127) + "\u202e", "", strings.Repeat("é", 126) + "..."},
	} {
		d, err := lilytest.RawDelivery(spec, routes, order(t, "name-1"), lilytest.Via(tc.exchange, tc.key))
		if err != nil {
			t.Fatal(err)
		}
		if d.Exchange() != tc.wantExchange || d.RoutingKey() != tc.wantKey {
			t.Errorf("Via(%q, %.40q): exchange %q, routing key %.40q; want %q, %.40q", tc.exchange, tc.key, d.Exchange(), d.RoutingKey(), tc.wantExchange, tc.wantKey)
		}
	}
}

// The delivery's headers and body are its own: the test may change what it
// delivered.
func TestRawDeliveryCopiesThePublishing(t *testing.T) {
	p := order(t, "copy-1")
	p.Headers["x-tenant"] = "acme"
	d, err := lilytest.RawDelivery(fixture.LilytestQueueSpec(), fixture.LilytestRoutes(handler(ok)), p)
	if err != nil {
		t.Fatal(err)
	}
	p.Headers["x-tenant"] = "globex"
	p.Body[2] = 'X'
	if v, _ := d.Header("x-tenant"); v != "acme" || string(d.Body()) != `{"order_id":"copy-1"}` {
		t.Errorf("after the publishing changed: x-tenant %v, body %s", v, d.Body())
	}
}

// RawDelivery refuses a spec and routes that NewConsumer refuses, with
// NewConsumer's words, rather than read the message by them: a spec without
// MaxBodyBytes would call every body oversized. A valid spec reads it.
func TestRawDeliveryRefusesASpecTheConsumerRefuses(t *testing.T) {
	routes := fixture.LilytestRoutes(handler(ok))
	p := order(t, "spec-1")
	p.Body = []byte("{}")
	bare := runtime.QueueSpec{Name: "q", Prefetch: 1, Concurrency: 1, MaxAttempts: 1, HandlerTimeout: time.Second}
	noLimit := fixture.LilytestQueueSpec()
	noLimit.MaxBodyBytes = 0
	for name, spec := range map[string]runtime.QueueSpec{"bare": bare, "no body limit": noLimit} {
		_, refused := lilytest.New(spec, routes, runtime.Config{})
		_, err := lilytest.RawDelivery(spec, routes, p)
		if refused == nil || err == nil || errors.Is(err, lilytest.ErrRejected) ||
			!strings.Contains(err.Error(), "lilytest: invalid spec or routes: ") || !strings.Contains(err.Error(), refused.Error()) {
			t.Errorf("%s: RawDelivery: %v; want the spec refused as New refuses it: %v", name, err, refused)
		}
	}
	if _, err := lilytest.RawDelivery(fixture.LilytestQueueSpec(), runtime.Routes{}, p); err == nil || errors.Is(err, lilytest.ErrRejected) || !strings.Contains(err.Error(), "the dispatch table is empty") {
		t.Errorf("no routes: %v, want the dispatch table refused", err)
	}
	if _, err := lilytest.RawDelivery(fixture.LilytestQueueSpec(), routes, p); err != nil {
		t.Errorf("valid spec: %v", err)
	}
}
