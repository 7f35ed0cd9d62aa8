package lilyotel_test

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/runtime"
)

// A Publisher's Send starts the trace its message's consumer continues: the
// send span is a child of the caller's span, and the process span a child
// of the send span, linked to it. A send that no queue takes ends in error
// with the broker's word. A message whose producer wrote its own creation
// context keeps it: the send span links to it, and the consumer follows it;
// the retry copy, which carries the original's headers, gets its handoff's.
func TestBrokerPublisherStartsTheTrace(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.start(nil)
	p, err := runtime.NewPublisher(runtime.Config{URLs: []string{r.url}, Telemetry: r.tel}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, checkout := r.tp.Tracer("test").Start(context.Background(), "checkout")
	sent := id("sent")
	if err := p.Send(ctx, runtime.Message{RoutingKey: r.q.Name, Publishing: message(sent, "ok")}); err != nil {
		t.Fatal(err)
	}
	lost := runtime.Message{Exchange: "amq.direct", RoutingKey: r.q.Name + ".nowhere", Publishing: message(id("lost"), "ok")}
	if err := p.Send(ctx, lost); !errors.Is(err, runtime.ErrReturned) {
		t.Fatalf("a send no queue takes: %v, want ErrReturned", err)
	}
	checkout.End()
	foreign := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled})
	own := id("own")
	msg := message(own, "fail-once")
	msg.Headers["traceparent"] = "00-" + foreign.TraceID().String() + "-" + foreign.SpanID().String() + "-01"
	if err := p.Send(context.Background(), runtime.Message{RoutingKey: r.q.Name, Publishing: msg}); err != nil {
		t.Fatal(err)
	}
	spans := r.awaitProcessed(3) // sent, and own twice

	q := r.q.Name
	// The routing key the producer picked is in the attributes, not the name.
	send := one(t, "the send", where(named(spans, "send {routing key}"), "messaging.message.id", sent))
	expect(t, send, "send {routing key}", trace.SpanKindProducer, codes.Unset, map[string]any{
		"messaging.system":                           "rabbitmq",
		"messaging.operation.type":                   "send",
		"messaging.operation.name":                   "send",
		"messaging.destination.name":                 q,
		"messaging.destination.template":             "{routing key}",
		"messaging.rabbitmq.destination.routing_key": q,
		"messaging.message.id":                       sent,
		"lily.evidence":                              "confirmed",
	})
	childOf(t, send, one(t, "checkout", named(spans, "checkout")))
	process := one(t, "the sent message's processing", where(named(spans, "process "+q), "messaging.message.id", sent))
	childOf(t, process, send)
	linkedTo(t, process, send.SpanContext())

	returned := one(t, "the returned send", named(spans, "send amq.direct:{routing key}"))
	expect(t, returned, "send amq.direct:{routing key}", trace.SpanKindProducer, codes.Error, map[string]any{
		"messaging.system":                           "rabbitmq",
		"messaging.operation.type":                   "send",
		"messaging.operation.name":                   "send",
		"messaging.destination.name":                 "amq.direct:" + q + ".nowhere",
		"messaging.destination.template":             "amq.direct:{routing key}",
		"messaging.rabbitmq.destination.routing_key": q + ".nowhere",
		"messaging.message.id":                       lost.MessageId,
		"lily.evidence":                              "returned",
		"error.type":                                 "returned",
	})
	childOf(t, returned, one(t, "checkout", named(spans, "checkout")))

	// The producer's own creation context is kept, and followed.
	ownSend := one(t, "the send with its own context", where(named(spans, "send {routing key}"), "messaging.message.id", own))
	linkedTo(t, ownSend, foreign)
	// Its context is not the creation context: a CLIENT span, by the
	// conventions' span kind table.
	if ownSend.SpanKind() != trace.SpanKindClient {
		t.Errorf("the send with its producer's own context is %s, want client", ownSend.SpanKind())
	}
	ownProcesses := where(named(spans, "process "+q), "messaging.message.id", own)
	ownProcess := one(t, "its first attempt", where(ownProcesses, "lily.attempt", int64(1)))
	if got := ownProcess.Parent(); got.TraceID() != foreign.TraceID() || got.SpanID() != foreign.SpanID() {
		t.Errorf("the process span's parent is %s/%s, want the producer's own %s/%s", got.TraceID(), got.SpanID(), foreign.TraceID(), foreign.SpanID())
	}
	linkedTo(t, ownProcess, foreign)
	handoff := one(t, "its retry handoff", named(spans, "send "+r.bucket()))
	childOf(t, handoff, ownProcess)
	if len(handoff.Links()) != 0 {
		t.Errorf("the handoff's send span links to %v: the copied creation context is the original's, not a producer's own", handoff.Links())
	}
	retry := one(t, "its retry", where(ownProcesses, "lily.attempt", int64(2)))
	childOf(t, retry, handoff)
	linkedTo(t, retry, handoff.SpanContext())

	// A routing key the producer picks may take many values: the metric
	// names the exchange, with the key as a placeholder.
	rm := r.collect()
	if n := sum(rm, "messaging.client.sent.messages", attribute.String("messaging.destination.template", "amq.direct:{routing key}"), attribute.String("error.type", "returned")); n != 1 {
		t.Errorf("sent messages to amq.direct:{routing key} that were returned: %d, want 1", n)
	}
	if n := sum(rm, "messaging.client.sent.messages", attribute.String("messaging.destination.template", "{routing key}")); n != 2 {
		t.Errorf("sent messages to {routing key}: %d, want 2", n)
	}
}

// A copy a handler received and forwards with its headers through a
// Publisher, to a queue it picks (a reply queue per request), is a send like
// any other, not a handoff: its span's name and its measurements give the
// routing key as a placeholder, never the queue's name.
func TestBrokerForwardedCopyIsNotAHandoff(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	p, err := runtime.NewPublisher(runtime.Config{URLs: []string{r.url}, Telemetry: r.tel}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	msg := message(id("forwarded"), "ok")
	msg.Headers[envelope.HeaderFailureQueue] = r.q.Name
	msg.Headers[envelope.HeaderFailureReason] = "retryable failure on attempt 1 of 2"
	if err := p.Send(context.Background(), runtime.Message{RoutingKey: r.q.Name, Publishing: msg}); err != nil {
		t.Fatal(err)
	}
	one(t, "the forwarded copy's send", named(r.spans.Ended(), "send {routing key}"))
	rm := r.collect()
	if n := sum(rm, "messaging.client.sent.messages", attribute.String("messaging.destination.template", "{routing key}")); n != 1 {
		t.Errorf("sent messages to {routing key}: %d, want 1", n)
	}
	if n := sum(rm, "messaging.client.sent.messages", attribute.String("messaging.destination.name", r.q.Name)); n != 0 {
		t.Errorf("sent messages measured by the queue's name: %d, want 0", n)
	}
}
