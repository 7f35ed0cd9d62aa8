package runtime

import (
	"cmp"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/internal/sanitize"
	"github.com/lily-mq/lily/runtime/internal/decide"
	"github.com/lily-mq/lily/runtime/internal/guard"
	"github.com/lily-mq/lily/runtime/internal/outcome"
)

// Path is where a delivery went: what became of the original delivery at the
// broker, and for a handoff where its copy went. It is the settlement
// evidence; Record.Reason says why.
type Path string

// The paths a delivery can take.
const (
	PathAcked              Path = "acked"
	PathRetried            Path = "retried"       // confirmed handoff to a retry bucket, then ACK
	PathDeadLettered       Path = "dead-lettered" // confirmed handoff to the DLQ, then ACK
	PathBrokerDeadLettered Path = "broker-dead-lettered"
	PathRequeued           Path = "requeued"    // the one bounded NACK with requeue
	PathNotStarted         Path = "not-started" // requeued before it started: at shutdown, a recycle, or its budget spent waiting
	PathUnresolved         Path = "unresolved"  // not settled with evidence: the broker redelivers it
)

// Record is the evidence of one delivery, written when its journey ends. The
// kinds of evidence are kept apart: the handler's result, what the inbox and
// its database said, what the broker said of a handoff, and (Path) what
// became of the original delivery. Each is a word of its own vocabulary,
// below; Reason gives the detail. Every string in it is sanitized and bounded.
type Record struct {
	Queue string `json:"queue"`
	// MessageID is the key the inbox claims the message by (see
	// lilytest.Inbox), whole: at most 265 bytes, which the guard passed as
	// printable ASCII. For a delivery the guard refused, or has not read
	// (one requeued before it started on a queue without an OrderKey), it
	// is the delivery's message_id, sanitized and cut at 128 bytes.
	MessageID   string `json:"message_id"`
	Type        string `json:"type,omitempty"`
	Version     int    `json:"version,omitempty"`
	Attempt     int    `json:"attempt"`
	Redelivered bool   `json:"redelivered"`
	Path        Path   `json:"path"`
	// Reason is why the delivery took its path, with the failing step's
	// detail: after a failed handoff, what the broker or the publisher said
	// of it, then the handler's cause.
	Reason string `json:"reason"`
	// Rejection is why the delivery never reached a handler: "oversized",
	// "quarantined" (the AMQP client could not decode its headers),
	// "poison" or "unsupported"; empty when it was not rejected.
	Rejection string `json:"rejection,omitempty"`
	// Handler is the handler's result: "ok", "retryable", "permanent",
	// "panicked", "timed out" (it may still be running: it is then abandoned,
	// and its transaction rolled back when it returns), "cancelled" (by the
	// forced shutdown, which costs no retry), "abandoned" (still running at
	// the final abort) or "not started" (the consumer aborted first);
	// "completed earlier" when an earlier delivery of this
	// attempt did the work (its ACK was lost) and the record of it settled
	// this one; empty when it did not run.
	Handler string `json:"handler,omitempty"`
	// Commit is what the inbox and its database said: "committed", "failed",
	// "ambiguous" (the outcome is unknown), "rolled back" (the handler
	// failed), "rollback pending" (the handler was abandoned and may still
	// use its transaction, rolled back once it returns), "duplicate" (the
	// work had committed before) or "deferred" (the claim could not be
	// decided now); empty without an inbox.
	Commit string `json:"commit,omitempty"`
	// Handoff is what the broker said of the copy published to Destination:
	// "confirmed", "returned" (unroutable), "nacked", "timed out" or
	// "failed"; empty when there was no handoff.
	Handoff     string `json:"handoff,omitempty"`
	Destination string `json:"destination,omitempty"`
	// Duration is the journey's, from receipt to the end of its settlement.
	Duration time.Duration `json:"duration_ns"`
}

