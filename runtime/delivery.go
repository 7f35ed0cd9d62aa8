package runtime

import (
	"context"

	amqp "github.com/rabbitmq/amqp091-go"
)

// RawDelivery is the read-only view of a delivery that a handler receives.
//
// It wraps the broker's delivery without exposing its acknowledger, delivery
// tag or channel: settling is the runtime's alone.
type RawDelivery struct {
	d   *amqp.Delivery
	env *Envelope
}

// Body is the message body as received, not a copy. Handlers must not modify it.
func (r RawDelivery) Body() []byte { return r.d.Body }

// Envelope is the validated canonical envelope.
func (r RawDelivery) Envelope() Envelope { return *r.env }

// Redelivered is the broker's redelivered flag. It proves nothing about whether
// earlier work on this message committed.
func (r RawDelivery) Redelivered() bool { return r.d.Redelivered }

// Attempt is Lily's attempt count, from 1.
func (r RawDelivery) Attempt() int { return r.env.Attempt }

type deliveryKey struct{}

// DeliveryFromContext returns the delivery a handler's context belongs to, for
// code deep in a call chain that was handed only the context.
func DeliveryFromContext(ctx context.Context) (RawDelivery, bool) {
	rd, ok := ctx.Value(deliveryKey{}).(RawDelivery)
	return rd, ok
}
