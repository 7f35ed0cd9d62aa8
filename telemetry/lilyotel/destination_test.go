package lilyotel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/runtime/lilytest"
)

// The process, consumed and settle measurements say where a delivery came
// from, as the conventions ask: messaging.destination.name when its values
// are few (the queue, through the default exchange), the template of the
// spans' names when a producer picked the routing key.
func TestConsumerMetricsCarryTheDestination(t *testing.T) {
	tel, _, reader := recorded(t)
	spec := harnessSpec("lilyotel.destination")
	h := harness(t, spec, tel, handled)
	h.Deliver(message("direct", "ok"))
	h.Deliver(message("through-an-exchange", "ok"), lilytest.Via("shop.events", "order.placed.42"))

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	name := attribute.String("messaging.destination.name", spec.Name)
	template := attribute.String("messaging.destination.template", "shop.events:{routing key}:"+spec.Name)
	settle := attribute.String("messaging.operation.type", "settle")
	for _, where := range []attribute.KeyValue{name, template} {
		if n := sum(rm, "messaging.client.consumed.messages", where); n != 1 {
			t.Errorf("messaging.client.consumed.messages %v: %d, want 1", where, n)
		}
		if n := count(rm, "messaging.process.duration", where); n != 1 {
			t.Errorf("messaging.process.duration %v: %d measured, want 1", where, n)
		}
		if n := count(rm, "messaging.client.operation.duration", settle, where); n != 1 {
			t.Errorf("messaging.client.operation.duration %v %v: %d measured, want 1", settle, where, n)
		}
	}
	// The name a producer's key is part of never goes into a measurement.
	for _, m := range []string{"messaging.client.consumed.messages", "messaging.process.duration", "messaging.client.operation.duration"} {
		for _, v := range values(rm, m, "messaging.destination.name") {
			if v != spec.Name {
				t.Errorf("%s carries messaging.destination.name %q", m, v)
			}
		}
	}
}

// values are the values attribute key takes in metric name's points.
func values(rm metricdata.ResourceMetrics, name string, key attribute.Key) []string {
	var out []string
	add := func(set attribute.Set) {
		if v, ok := set.Value(key); ok {
			out = append(out, v.AsString())
		}
	}
	for _, p := range points[metricdata.Sum[int64]](rm, name) {
		for _, dp := range p.DataPoints {
			add(dp.Attributes)
		}
	}
	for _, p := range points[metricdata.Histogram[float64]](rm, name) {
		for _, dp := range p.DataPoints {
			add(dp.Attributes)
		}
	}
	return out
}

