package runtime

import (
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// handoffCopy builds the message a handoff publishes: the original body (not
// copied) and properties, the next attempt, and bounded failure facts.
//
// A poison delivery's headers and properties are what made it poison, so its
// copy carries none of its headers and only sanitized, bounded identifiers.
// UserId and Expiration are never forwarded: the broker would refuse a foreign
// user id, and a per-message TTL would fight the retry bucket's.
func handoffCopy(d *amqp.Delivery, env *Envelope, o Outcome, plan Plan, source string, now time.Time) amqp.Publishing {
	// Room for the failure facts and the handoff id up front: no map growth.
	// A poison delivery's headers are not copied, so they get no room.
	room := 7
	if env != nil {
		room += len(d.Headers)
	}
	h := make(amqp.Table, room)
	p := amqp.Publishing{Headers: h, Body: d.Body, DeliveryMode: amqp.Persistent}
	if env == nil {
		p.MessageId = sanitize(d.MessageId, 128)
		p.Type = sanitize(d.Type, 128)
		p.ContentType = sanitize(d.ContentType, 128)
	} else {
		for k, v := range d.Headers {
			if !strings.HasPrefix(k, HeaderFailurePrefix) && k != HeaderHandoffID {
				h[k] = v
			}
		}
		h[HeaderAttempt] = int64(plan.NextAttempt)
		p.MessageId, p.Type, p.ContentType = d.MessageId, d.Type, d.ContentType
		p.ContentEncoding, p.CorrelationId, p.Timestamp = d.ContentEncoding, d.CorrelationId, d.Timestamp
		p.AppId, p.Priority, p.ReplyTo = d.AppId, d.Priority, d.ReplyTo
	}
	attempt := 1
	if env != nil {
		attempt = env.Attempt
	}
	h[HeaderFailureReason] = failureReason(plan, o)
	h[HeaderFailureKind] = failureKind(o)
	h[HeaderFailureAttempt] = int64(attempt)
	h[HeaderFailureQueue] = source
	h[HeaderFailureTime] = now.UTC().Truncate(time.Second)
	return p
}

// failureKind names the failure a handoff copy carries, for people reading the DLQ.
func failureKind(o Outcome) string {
	if o.Rejection != NotRejected {
		return o.Rejection.String()
	}
	return o.Handler.Kind.String()
}

// failureReason is why a delivery took its path, with the failing step's
// detail when there is one; sanitized and bounded.
func failureReason(plan Plan, o Outcome) string {
	var detail string
	switch {
	case o.Handler.Kind != 0:
		detail = o.Handler.Cause
	case o.Commit == CommitFailed:
		detail = o.Reason
	case o.Cleanup != "":
		detail = "cleanup: " + o.Cleanup
	case o.AfterDelivery != "":
		detail = "after_delivery: " + o.AfterDelivery
	}
	if detail == "" {
		return sanitize(plan.Reason, maxCause)
	}
	return sanitize(plan.Reason+": "+detail, maxCause)
}
