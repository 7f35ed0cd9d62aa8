package runtime

import (
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/internal/sanitize"
	"github.com/lily-mq/lily/runtime/internal/guard"
)

// RawDelivery is the read-only view of a delivery that a handler receives:
// its body and its envelope, validated by the guard before any user code ran.
//
// It wraps the broker's delivery without exposing its acknowledger, delivery
// tag or channel: settling is the runtime's alone. Its zero value, and the
// view a Telemetry gets of a delivery the guard rejected, read as empty: no
// body, no header.
type RawDelivery struct {
	d   *amqp.Delivery
	env *guard.Envelope
	// route: the view a route is called with, whose first Body is its
	// extractor's.
	route bool
}

// Body is the message's payload: the body, or a structured CloudEvent's
// data member. It is a copy, made at the first call and kept for the later
// ones of the delivery, so that what user code writes into it, or appends
// past its end, never reaches the delivery's own bytes, which its retry and
// DLQ copies carry: a handler, its Scope, its AfterDelivery and a
// Telemetry share that copy, and see each other's changes to it.
//
// A route's first call is its extractor's, and reads the delivery's own
// bytes without a copy: the generated route makes it before it calls the
// handler, and its extractor keeps nothing of them. A route written by hand
// must do the same, or call the handler with a Body it has read already.
func (r RawDelivery) Body() []byte {
	if r.env == nil {
		return nil
	}
	if r.route && r.env.Extracting() {
		return r.env.Payload(r.d.Body)
	}
	return r.env.Held(r.d.Body)
}

// MessageID is the message's id where its envelope profile keeps it (AMQP
// message_id in Lily's): printable ASCII, bounded; empty for a profile
// without one. A CloudEvent's is its id attribute; the inbox claims it
// together with the event's source.
func (r RawDelivery) MessageID() string {
	if r.env == nil {
		return ""
	}
	return r.env.MessageID
}

// Type is the wire type, as the dispatch table matched it (without a version
// suffix the profile reads).
func (r RawDelivery) Type() string {
	if r.env == nil {
		return ""
	}
	return r.env.Type
}

// Version is the message's version, where its envelope profile keeps it
// (header x-lily-version in Lily's).
func (r RawDelivery) Version() int {
	if r.env == nil {
		return 0
	}
	return r.env.Version
}

// CorrelationID is the AMQP correlation_id; empty when the producer set none.
func (r RawDelivery) CorrelationID() string {
	if r.env == nil {
		return ""
	}
	return r.env.CorrelationID
}

// Attempt is Lily's attempt count, from 1 (header x-lily-attempt).
func (r RawDelivery) Attempt() int {
	if r.env == nil {
		return 0
	}
	return r.env.Attempt
}

// Redelivered is the broker's redelivered flag. It proves nothing about whether
// earlier work on this message committed.
func (r RawDelivery) Redelivered() bool { return r.d != nil && r.d.Redelivered }

// Header returns one header of the delivery; the guard has bounded them all.
// A table, an array or a byte slice is a copy, made at each call, so that
// what user code changes in it never reaches the delivery's own headers,
// which its retry and DLQ copies carry; other values are values.
// A CloudEvent's context attributes (specversion, id, source, type, time,
// datacontenttype, dataschema, subject, and the profile's version
// attribute) read as headers cloudEvents_<name> in either content mode, such
// as cloudEvents_subject; a binary-mode event's extensions do too.
func (r RawDelivery) Header(key string) (any, bool) {
	if r.env == nil {
		return nil, false
	}
	v, ok := r.env.Header(key)
	return guard.Detached(v), ok
}

// Exchange is the exchange the message was published to ("" for the default
// exchange), sanitized and bounded as RoutingKey is.
func (r RawDelivery) Exchange() string {
	if r.d == nil {
		return ""
	}
	return sanitize.Name(r.d.Exchange, maxShortText)
}

// RoutingKey is the routing key the message was published with, sanitized and
// bounded: valid UTF-8 stays as it is, so that a key naming a queue such as
// orders-zamówienia reads as the queue's name, but each byte of a rune that
// does not show as itself (a control, a format character such as U+202E or
// U+200B, a line separator, a space other than U+0020), or of invalid
// UTF-8, reads as an escape \xNN.
func (r RawDelivery) RoutingKey() string {
	if r.d == nil {
		return ""
	}
	return sanitize.Name(r.d.RoutingKey, maxShortText)
}

// maxShortText bounds an AMQP short string (255 bytes) once sanitized.
const maxShortText = 255