// A queue named beyond ASCII (the schema allows orders-zamówienia) is its
// deliveries' destination by that very name, as a publish to it names it:
// the routing key that names the queue is no key a producer picked, so no
// template stands for it in the spans' names, attributes or measurements.
// A key a producer picked beyond ASCII is kept as it came.
func TestAUTF8QueueNameIsItsDestination(t *testing.T) {
	tel, spans, reader := recorded(t)
	spec := harnessSpec("lilyotel.zamówienia")
	h := harness(t, spec, tel, handled)
	// A producer's publish to the queue through the default exchange.
	tel.Publish(context.Background(), "", spec.Name, &runtime.Publishing{})("confirmed", time.Now())
	h.Deliver(message("utf8-direct", "ok"))
	h.Deliver(message("utf8-exchange", "ok"), lilytest.Via("sklep", "zamówienie.42"))

	ended := spans.Ended()
	send := one(t, "the producer's send", where(ended, "messaging.operation.type", "send"))
	if got := attrs(send)["messaging.destination.name"]; got != spec.Name {
		t.Errorf("the send's destination %q, want %q", got, spec.Name)
	}
	for _, want := range []struct {
		name, destination, key, template string
	}{
		{"process " + spec.Name, spec.Name, spec.Name, ""},
		{"ack " + spec.Name, spec.Name, spec.Name, ""},
		{"process sklep:{routing key}:" + spec.Name, "sklep:zamówienie.42:" + spec.Name, "zamówienie.42", "sklep:{routing key}:" + spec.Name},
	} {
		s := one(t, want.name, named(ended, want.name))
		a := attrs(s)
		template, _ := a["messaging.destination.template"].(string)
		if a["messaging.destination.name"] != want.destination || a["messaging.rabbitmq.destination.routing_key"] != want.key || template != want.template {
			t.Errorf("%s: destination %q, routing key %q, template %q; want %q, %q, %q", s.Name(),
				a["messaging.destination.name"], a["messaging.rabbitmq.destination.routing_key"], template, want.destination, want.key, want.template)
		}
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	name := attribute.String("messaging.destination.name", spec.Name)
	if n := sum(rm, "messaging.client.consumed.messages", name); n != 1 {
		t.Errorf("messaging.client.consumed.messages %v: %d, want 1", name, n)
	}
	if n := count(rm, "messaging.process.duration", name); n != 1 {
		t.Errorf("messaging.process.duration %v: %d measured, want 1", name, n)
	}
}

// A queue may be named with a rune RawDelivery escapes (U+00A0, U+200D:
// the spec refuses only ASCII controls); a delivery to it through the
// default exchange names the queue by the key the send to it names, so its
// destination is that queue, escaped as the send's is, with no template.
func TestAQueueNameWithAnEscapedRuneIsItsDestination(t *testing.T) {
	tel, spans, reader := recorded(t)
	spec := harnessSpec("lilyotel.a\u00a0b\u200dc")
	const escaped = `lilyotel.a\xc2\xa0b\xe2\x80\x8dc`
	h := harness(t, spec, tel, handled)
	tel.Publish(context.Background(), "", spec.Name, &runtime.Publishing{})("confirmed", time.Now())
	h.Deliver(message("escaped-direct", "ok"))

	ended := spans.Ended()
	send := one(t, "the producer's send", where(ended, "messaging.operation.type", "send"))
	if got := attrs(send)["messaging.destination.name"]; got != escaped {
		t.Errorf("the send's destination %q, want %q", got, escaped)
	}
	for _, op := range []string{"process", "ack"} {
		s := one(t, op, where(ended, "messaging.operation.name", op))
		a := attrs(s)
		template, _ := a["messaging.destination.template"].(string)
		if s.Name() != op+" "+escaped || a["messaging.destination.name"] != escaped || template != "" {
			t.Errorf("%s span %q: destination %q, template %q; want %q, %q and none", op, s.Name(), a["messaging.destination.name"], template, op+" "+escaped, escaped)
		}
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	name := attribute.String("messaging.destination.name", escaped)
	if n := sum(rm, "messaging.client.consumed.messages", name); n != 1 {
		t.Errorf("messaging.client.consumed.messages %v: %d, want 1", name, n)
	}
}

// The consumed queue's name is messaging.destination.subscription.name as
// the destination's name holds it, escaped alike, on every span and
// measurement that carries it.
func TestAQueueNameWithAnEscapedRuneIsItsSubscription(t *testing.T) {
	tel, spans, reader := recorded(t)
	spec := harnessSpec("lilyotel.a\u200db")
	const escaped = `lilyotel.a\xe2\x80\x8db`
	h := harness(t, spec, tel, func(_ context.Context, d runtime.RawDelivery) error {
		if d.Attempt() == 1 {
			return runtime.Retryable(errors.New("again"))
		}
		return nil
	})
	res := h.Deliver(message("subscription", "ok"))
	if res.Copy == nil {
		t.Fatalf("path %s: no retry copy", res.Path)
	}
	h.Deliver(*res.Copy)
	tel.Lost(spec.Name, "connection reset")

	key := attribute.Key("messaging.destination.subscription.name")
	carried := 0
	for _, s := range spans.Ended() {
		if v, ok := attrs(s)[string(key)]; ok {
			carried++
			if v != escaped {
				t.Errorf("span %q: %s %q, want %q", s.Name(), key, v, escaped)
			}
		}
	}
	if carried == 0 {
		t.Errorf("no span carries %s", key)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	measured := map[string]bool{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			var sets []attribute.Set
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					sets = append(sets, dp.Attributes)
				}
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					sets = append(sets, dp.Attributes)
				}
			}
			for _, set := range sets {
				if v, ok := set.Value(key); ok {
					measured[m.Name] = true
					if v.AsString() != escaped {
						t.Errorf("%s: %s %q, want %q", m.Name, key, v.AsString(), escaped)
					}
				}
			}
		}
	}
	for _, name := range []string{"messaging.client.consumed.messages", "messaging.process.duration", "messaging.client.operation.duration", "lily.deliveries", "lily.handoffs", "lily.reconnects"} {
		if !measured[name] {
			t.Errorf("%s carries no %s", name, key)
		}
	}
}
