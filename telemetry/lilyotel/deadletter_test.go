package lilyotel_test

import (
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// A message refused for good goes to the DLQ with a traceparent of its own
// trace: that of the DLQ handoff's send span. Re-driven with its headers, as
// the lilydlq command re-drives, its processing continues the same trace.
func TestBrokerDeadLetterAndRedriveAreOneTrace(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.start(nil)
	msg := id("refuse")
	r.publish(message(msg, "refuse"))
	dlq := r.q.Topology.DeadLetterQueue
	spans := r.awaitProcessed(1)
	first := one(t, "the refused attempt", named(spans, "process "+r.q.Name))
	send := one(t, "the DLQ handoff", named(spans, "send "+dlq))
	childOf(t, send, first)
	expect(t, first, "process "+r.q.Name, trace.SpanKindConsumer, codes.Error, map[string]any{
		"messaging.system":                           "rabbitmq",
		"messaging.operation.type":                   "process",
		"messaging.operation.name":                   "process",
		"messaging.destination.name":                 r.q.Name,
		"messaging.destination.subscription.name":    r.q.Name,
		"messaging.rabbitmq.destination.routing_key": r.q.Name,
		"messaging.message.id":                       msg,
		"lily.attempt":                               int64(1),
		"lily.path":                                  "dead-lettered",
		"lily.handler":                               "permanent",
		"lily.handoff":                               "confirmed",
		"error.type":                                 "permanent",
	})

	ch, err := r.dial().Channel()
	if err != nil {
		t.Fatal(err)
	}
	copied := get(t, ch, dlq)
	want := "00-" + send.SpanContext().TraceID().String() + "-" + send.SpanContext().SpanID().String() + "-01"
	if got := copied.Headers["traceparent"]; got != want {
		t.Fatalf("the DLQ copy's traceparent %v, want the DLQ handoff's %s", got, want)
	}

	// The re-drive, as lilydlq's: the copy's properties and headers (its
	// traceparent among them) less its failure facts, from attempt 1 again,
	// published to the queue it failed in; then the copy's ACK.
	for k := range copied.Headers {
		if strings.HasPrefix(k, "x-lily-failure-") {
			delete(copied.Headers, k)
		}
	}
	copied.Headers["x-lily-attempt"] = int64(1)
	r.mended.Store(msg, true)
	r.publish(amqp.Publishing{
		Headers: copied.Headers, ContentType: copied.ContentType, ContentEncoding: copied.ContentEncoding,
		DeliveryMode: copied.DeliveryMode, Priority: copied.Priority, CorrelationId: copied.CorrelationId,
		ReplyTo: copied.ReplyTo, MessageId: copied.MessageId, Timestamp: copied.Timestamp, Type: copied.Type,
		AppId: copied.AppId, Body: copied.Body,
	})
	if err := copied.Ack(false); err != nil {
		t.Fatal(err)
	}
	spans = r.awaitProcessed(2)
	redriven := one(t, "the re-driven message's processing", where(named(spans, "process "+r.q.Name), "lily.path", "acked"))
	childOf(t, redriven, send)
	linkedTo(t, redriven, send.SpanContext())
	for _, s := range spans {
		if s.SpanContext().TraceID() != first.SpanContext().TraceID() {
			t.Errorf("span %q is in trace %s, not the journey's %s", s.Name(), s.SpanContext().TraceID(), first.SpanContext().TraceID())
		}
	}
}

// get waits for a message in queue and takes it, unacknowledged, on ch.
func get(t *testing.T, ch *amqp.Channel, queue string) amqp.Delivery {
	t.Helper()
	for deadline := time.Now().Add(patience); ; time.Sleep(20 * time.Millisecond) {
		d, ok, err := ch.Get(queue, false)
		if err != nil {
			t.Fatalf("get %s: %v", queue, err)
		}
		if ok {
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing in %s within %s", queue, patience)
		}
	}
}
