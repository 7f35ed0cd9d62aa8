package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
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

// acks records the ACKs written to a channel, and what the tracker had
// seen settled when each was written.
type acks struct {
	t    *tracker
	got  []string
	seen []int64
}

func (a *acks) Ack(tag uint64, multiple bool) error {
	a.got = append(a.got, fmt.Sprintf("ack %d multiple %t", tag, multiple))
	a.seen = append(a.seen, a.t.settled.Load())
	return nil
}
func (a *acks) Nack(uint64, bool, bool) error { return errors.New("nack") }
func (a *acks) Reject(uint64, bool) error     { return errors.New("reject") }

// TestBatchAcker finishes deliveries out of order: a multiple ACK names
// only a tag below which every delivery is done, once ackBatch are, or
// when none is left in hand; each delivery is settled after the ACK that
// covers it, once.
func TestBatchAcker(t *testing.T) {
	tr := newTracker(42)
	a := &acks{t: tr}
	b := &batchAcker{ch: a, t: tr, done: map[uint64]string{}}
	for range 41 {
		b.take()
	}
	finish := func(tags ...uint64) {
		t.Helper()
		for _, tag := range tags {
			if err := b.finish(tag, fmt.Sprint("m", tag)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for tag := uint64(2); tag <= 33; tag++ {
		finish(tag) // 1 is not done: nothing may be ACKed
	}
	finish(1)                      // 1 to 33 done, ackBatch of them: ACK 33
	finish(35, 36, 37, 38, 39, 40) // 34 is not done
	finish(34)                     // 34 to 40 done, fewer than ackBatch, 41 in hand
	finish(41)                     // none in hand: ACK 41
	b.take()
	finish(42) // alone, none in hand: ACK 42
	want := []string{"ack 33 multiple true", "ack 41 multiple true", "ack 42 multiple true"}
	if !slices.Equal(a.got, want) {
		t.Fatalf("ACKs %q, want %q", a.got, want)
	}
	if want := []int64{0, 33, 41}; !slices.Equal(a.seen, want) {
		t.Errorf("settled before each ACK %v, want %v", a.seen, want)
	}
	select {
	case <-tr.done:
	default:
		t.Fatalf("%d of 42 settled", tr.settled.Load())
	}
	if len(b.done) != 0 {
		t.Errorf("left waiting: %v", b.done)
	}
}
