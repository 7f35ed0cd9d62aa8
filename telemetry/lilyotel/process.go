package lilyotel

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/semconv/v1.43.0/messagingconv"
	"go.opentelemetry.io/otel/trace"

	"github.com/lily-mq/lily/runtime"
)

// journey is what a delivery's later calls need of its Received: it travels
// in the journey's context.
type journey struct {
	span        trace.Span
	start       time.Time
	queue       string
	destination string // messaging.destination.name, consumer side
	named       string // the destination its spans' names give: a template when not destination
	routingKey  string
	messageID   string
	creation    trace.SpanContext // the delivery's creation context, when it carried one

	mu sync.Mutex
	// last is the instant of the journey's last broker answer the runtime
	// told of: its settlement's, else its last handoff's.
	last time.Time
}

// answered notes at as the instant of the journey's latest broker answer.
func (j *journey) answered(at time.Time) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.last = at
}

type journeyKey struct{}

func journeyOf(ctx context.Context) *journey {
	j, _ := ctx.Value(journeyKey{}).(*journey)
	return j
}

// where are the attributes of the journey's spans that say where its
// delivery came from beside its destination's name: the routing key, and
// the template the spans' names give when a producer picked the key
// (conditionally required by the conventions).
func (j *journey) where() []attribute.KeyValue {
	var attrs []attribute.KeyValue
	if j.routingKey != "" {
		attrs = append(attrs, semconv.MessagingRabbitMQDestinationRoutingKey(j.routingKey))
	}
	if j.named != j.destination {
		attrs = append(attrs, semconv.MessagingDestinationTemplate(j.named))
	}
	return attrs
}

// measured is where the journey's delivery came from as its measurements
// (process, consumed, settle) carry it: messaging.destination.name where its
// values are few, else the template its spans' names give, the routing key a
// producer picked left as the placeholder. The conventions make the name
// conditionally required on those metrics when its cardinality is low, and
// the template when available.
func (j *journey) measured() attribute.KeyValue {
	if j.named == j.destination {
		return semconv.MessagingDestinationName(j.destination)
	}
	return semconv.MessagingDestinationTemplate(j.named)
}

// Received starts the delivery's process span. Its parent is the delivery's
// creation context (the conventions allow it for single messages), but
// with LinkOnly, and it links to it, as the conventions ask; without a
// creation context the span starts a trace of its own, never a child of the
// consumer's Run context. With LinkOnly nothing else the propagator reads
// from the delivery (its baggage) enters the journey's context.
func (t *Telemetry) Received(ctx context.Context, queue string, d runtime.RawDelivery) context.Context {
	start := time.Now()
	// The queue's name escaped as RawDelivery escapes the key (nameText is
	// its sanitize.Name, with its bound): a key naming a queue named with a
	// rune it escapes is then found to name it, and the destination reads
	// as a send to the queue names it.
	exchange, key, q := d.Exchange(), d.RoutingKey(), nameText(queue)
	j := &journey{start: start, queue: queue, messageID: d.MessageID(), routingKey: key,
		destination: consumedFrom(exchange, key, q), named: consumedFromLow(exchange, key, q)}
	var sc trace.SpanContext
	if t.linkOnly {
		// The span context alone, for the link: whatever else the
		// propagator reads (baggage) is the producer's to choose, and would
		// reach the handler and every publish from the journey.
		sc = trace.SpanContextFromContext(t.propagator.Extract(context.Background(), received{d}))
	} else {
		ambient := trace.SpanContextFromContext(ctx)
		ctx = t.propagator.Extract(ctx, received{d})
		// What Extract leaves in place when the delivery carries none is not its.
		if sc = trace.SpanContextFromContext(ctx); sc.Equal(ambient) {
			sc = trace.SpanContext{}
		}
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithTimestamp(start)}
	if sc.IsValid() {
		j.creation = sc
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
		if t.linkOnly {
			opts = append(opts, trace.WithNewRoot())
		}
	} else {
		opts = append(opts, trace.WithNewRoot())
	}
	attrs := make([]attribute.KeyValue, 0, 10)
	attrs = append(attrs,
		rabbitmq,
		semconv.MessagingOperationTypeProcess,
		semconv.MessagingOperationName("process"),
		semconv.MessagingDestinationName(j.destination),
		subscription(queue),
	)
	attrs = append(attrs, j.where()...)
	if j.messageID != "" {
		attrs = append(attrs, semconv.MessagingMessageID(j.messageID))
	}
	if c := d.CorrelationID(); c != "" {
		attrs = append(attrs, semconv.MessagingMessageConversationID(c))
	}
	if n := d.Attempt(); n > 0 {
		attrs = append(attrs, attrAttempt.Int(n))
	}
	if t.bodySize && d.Body() != nil {
		attrs = append(attrs, semconv.MessagingMessageBodySize(len(d.Body())))
	}
	ctx, j.span = t.tracer.Start(ctx, spanName("process", j.named), append(opts, trace.WithAttributes(attrs...))...)
	return context.WithValue(ctx, journeyKey{}, j)
}

