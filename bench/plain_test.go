package main

import (
	"context"
	"errors"
	"maps"
	"reflect"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/examples/orders/ordersmsg"
	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/runtime/lilytest"
	"github.com/lily-mq/lily/wire"
)

// routeGot is a handler that keeps the message its route hands it.
type routeGot struct {
	ordersmsg.UnimplementedOrdersHandler
	msg **ordersmsg.OrderPlacedV2
}

func (h routeGot) HandleOrderPlacedV2(_ context.Context, msg *ordersmsg.OrderPlacedV2, _ runtime.RawDelivery) error {
	*h.msg = msg
	return nil
}

// TestExtract: the plain consumers' extract reads a delivery as the
// generated route does, headers included, or plain-extract would compare
// unlike work with Lily: the same message from the same delivery, and the
// same error where the route refuses it.
func TestExtract(t *testing.T) {
	tpl, err := newTemplate()
	if err != nil {
		t.Fatal(err)
	}
	routes := ordersmsg.OrdersRoutes(nil)
	var key runtime.RouteKey
	for k := range routes {
		if k.Version == 2 {
			key = k
		}
	}
	for _, c := range []struct {
		what    string
		headers amqp.Table // set on the template's; a nil value deletes
	}{
		{"the bench's headers", nil},
		{"no trace id", amqp.Table{"x-trace-id": nil}},
		{"no tenant", amqp.Table{"x-tenant": nil}},
		{"a tenant not a string", amqp.Table{"x-tenant": int64(7)}},
		{"an empty tenant", amqp.Table{"x-tenant": ""}},
		{"a tenant off the pattern", amqp.Table{"x-tenant": "Acme"}},
		{"a tenant of 33 characters", amqp.Table{"x-tenant": strings.Repeat("a", 33)}},
		{"a trace id not a string", amqp.Table{"x-trace-id": int64(7)}},
		{"a trace id of 65 characters", amqp.Table{"x-trace-id": strings.Repeat("f", 65)}},
	} {
		p := tpl.stamp(1, time.Now())
		p.Headers = maps.Clone(p.Headers)
		for k, v := range c.headers {
			if v == nil {
				delete(p.Headers, k)
			} else {
				p.Headers[k] = v
			}
		}
		var want *ordersmsg.OrderPlacedV2
		rd, err := lilytest.RawDelivery(ordersmsg.OrdersQueueSpec(), routes, p)
		if err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		wantErr := ordersmsg.OrdersRoutes(routeGot{msg: &want})[key](t.Context(), rd)
		got, gotErr := extract(&amqp.Delivery{Headers: p.Headers, Body: p.Body})
		var wantField, gotField *wire.FieldError
		switch {
		case wantErr == nil && gotErr == nil:
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s: extract read %+v, the route %+v", c.what, *got, *want)
			}
		case errors.As(wantErr, &wantField) && errors.As(gotErr, &gotField):
			if *gotField != *wantField {
				t.Errorf("%s: extract failed with %v, the route with %v", c.what, gotErr, wantErr)
			}
		default:
			t.Errorf("%s: extract: %v; the route: %v", c.what, gotErr, wantErr)
		}
	}
}
