// Package lilyotel traces and measures Lily's consumers and publishers with
// OpenTelemetry: it is a runtime.Telemetry. Set it in a consumer's or a
// publisher's runtime.Config:
//
//	tel, err := lilyotel.New(lilyotel.Options{})
//	...
//	cfg := runtime.Config{Telemetry: tel}
//
// Spans and metrics follow the OpenTelemetry semantic conventions v1.43.0
// (semconv package go.opentelemetry.io/otel/semconv/v1.43.0, schema
// https://opentelemetry.io/schemas/1.43.0): the messaging spans, the messaging
// metrics and the RabbitMQ page of that version. Those conventions are still
// in development; this package emits v1.43.0's and no other.
//
// Each delivery gets a CONSUMER span "process {destination}" from the moment
// the guard has read it to its settlement; each retry or DLQ copy, and each
// Send of a runtime.Publisher, a PRODUCER span "send {destination}", whose
// context is written into the message's headers (W3C Trace Context) as its
// creation context (a Send whose message carries its producer's own creation
// context keeps it, and gets a CLIENT span that links to it); each ACK or NACK
// of the original a CLIENT span "ack {destination}" or "nack {destination}". A
// process span's parent is the delivery's creation context, and it links to it
// too, so that a message's first attempt, its retries, its DLQ copy and a
// re-drive of that copy are one trace. The creation context is read only
// through runtime.RawDelivery's Header, which the guard has bounded; a
// delivery the guard rejected reads none, so its span starts a trace of its
// own. Span names and metrics give a routing key a producer picked as the
// placeholder "{routing key}": it may take many values.
//
// docs/telemetry.md in the Lily repository lists every span attribute and
// metric, and shows the metrics scraped by Prometheus.
package lilyotel
