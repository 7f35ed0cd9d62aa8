package runtime

import (
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/runtime/internal/guard"
)

// RawDelivery is the read-only view of a delivery that a handler receives:
// its body and its envelope, validated by the guard before any user code ran.
//
// It wraps the broker's delivery without exposing its acknowledger, delivery
// tag or channel: settling is the runtime's alone.
type RawDelivery struct {
	d   *amqp.Delivery
	env *guard.Envelope
}

// Body is the message body as received, not a copy. Handlers must not modify it.
func (r RawDelivery) Body() []byte { return r.d.Body }

// MessageID is the AMQP message_id: printable ASCII, bounded; the inbox's key.
func (r RawDelivery) MessageID() string { return r.env.MessageID }

// Type is the AMQP type, as the dispatch table matched it.
func (r RawDelivery) Type() string { return r.env.Type }

// Version is the message's version (header x-lily-version).
func (r RawDelivery) Version() int { return r.env.Version }

// CorrelationID is the AMQP correlation_id; empty when the producer set none.
func (r RawDelivery) CorrelationID() string { return r.env.CorrelationID }

// Attempt is Lily's attempt count, from 1 (header x-lily-attempt).
func (r RawDelivery) Attempt() int { return r.env.Attempt }

// Redelivered is the broker's redelivered flag. It proves nothing about whether
// earlier work on this message committed.
func (r RawDelivery) Redelivered() bool { return r.d.Redelivered }

// Header returns one header of the delivery; the guard has bounded them all.
// The value is shared with the runtime: do not modify tables or arrays in it.
func (r RawDelivery) Header(key string) (any, bool) {
	v, ok := r.env.Headers[key]
	return v, ok
}
