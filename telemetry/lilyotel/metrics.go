package lilyotel

import (
	"errors"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/semconv/v1.43.0/messagingconv"
)

// instruments are the metrics: the conventions' messaging metrics, and
// Lily's own under lily.*. Their attributes are few and of low cardinality:
// queues, destinations, paths and evidence words, never a message id.
type instruments struct {
	process  messagingconv.ProcessDuration
	consumed messagingconv.ClientConsumedMessages
	sent     messagingconv.ClientSentMessages
	client   messagingconv.ClientOperationDuration

	deliveries      metric.Int64Counter
	handoffs        metric.Int64Counter
	handoffDuration metric.Float64Histogram
	unresolved      metric.Int64Counter
	reconnects      metric.Int64Counter
	duplicates      metric.Int64Counter
}

// durations are the bucket boundaries the conventions advise for their
// duration histograms, in seconds; Lily's handoff duration takes them too.
var durations = metric.WithExplicitBucketBoundaries(0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10)

func newInstruments(m metric.Meter) (instruments, error) {
	var i instruments
	var errs [10]error
	i.process, errs[0] = messagingconv.NewProcessDuration(m, durations)
	i.consumed, errs[1] = messagingconv.NewClientConsumedMessages(m)
	i.sent, errs[2] = messagingconv.NewClientSentMessages(m)
	i.client, errs[3] = messagingconv.NewClientOperationDuration(m, durations)
	i.deliveries, errs[4] = m.Int64Counter("lily.deliveries", metric.WithUnit("{delivery}"),
		metric.WithDescription("Deliveries whose journey ended, by the path each took (lily.path)."))
	i.handoffs, errs[5] = m.Int64Counter("lily.handoffs", metric.WithUnit("{handoff}"),
		metric.WithDescription("Retry and DLQ handoffs, each one a journey made, by what the broker said of its copy (lily.handoff)."))
	i.handoffDuration, errs[6] = m.Float64Histogram("lily.handoff.duration", metric.WithUnit("s"), durations,
		metric.WithDescription("Duration of a handoff: from the copy's publish to the broker's answer."))
	i.unresolved, errs[7] = m.Int64Counter("lily.unresolved", metric.WithUnit("{delivery}"),
		metric.WithDescription("Deliveries not settled with evidence: the broker redelivers them."))
	i.reconnects, errs[8] = m.Int64Counter("lily.reconnects", metric.WithUnit("{session}"),
		metric.WithDescription("Consumer sessions lost, and connection attempts after a loss that failed: each line of the report's lost intake, a session lost at a stop among them, which no attempt follows."))
	i.duplicates, errs[9] = m.Int64Counter("lily.inbox.duplicates", metric.WithUnit("{delivery}"),
		metric.WithDescription("Deliveries whose message's work the inbox had committed before: ACKed without the handler."))
	return i, errors.Join(errs[:]...)
}
