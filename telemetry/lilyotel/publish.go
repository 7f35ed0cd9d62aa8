package lilyotel

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/internal/sanitize"
	"github.com/lily-mq/lily/runtime"
)

// Publish starts a send span, a child of ctx's span (the process span, for a
// handoff), and writes its context into p's headers as the message's
// creation context: a retry or DLQ copy, which carries the original's
// headers, gets its own. A message whose producer wrote a creation context
// of its own keeps it, as the conventions ask, and the span links to it;
// its context is then not the creation context, so its kind is CLIENT, not
// PRODUCER (the conventions' span kind table). The broker's answer ends
// it, at the instant the runtime knew it, however late done is called (a
// handoff's, once the original is settled). A propagator that panics ends
// it at once, failed, and Publish panics on (inject).
func (t *Telemetry) Publish(ctx context.Context, exchange, routingKey string, p *runtime.Publishing) func(evidence string, at time.Time) {
	start := time.Now()
	if p.Headers == nil {
		p.Headers = amqp.Table{}
	}
	exchange, routingKey = nameText(exchange), nameText(routingKey)
	dest := sentTo(exchange, routingKey)
	// A handoff: the runtime shows failure facts on its copies alone, not
	// on a Send that forwards one.
	handoff := exchange == "" && p.Headers[envelope.HeaderFailureQueue] != nil
	where, low := sentToLow(exchange, routingKey, handoff)
	attrs := make([]attribute.KeyValue, 0, 8)
	attrs = append(attrs,
		rabbitmq,
		semconv.MessagingOperationTypeSend,
		semconv.MessagingOperationName("send"),
		semconv.MessagingDestinationName(dest),
	)
	if routingKey != "" {
		attrs = append(attrs, semconv.MessagingRabbitMQDestinationRoutingKey(routingKey))
	}
	if where.Key == semconv.MessagingDestinationTemplateKey {
		// The span's name gives the template: the conventions ask for it.
		attrs = append(attrs, where)
	}
	if p.MessageId != "" {
		attrs = append(attrs, semconv.MessagingMessageID(idText(p.MessageId)))
	}
	if p.CorrelationId != "" {
		attrs = append(attrs, semconv.MessagingMessageConversationID(idText(p.CorrelationId)))
	}
	if t.bodySize {
		attrs = append(attrs, semconv.MessagingMessageBodySize(len(p.Body)))
	}
	custom := t.customContext(ctx, p)
	kind := trace.SpanKindProducer
	if custom.IsValid() {
		kind = trace.SpanKindClient
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(kind), trace.WithTimestamp(start), trace.WithAttributes(attrs...)}
	if custom.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: custom}))
	}
	ctx, span := t.tracer.Start(ctx, spanName("send", low), opts...)
	if !custom.IsValid() {
		t.inject(ctx, span, p.Headers)
	}
	j := journeyOf(ctx)
	return func(evidence string, end time.Time) {
		// Deferred, so that it comes after the measurements (a span
		// processor's OnEnd that panics must not cost them), and comes
		// even where a meter panics.
		defer span.End(trace.WithTimestamp(end))
		took := end.Sub(start)
		if j != nil && handoff {
			j.answered(end)
			t.countHandoff(ctx, j.queue, routingKey, evidence, took)
		}
		span.SetAttributes(attrEvidence.String(evidence))
		if evidence == "confirmed" {
			t.m.sent.Add(ctx, 1, "send", messagingSystem, where)
			t.m.client.Record(ctx, took.Seconds(), "send", messagingSystem, where, semconv.MessagingOperationTypeSend)
		} else {
			failed := semconv.ErrorTypeKey.String(evidence)
			span.SetAttributes(failed)
			span.SetStatus(codes.Error, "") // error.type says it all: the conventions ask not to repeat it
			t.m.sent.Add(ctx, 1, "send", messagingSystem, where, failed)
			t.m.client.Record(ctx, took.Seconds(), "send", messagingSystem, where, semconv.MessagingOperationTypeSend, failed)
		}
	}
}

// maxPanicText bounds a panic's text in a span's status description, as the
// runtime bounds a failure's cause.
const maxPanicText = 200