// Settled ends the process span with the record's evidence, and counts the
// journey, in messaging.client.consumed.messages too unless it was rejected
// before any user code. Without a journey (a delivery never started whose requeue was not
// sent, of which the runtime tells Settled alone) it is counted, with no
// span.
//
// The processing of the delivery, its span and messaging.process.duration
// alike, runs from the span's start to the journey's settlement (the ACK or
// NACK written, or found not attempted), or to its last handoff's answer
// where no settlement followed: the instants the runtime told the ends of.
// What the runtime does after it (the observer, the hook's ends, this call)
// is not the processing's, so the span ends at that instant, with the
// record it carries, and the measurement is its duration, as the
// conventions ask of a metric reported beside its span. A journey that made
// neither ends here.
func (t *Telemetry) Settled(ctx context.Context, r runtime.Record) {
	j := journeyOf(ctx)
	failed := failure(r)
	var end time.Time
	if j != nil {
		j.mu.Lock()
		end = j.last
		j.mu.Unlock()
		if end.IsZero() {
			end = time.Now()
		}
		if j.span.IsRecording() {
			annotate(j.span, r, failed)
		}
		// Last, and before any measurement, deferred: a span processor's
		// OnEnd runs in End (a synchronous exporter exports there), and
		// one that panics must not cost the measurements; a meter that
		// panics must not leave the span open.
		defer j.span.End(trace.WithTimestamp(end))
	}
	t.count(ctx, r)
	if j == nil {
		return
	}
	sub := subscription(r.Queue)
	if r.Rejection == "" {
		// Delivered to the application, as the conventions count consumed
		// messages: a delivery rejected before any user code (poison,
		// oversized, quarantined, unsupported) is not, and the rejection
		// is known only now. lily.deliveries counts every journey.
		t.m.consumed.Add(ctx, 1, "process", messagingSystem, sub, j.measured())
	}
	if failed != "" {
		t.m.process.Record(ctx, end.Sub(j.start).Seconds(), "process", messagingSystem, sub, j.measured(), semconv.ErrorTypeKey.String(failed))
	} else {
		t.m.process.Record(ctx, end.Sub(j.start).Seconds(), "process", messagingSystem, sub, j.measured())
	}
}

// annotate adds the record's evidence to a process span; a failed journey's
// reason is the span's status description.
func annotate(span trace.Span, r runtime.Record, failed string) {
	attrs := make([]attribute.KeyValue, 0, 7)
	attrs = append(attrs, attrPath.String(string(r.Path)))
	if r.Attempt > 0 {
		attrs = append(attrs, attrAttempt.Int(r.Attempt))
	}
	for _, a := range [...]struct {
		key attribute.Key
		val string
	}{{attrHandler, r.Handler}, {attrCommit, r.Commit}, {attrRejection, r.Rejection}, {attrHandoff, r.Handoff}} {
		if a.val != "" {
			attrs = append(attrs, a.key.String(a.val))
		}
	}
	if failed != "" {
		attrs = append(attrs, semconv.ErrorTypeKey.String(failed))
		span.SetStatus(codes.Error, r.Reason)
	}
	span.SetAttributes(attrs...)
}

// count adds the journey to Lily's counters; its handoffs were counted as
// each was answered. Each is asked first whether it records: their
// attribute sets cost allocations that a no-op meter need not pay.
func (t *Telemetry) count(ctx context.Context, r runtime.Record) {
	sub := subscription(r.Queue)
	if t.m.deliveries.Enabled(ctx) {
		t.m.deliveries.Add(ctx, 1, metric.WithAttributes(sub, attrPath.String(string(r.Path))))
	}
	if r.Path == runtime.PathUnresolved && t.m.unresolved.Enabled(ctx) {
		t.m.unresolved.Add(ctx, 1, metric.WithAttributes(sub))
	}
	if r.Commit == "duplicate" && t.m.duplicates.Enabled(ctx) {
		t.m.duplicates.Add(ctx, 1, metric.WithAttributes(sub))
	}
}

// failure is error.type for a journey: the class of failure it ended with,
// in the record's own words (few, as error.type must be), or "" when it
// succeeded. The first that applies: the rejection, the handler's failure,
// the commit's, the handoff's, or a path other than acked (a scope, cleanup
// or after_delivery failure; an unsettled delivery).
func failure(r runtime.Record) string {
	switch {
	case r.Rejection != "":
		return r.Rejection
	case r.Handler != "" && r.Handler != "ok" && r.Handler != "completed earlier":
		return r.Handler
	case r.Commit == "failed" || r.Commit == "ambiguous" || r.Commit == "deferred":
		return r.Commit
	case r.Handoff != "" && r.Handoff != "confirmed":
		return r.Handoff
	case r.Path != runtime.PathAcked:
		return string(r.Path)
	}
	return ""
}

// messagingSystem is messaging.system as the messagingconv instruments take it.
var messagingSystem = messagingconv.SystemRabbitMQ
