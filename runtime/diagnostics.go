package runtime

import (
	"context"
	"log/slog"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Path is where a delivery went, as far as the evidence shows.
type Path string

// The paths a delivery can take.
const (
	PathAcked              Path = "acked"
	PathRetried            Path = "retried"       // confirmed handoff to a retry bucket, then ACK
	PathDeadLettered       Path = "dead-lettered" // confirmed handoff to the DLQ, then ACK
	PathBrokerDeadLettered Path = "broker-dead-lettered"
	PathRequeued           Path = "requeued" // the one bounded NACK with requeue
	PathNotStarted         Path = "not-started"
	PathUnresolved         Path = "unresolved"
)

// Record is the evidence of one delivery, written when its journey ends.
// Every string in it is sanitized and bounded.
type Record struct {
	Queue       string             `json:"queue"`
	MessageID   string             `json:"message_id"`
	Type        string             `json:"type,omitempty"`
	Version     int                `json:"version,omitempty"`
	Attempt     int                `json:"attempt"`
	Redelivered bool               `json:"redelivered"`
	Path        Path               `json:"path"`
	Reason      string             `json:"reason"`
	Rejection   Rejection          `json:"rejection,omitempty"`
	Handler     HandlerResult      `json:"handler"`
	Commit      CommitEvidence     `json:"commit"`
	Handoff     HandoffEvidence    `json:"handoff"`
	Settlement  SettlementEvidence `json:"settlement"`
	Duration    time.Duration      `json:"duration_ns"`
}

func newRecord(q QueueSpec, d *amqp.Delivery, env *Envelope, attempt int, o Outcome, plan Plan, took time.Duration) Record {
	rec := Record{
		Queue: q.Name, MessageID: sanitize(d.MessageId, 128), Attempt: attempt, Redelivered: d.Redelivered,
		Reason: failureReason(plan, o), Rejection: o.Rejection, Handler: o.Handler, Commit: o.Commit,
		Handoff: o.Handoff, Settlement: o.Settlement, Duration: took,
	}
	if env != nil {
		rec.Type, rec.Version = env.Type, env.Version
	}
	rec.Path = pathOf(q, o)
	return rec
}

func pathOf(q QueueSpec, o Outcome) Path {
	switch {
	case o.Settlement.Status == NackSent && o.Settlement.Requeue:
		return PathRequeued
	case o.Settlement.Status == NackSent:
		return PathBrokerDeadLettered
	case o.Settlement.Status != AckSent:
		return PathUnresolved
	case o.Handoff.Status != HandoffConfirmed:
		return PathAcked
	case o.Handoff.Destination == q.DeadLetterQueue:
		return PathDeadLettered
	}
	return PathRetried
}

// record logs the delivery's evidence with stable keys, hands it to the
// configured observer and adds it to the report.
func (c *Consumer) record(r *run, rec Record) {
	level := slog.LevelInfo
	switch rec.Path {
	case PathAcked:
		level = slog.LevelDebug
	case PathUnresolved, PathRequeued:
		level = slog.LevelWarn
	}
	c.cfg.Logger.LogAttrs(context.Background(), level, "lily delivery",
		slog.String("queue", rec.Queue),
		slog.String("message_id", rec.MessageID),
		slog.String("type", rec.Type),
		slog.Int("version", rec.Version),
		slog.Int("attempt", rec.Attempt),
		slog.String("path", string(rec.Path)),
		slog.String("reason", rec.Reason),
		slog.String("handoff", rec.Handoff.Status.String()),
		slog.String("handoff_detail", rec.Handoff.Detail),
		slog.String("settlement", rec.Settlement.Status.String()),
		slog.String("settlement_detail", rec.Settlement.Detail),
		slog.Duration("duration", rec.Duration),
	)
	if c.cfg.Observe != nil {
		c.cfg.Observe(rec)
	}
	r.report.add(rec)
}