// inject writes ctx's span context into h, as the message's creation
// context, for span, ctx's send span. A propagator that panics (in Fields
// or in Inject) ends span at once, failed, before the panic goes on: the
// runtime drops a Publish that panicked, the done it would have returned
// too, and nothing else would end the span. What the broker says of the
// message is not told to lilyotel then, so the send is in none of the
// send's measurements.
func (t *Telemetry) inject(ctx context.Context, span trace.Span, h amqp.Table) {
	defer func() {
		if v := recover(); v != nil {
			span.SetAttributes(semconv.ErrorTypeOther)
			span.SetStatus(codes.Error, "propagator panicked: "+sanitize.Text(fmt.Sprint(v), maxPanicText))
			span.End()
			panic(v)
		}
	}()
	// The fields are all ours now: a producer's tracestate (or baggage)
	// left beside our traceparent would belong to another trace.
	for _, f := range t.propagator.Fields() {
		delete(h, f)
	}
	t.propagator.Inject(ctx, table(h))
	trimTracestate(h)
}

// maxTracestateMember is the size of a tracestate member the W3C has
// removed first when the header must be cut.
const maxTracestateMember = 128

// trimTracestate cuts the tracestate header in h to envelope.MaxTracestate
// bytes, the longest a Lily consumer's guard counts apart from the
// producer's headers. The span inherits its creation context's, which a
// producer may have written up to the guard's 4,096 bytes; longer than
// MaxTracestate, the header would be one of the application's own 64 on
// every message it sends, and poison one at the bound. Whole members go,
// as the W3C trace context has a vendor cut it (§3.3.1.5, tracestate
// limits): those over 128 characters first, then from the end.
func trimTracestate(h amqp.Table) {
	s, _ := h[tracestate].(string)
	if len(s) <= envelope.MaxTracestate {
		return
	}
	members := strings.Split(s, ",")
	size := len(s)
	for _, longest := range [...]int{maxTracestateMember, -1} {
		for i := len(members) - 1; i >= 0 && size > envelope.MaxTracestate; i-- {
			if len(members[i]) > longest {
				size -= len(members[i]) + 1 // and its comma
				members = slices.Delete(members, i, i+1)
			}
		}
	}
	if len(members) == 0 {
		delete(h, tracestate)
		return
	}
	h[tracestate] = strings.Join(members, ",")
}

// tracestate is the W3C trace context's header that trimTracestate cuts.
const tracestate = "tracestate"

// countHandoff adds a handoff to lily.handoffs and its duration to
// lily.handoff.duration: each one a journey made, a retry handoff that
// failed and the DLQ's that follows it at a quorum queue's delivery limit
// both, which the journey's record, naming its last, cannot tell. Each is
// asked first whether it records: their attribute sets cost allocations
// that a no-op meter need not pay.
func (t *Telemetry) countHandoff(ctx context.Context, queue, destination, evidence string, took time.Duration) {
	counted, timed := t.m.handoffs.Enabled(ctx), t.m.handoffDuration.Enabled(ctx)
	if !counted && !timed {
		return
	}
	attrs := metric.WithAttributes(subscription(queue), semconv.MessagingDestinationName(destination), attrHandoff.String(evidence))
	if counted {
		t.m.handoffs.Add(ctx, 1, attrs)
	}
	if timed {
		t.m.handoffDuration.Record(ctx, took.Seconds(), attrs)
	}
}

// customContext is the creation context a producer wrote into p itself,
// which is not to be replaced; the zero SpanContext when p carries none, or
// carries only its original's (a handoff copies the delivery's headers), or
// one the propagator cannot read.
func (t *Telemetry) customContext(ctx context.Context, p *runtime.Publishing) trace.SpanContext {
	sc := trace.SpanContextFromContext(t.propagator.Extract(context.Background(), table(p.Headers)))
	if j := journeyOf(ctx); j != nil && sc.Equal(j.creation) {
		return trace.SpanContext{}
	}
	return sc
}

// sentToLow is the destination a publish's measurements carry, and the one
// its span name gives. The conventions allow messaging.destination.name
// there only when it has few values: the queue a handoff names (Lily picked
// it: a retry bucket or the DLQ), or an exchange alone. A routing key a
// producer picks may have many (a reply queue per request, an id in the
// key), so the name goes as messaging.destination.template, the template it
// is built from (as the conventions mean one): "{exchange}:{routing key}",
// or "{routing key}" alone through the default exchange, whose name is the
// key. Spans keep the whole name in their attributes.
func sentToLow(exchange, routingKey string, handoff bool) (attribute.KeyValue, string) {
	if handoff || routingKey == "" {
		dest := sentTo(exchange, routingKey)
		return semconv.MessagingDestinationName(dest), dest
	}
	template := sentTo(exchange, "{routing key}")
	return semconv.MessagingDestinationTemplate(template), template
}