// newRecord is the record of delivery d, whose message is named id.
func newRecord(q QueueSpec, d *amqp.Delivery, id string, env *guard.Envelope, attempt int, o outcome.Outcome, plan decide.Plan, took time.Duration) Record {
	rec := Record{
		Queue: q.Name, MessageID: id, Attempt: attempt, Redelivered: d.Redelivered,
		Path: pathOf(q, o), Reason: decide.FailureReason(plan, o), Handler: handlerWord(o), Commit: commitWord(o),
		Handoff: handoffWord(o.Handoff), Destination: o.Handoff.Destination, Duration: took,
	}
	if o.Rejection != outcome.NotRejected {
		rec.Rejection = o.Rejection.String()
	}
	if env != nil {
		rec.Type, rec.Version = env.Type, env.Version
	}
	return rec
}

// soFar is the record of a delivery still in the pipeline, for AfterDelivery.
func (c *Consumer) soFar(rd RawDelivery, o outcome.Outcome) Record {
	return Record{
		Queue: c.spec.Name, MessageID: idText(rd.d, rd.env), Type: rd.env.Type, Version: rd.env.Version,
		Attempt: rd.env.Attempt, Redelivered: rd.d.Redelivered, Reason: sanitize.Text(cmp.Or(decide.FailureDetail(o), o.Reason), decide.MaxCause),
		Handler: handlerWord(o), Commit: commitWord(o),
	}
}

// maxIDText bounds a message id as records and logs quote one the guard did
// not pass.
const maxIDText = 128

// idText is how records, logs and the report name the message of delivery
// d. Once the guard has read its envelope (env), that is the key the inbox
// claims it by, whole, so that a record leads to the inbox's row and
// lilytest.Inbox's Defer and FailCommit take Record.MessageID: the guard
// passed it printable and at most guard.MaxKeyBytes long (the sanitizing
// changes nothing). Else (the guard refused d, or has not read it: a
// delivery not started on a queue without an OrderKey) it is d's
// message_id as it came, sanitized and cut at maxIDText.
func idText(d *amqp.Delivery, env *guard.Envelope) string {
	if env != nil {
		return sanitize.Text(env.Key(), guard.MaxKeyBytes)
	}
	return sanitize.Text(d.MessageId, maxIDText)
}

func pathOf(q QueueSpec, o outcome.Outcome) Path {
	switch {
	case o.Settlement.Status == outcome.NackSent && o.Settlement.Requeue:
		return PathRequeued
	case o.Settlement.Status == outcome.NackSent:
		return PathBrokerDeadLettered
	case o.Settlement.Status != outcome.AckSent:
		return PathUnresolved
	case o.Handoff.Status != outcome.HandoffConfirmed:
		return PathAcked
	case o.Handoff.Destination == q.Topology.DeadLetterQueue:
		return PathDeadLettered
	}
	return PathRetried
}

func handlerWord(o outcome.Outcome) string {
	h := o.Handler
	switch {
	case h.TimedOut:
		return "timed out"
	case h.Abandoned:
		return "abandoned"
	case h.Panicked:
		return "panicked"
	case h.Cancelled && !h.Ran:
		return "not started"
	case h.Cancelled:
		return "cancelled"
	case o.CompletedEarlier:
		return "completed earlier"
	case !h.Ran:
		return "" // rejected, deferred, a duplicate, or its scope did not open
	case h.Kind != 0:
		return h.Kind.String()
	}
	return "ok"
}

func commitWord(o outcome.Outcome) string {
	switch {
	case o.Claim == outcome.InboxDuplicate, o.Claim == outcome.InboxDeferred:
		return o.Claim.String()
	case o.Commit == outcome.CommitNotRequired:
		return ""
	}
	return o.Commit.String()
}

func handoffWord(h outcome.HandoffEvidence) string {
	if h.Status == outcome.HandoffNone {
		return ""
	}
	return h.Status.String()
}

// copyMayRepeat reports whether a delivery's handoff published a copy while
// the original may come back too: its ACK was not sent, or not proven.
func copyMayRepeat(o outcome.Outcome) bool {
	return o.Handoff.Published && (o.Handoff.Status != outcome.HandoffConfirmed || o.Settlement.Status != outcome.AckSent)
}
