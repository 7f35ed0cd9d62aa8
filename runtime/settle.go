package runtime

import (
	"errors"
	"sync/atomic"

	amqp "github.com/rabbitmq/amqp091-go"
)

// generation is one consumer channel's life. Every delivery's authority points
// at the generation it came from; when that channel closes the generation is
// revoked, and no tag from it is ever used again (tags restart on a new channel).
type generation struct {
	revoked atomic.Bool
}

func (g *generation) revoke() { g.revoked.Store(true) }

// authority is the right to settle one delivery: owned by the runtime, used at
// most once, void once its channel's generation is revoked.
type authority struct {
	acker amqp.Acknowledger
	tag   uint64
	gen   *generation
	used  atomic.Bool
}

func newAuthority(d *amqp.Delivery, gen *generation) *authority {
	return &authority{acker: d.Acknowledger, tag: d.DeliveryTag, gen: gen}
}

// ack sends the ACK of the original delivery.
func (a *authority) ack() SettlementEvidence {
	return a.use(AckSent, false, func() error { return a.acker.Ack(a.tag, false) })
}

// nack sends the NACK of the original delivery, with or without requeue.
func (a *authority) nack(requeue bool) SettlementEvidence {
	return a.use(NackSent, requeue, func() error { return a.acker.Nack(a.tag, false, requeue) })
}

func (a *authority) use(sent SettlementStatus, requeue bool, send func() error) SettlementEvidence {
	if a.gen.revoked.Load() {
		return SettlementEvidence{Status: SettlementNotAttempted, Requeue: requeue, Detail: "authority revoked: the delivery's channel closed"}
	}
	if !a.used.CompareAndSwap(false, true) {
		return SettlementEvidence{Status: SettlementNotAttempted, Requeue: requeue, Detail: "authority already used"}
	}
	err := send()
	switch {
	case err == nil:
		return SettlementEvidence{Status: sent, Requeue: requeue}
	case errors.Is(err, amqp.ErrClosed):
		// The client refused before writing a frame: nothing reached the broker.
		return SettlementEvidence{Status: SettlementNotAttempted, Requeue: requeue, Detail: "channel closed before the write"}
	}
	return SettlementEvidence{Status: SettlementAmbiguous, Requeue: requeue, Detail: sanitize(err.Error(), 120)}
}
