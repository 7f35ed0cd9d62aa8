package lilyotel

import (
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/lily-mq/lily/runtime"
)

// scope names this package to the providers, as its import path.
const scope = "github.com/lily-mq/lily/telemetry/lilyotel"

// Options says where a Telemetry's spans and metrics go. The zero value
// takes OpenTelemetry's global providers and W3C Trace Context.
type Options struct {
	// TracerProvider makes the spans; otel.GetTracerProvider() when nil.
	TracerProvider trace.TracerProvider
	// MeterProvider makes the instruments; otel.GetMeterProvider() when nil.
	MeterProvider metric.MeterProvider
	// Propagator reads a delivery's creation context from its headers and
	// writes each publish's into them; W3C Trace Context
	// (propagation.TraceContext) when nil. Not the global propagator, which
	// propagates nothing until a program sets one: the journeys would break
	// without a word. Its fields are its own: a publish that carries no
	// creation context of its own has them all written from its context,
	// and a header of theirs the message came with (a baggage header
	// written by hand) dropped; put baggage in the context instead.
	Propagator propagation.TextMapPropagator
	// BodySize records messaging.message.body.size on process and send
	// spans, which the conventions make opt-in. On a process span it costs
	// a copy of the payload (RawDelivery.Body's, which the handler shares
	// when it asks too), held until the delivery is settled.
	BodySize bool
	// LinkOnly starts each process span as the root of a trace of its own
	// that links to the delivery's creation context, instead of as its
	// child. A producer then chooses neither the consumer's trace nor,
	// through a parent-based sampler, whether its spans are sampled: set it
	// where producers are not trusted (another team's, a foreign envelope).
	// A retry or DLQ copy's next attempt starts a trace of its own too,
	// linked to the handoff's send: nothing a producer could not forge tells
	// Lily's copy from its message. A journey is then one trace per attempt.
	// Nor does a producer choose the journey's baggage: only the span
	// context is read from a delivery, for the link, and nothing else the
	// propagator reads reaches the handler's context.
	LinkOnly bool
}

// Telemetry is a runtime.Telemetry that makes OpenTelemetry spans and
// metrics of each delivery's journey and each publish. It is safe for
// concurrent use, and one may serve every consumer and publisher of a
// process.
type Telemetry struct {
	tracer     trace.Tracer
	propagator propagation.TextMapPropagator
	bodySize   bool
	linkOnly   bool
	m          instruments
}

var _ runtime.Telemetry = (*Telemetry)(nil)

// New returns a Telemetry that uses o's providers and propagator. Its error
// is a meter's refusal to make one of the instruments.
func New(o Options) (*Telemetry, error) {
	tp := o.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	mp := o.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	prop := o.Propagator
	if prop == nil {
		prop = propagation.TraceContext{}
	}
	m, err := newInstruments(mp.Meter(scope, metric.WithSchemaURL(semconv.SchemaURL)))
	if err != nil {
		return nil, err
	}
	return &Telemetry{
		tracer:     tp.Tracer(scope, trace.WithSchemaURL(semconv.SchemaURL)),
		propagator: prop,
		bodySize:   o.BodySize,
		linkOnly:   o.LinkOnly,
		m:          m,
	}, nil
}

// Attributes of Lily's own, beside the conventions' (docs/telemetry.md).
const (
	attrPath      = attribute.Key("lily.path")
	attrAttempt   = attribute.Key("lily.attempt")
	attrHandler   = attribute.Key("lily.handler")
	attrCommit    = attribute.Key("lily.commit")
	attrRejection = attribute.Key("lily.rejection")
	attrHandoff   = attribute.Key("lily.handoff")
	attrEvidence  = attribute.Key("lily.evidence")
	attrRequeue   = attribute.Key("lily.requeue")
)

// rabbitmq is messaging.system, on every span and measurement.
var rabbitmq = semconv.MessagingSystemRabbitMQ
