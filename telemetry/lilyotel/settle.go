package lilyotel

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Settle starts a settle span, a child of the process span: "ack" for the
// ACK, "nack" for a NACK with (op "requeue") or without requeue, as the AMQP
// methods are named. The settlement evidence ends it, at the instant the
// runtime wrote the settlement (or found it not attempted), however late
// done is called; evidence that is not "ack sent" or "nack sent" is its
// error.type.
func (t *Telemetry) Settle(ctx context.Context, op string) func(evidence string, at time.Time) {
	start := time.Now()
	name := "ack"
	if op != "ack" {
		name = "nack"
	}
	// Without a journey (its Received panicked) the delivery's names are
	// unknown: left out, not carried empty.
	j := journeyOf(ctx)
	attrs := make([]attribute.KeyValue, 0, 9)
	attrs = append(attrs,
		rabbitmq,
		semconv.MessagingOperationTypeSettle,
		semconv.MessagingOperationName(name),
	)
	var named string
	if j != nil {
		named = j.named
		attrs = append(attrs, semconv.MessagingDestinationName(j.destination), subscription(j.queue))
		attrs = append(attrs, j.where()...)
		if j.messageID != "" {
			attrs = append(attrs, semconv.MessagingMessageID(j.messageID))
		}
	}
	if name == "nack" {
		attrs = append(attrs, attrRequeue.Bool(op == "requeue"))
	}
	ctx, span := t.tracer.Start(ctx, spanName(name, named), trace.WithSpanKind(trace.SpanKindClient), trace.WithTimestamp(start), trace.WithAttributes(attrs...))
	return func(evidence string, end time.Time) {
		// Deferred, so that it comes after the measurement (a span
		// processor's OnEnd that panics must not cost it), and comes even
		// where a meter panics.
		defer span.End(trace.WithTimestamp(end))
		measured := make([]attribute.KeyValue, 0, 4)
		measured = append(measured, semconv.MessagingOperationTypeSettle)
		if j != nil {
			j.answered(end)
			measured = append(measured, subscription(j.queue), j.measured())
		}
		span.SetAttributes(attrEvidence.String(evidence))
		if evidence != "ack sent" && evidence != "nack sent" {
			failed := semconv.ErrorTypeKey.String(evidence)
			span.SetAttributes(failed)
			span.SetStatus(codes.Error, "") // error.type says it all: the conventions ask not to repeat it
			measured = append(measured, failed)
		}
		t.m.client.Record(ctx, end.Sub(start).Seconds(), name, messagingSystem, measured...)
	}
}
