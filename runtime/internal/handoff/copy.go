// Package handoff builds what moves a failed message to a retry bucket or the
// DLQ: a copy of the original with the next attempt and bounded failure facts,
// which the consumer's confirm-mode publisher then publishes.
package handoff

import (
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/internal/sanitize"
	"github.com/lily-mq/lily/runtime/internal/decide"
	"github.com/lily-mq/lily/runtime/internal/guard"
	"github.com/lily-mq/lily/runtime/internal/outcome"
)

// Copy builds the message a handoff publishes: the original body (not
// copied) and properties, the next attempt, and bounded failure facts: among
// them the type and version env holds, when the guard read an envelope.
//
// A poison delivery's headers and properties are what made it poison, so its
// copy carries only sanitized, bounded identifiers: its message_id, type and
// content type, and those of the identity headers its queue's envelope
// profiles read (a CloudEvent's id, source and type, a type or id header)
// that hold strings, so that a foreign producer's copy still says whose it
// is; d's headers, not the original's, which for a delivery the
// connection's filter quarantined for its x-death are the filter's
// stand-in table, by design: that copy carries none of them, and says whose
// it is by its properties and body alone. Sanitized and cut, an id may read
// as another, valid one: the copy is marked (envelope.HeaderPoisonCopy), and
// the guard refuses it.
// UserId and Expiration are never forwarded: the broker would refuse a foreign
// user id, and a per-message TTL would fight the retry bucket's. Nor are CC
// and BCC (envelope.Routing): they would send the copy to the queues they
// name again. Nor are the broker's records of the original's life
// (envelope.BrokerRecord): with an x-death naming source, the broker would
// drop a retry copy where the bucket's TTL sends it back; and an x-death on
// a DLQ copy is then the broker's alone, from dead-lettering it there, which
// a producer cannot have written (lilydlq trusts no source that it and the
// failure facts dispute).
func Copy(d *amqp.Delivery, env *guard.Envelope, identity []string, o outcome.Outcome, plan decide.Plan, source string, now time.Time) amqp.Publishing {
	// Room for the failure facts, the handoff id and a poison copy's mark up
	// front: no map growth.
	room := 10 + len(identity)
	if env != nil {
		room += len(d.Headers)
	}
	h := make(amqp.Table, room)
	p := amqp.Publishing{Headers: h, Body: d.Body, DeliveryMode: amqp.Persistent}
	if env == nil {
		h[envelope.HeaderPoisonCopy] = true
		p.MessageId = sanitize.Text(d.MessageId, 128)
		p.Type = sanitize.Text(d.Type, 128)
		p.ContentType = sanitize.Text(d.ContentType, 128)
		for _, k := range identity {
			if v, ok := d.Headers[k].(string); ok {
				h[k] = sanitize.Text(v, 128)
			}
		}
	} else {
		for k, v := range d.Headers {
			if !strings.HasPrefix(k, guard.HeaderFailurePrefix) && k != guard.HeaderHandoffID && !envelope.Routing(k) && !envelope.BrokerRecord(k) {
				h[k] = v
			}
		}
		h[guard.HeaderAttempt] = int64(plan.NextAttempt)
		// What the guard read, by the message's profile: a foreign
		// producer's copy carries its type and version in headers of its
		// own (or in none, for a version the profile fixes), which lilydlq
		// does not know. Checked already: the sanitizing is a bound.
		h[guard.HeaderFailureType] = sanitize.Text(env.Type, envelope.MaxTypeBytes)
		h[guard.HeaderFailureVersion] = int64(env.Version)
		p.MessageId, p.Type, p.ContentType = d.MessageId, d.Type, d.ContentType
		p.ContentEncoding, p.CorrelationId, p.Timestamp = d.ContentEncoding, d.CorrelationId, d.Timestamp
		p.AppId, p.Priority, p.ReplyTo = d.AppId, d.Priority, d.ReplyTo
	}
	attempt := 1
	if env != nil {
		attempt = env.Attempt
	}
	h[guard.HeaderFailureReason] = decide.FailureReason(plan, o)
	h[guard.HeaderFailureKind] = failureKind(o)
	h[guard.HeaderFailureAttempt] = int64(attempt)
	h[guard.HeaderFailureQueue] = source
	h[guard.HeaderFailureTime] = now.UTC().Truncate(time.Second)
	return p
}

// failureKind names the failure a handoff copy carries, for people reading the DLQ.
func failureKind(o outcome.Outcome) string {
	if o.Rejection != outcome.NotRejected {
		return o.Rejection.String()
	}
	return o.Handler.Kind.String()
}
