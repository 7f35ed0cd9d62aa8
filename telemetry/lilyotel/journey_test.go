package lilyotel_test

import (
	"testing"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// A message that fails once and then succeeds is one trace: the first
// attempt's process span, its retry handoff's send span and its ACK; then
// the retry's process span, a child of that send span and linked to it, and
// its ACK. Every span has the conventions' name, kind and attributes.
func TestBrokerRetryIsOneTrace(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.start(nil)
	msg := id("fail-once")
	r.publish(message(msg, "fail-once"))
	spans := r.awaitProcessed(2)

	q := r.q.Name
	processes := named(spans, "process "+q)
	first := one(t, "the first attempt", where(processes, "lily.attempt", int64(1)))
	retry := one(t, "the retry", where(processes, "lily.attempt", int64(2)))
	send := one(t, "the retry handoff", named(spans, "send "+r.bucket()))
	acks := named(spans, "ack "+q)
	if len(acks) != 2 {
		t.Fatalf("%d ack spans, want 2:\n%s", len(acks), describe(spans))
	}

	expect(t, first, "process "+q, trace.SpanKindConsumer, codes.Error, map[string]any{
		"messaging.system":                           "rabbitmq",
		"messaging.operation.type":                   "process",
		"messaging.operation.name":                   "process",
		"messaging.destination.name":                 q, // the default exchange, a routing key that names the queue
		"messaging.destination.subscription.name":    q,
		"messaging.rabbitmq.destination.routing_key": q,
		"messaging.message.id":                       msg,
		"lily.attempt":                               int64(1),
		"lily.path":                                  "retried",
		"lily.handler":                               "retryable",
		"lily.handoff":                               "confirmed",
		"error.type":                                 "retryable",
	})
	if first.Status().Description == "" {
		t.Error("the failed attempt's status has no description")
	}
	expect(t, send, "send "+r.bucket(), trace.SpanKindProducer, codes.Unset, map[string]any{
		"messaging.system":                           "rabbitmq",
		"messaging.operation.type":                   "send",
		"messaging.operation.name":                   "send",
		"messaging.destination.name":                 r.bucket(),
		"messaging.rabbitmq.destination.routing_key": r.bucket(),
		"messaging.message.id":                       msg,
		"lily.evidence":                              "confirmed",
	})
	expect(t, retry, "process "+q, trace.SpanKindConsumer, codes.Unset, map[string]any{
		"messaging.system":                           "rabbitmq",
		"messaging.operation.type":                   "process",
		"messaging.operation.name":                   "process",
		"messaging.destination.name":                 q, // dead-lettered from the bucket through the default exchange
		"messaging.destination.subscription.name":    q,
		"messaging.rabbitmq.destination.routing_key": q,
		"messaging.message.id":                       msg,
		"lily.attempt":                               int64(2),
		"lily.path":                                  "acked",
		"lily.handler":                               "ok",
	})
	for _, ack := range acks {
		expect(t, ack, "ack "+q, trace.SpanKindClient, codes.Unset, map[string]any{
			"messaging.system":                           "rabbitmq",
			"messaging.operation.type":                   "settle",
			"messaging.operation.name":                   "ack",
			"messaging.destination.name":                 q,
			"messaging.destination.subscription.name":    q,
			"messaging.rabbitmq.destination.routing_key": q,
			"messaging.message.id":                       msg,
			"lily.evidence":                              "ack sent",
		})
	}

	// The structure: one trace, from the first delivery (which carried no
	// trace context) through the handoff to the retry.
	if first.Parent().IsValid() || len(first.Links()) != 0 {
		t.Errorf("the first attempt has parent %v and links %v; it carried no trace context", first.Parent(), first.Links())
	}
	childOf(t, send, first)
	childOf(t, retry, send)
	linkedTo(t, retry, send.SpanContext())
	for _, ack := range acks {
		if ack.Parent().SpanID() != first.SpanContext().SpanID() && ack.Parent().SpanID() != retry.SpanContext().SpanID() {
			t.Errorf("an ack span's parent %s is neither process span", ack.Parent().SpanID())
		}
	}
	for _, s := range spans {
		if s.SpanContext().TraceID() != first.SpanContext().TraceID() {
			t.Errorf("span %q is in trace %s, not the journey's %s", s.Name(), s.SpanContext().TraceID(), first.SpanContext().TraceID())
		}
	}
}

// A queue named beyond ASCII keeps its name through the broker: each
// attempt's process span, the retry handoff's send and the copy that comes
// back from its bucket all name the queue (or the bucket) as it is, with no
// template, as a producer's publish to it names it.
func TestBrokerUTF8QueueIsItsDestination(t *testing.T) {
	t.Parallel()
	t.Run("zamówienia", func(t *testing.T) {
		r := newRig(t)
		r.start(nil)
		r.publish(message(id("utf8"), "fail-once"))
		spans := r.awaitProcessed(2)
		q := r.q.Name
		for _, s := range append(named(spans, "process "+q), one(t, "the retry handoff", named(spans, "send "+r.bucket()))) {
			a := attrs(s)
			want := q
			if s.SpanKind() == trace.SpanKindProducer {
				want = r.bucket()
			}
			if _, ok := a["messaging.destination.template"]; ok || a["messaging.destination.name"] != want || a["messaging.rabbitmq.destination.routing_key"] != want {
				t.Errorf("%s: destination %q, routing key %q, template %v; want %q for both, no template", s.Name(),
					a["messaging.destination.name"], a["messaging.rabbitmq.destination.routing_key"], a["messaging.destination.template"], want)
			}
		}
	})
}
