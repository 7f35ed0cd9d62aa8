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
	j := journeyOf(ctx)
	var queue, dest, named, id string
	if j != nil {
		queue, dest, named, id = j.queue, j.destination, j.named, j.messageID
	}
	attrs := make([]attribute.KeyValue, 0, 9)
	attrs = append(attrs,
		rabbitmq,
		semconv.MessagingOperationTypeSettle,
		semconv.MessagingOperationName(name),
		semconv.MessagingDestinationName(dest),
		semconv.MessagingDestinationSubscriptionName(queue),
	)
	if j != nil {
		attrs = append(attrs, j.where()...)
	}
	if id != "" {
		attrs = append(attrs, semconv.MessagingMessageID(id))
	}
	if name == "nack" {
		attrs = append(attrs, attrRequeue.Bool(op == "requeue"))
	}
	ctx, span := t.tracer.Start(ctx, spanName(name, named), trace.WithSpanKind(trace.SpanKindClient), trace.WithTimestamp(start), trace.WithAttributes(attrs...))
	return func(evidence string, end time.Time) {
		if j != nil {
			j.answered(end)
		}
		span.SetAttributes(attrEvidence.String(evidence))
		measured := make([]attribute.KeyValue, 0, 4)
		measured = append(measured, semconv.MessagingDestinationSubscriptionName(queue), semconv.MessagingOperationTypeSettle)
		if j != nil {
			measured = append(measured, j.measured())
		}
		if evidence != "ack sent" && evidence != "nack sent" {
			failed := semconv.ErrorTypeKey.String(evidence)
			span.SetAttributes(failed)
			span.SetStatus(codes.Error, "") // error.type says it all: the conventions ask not to repeat it
			measured = append(measured, failed)
		}
		t.m.client.Record(ctx, end.Sub(start).Seconds(), name, messagingSystem, measured...)
		span.End(trace.WithTimestamp(end))
	}
}
