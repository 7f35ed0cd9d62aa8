package runtime

import (
	"errors"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// generation is one consumer channel's life. Every delivery's authority points
// at the generation it came from; when that channel or its connection closes,
// or at the final abort, the generation is revoked and no tag from it is used
// again. Lily does not use amqp091's automatic recovery: it reconnects itself,
// so a tag always travels on the channel object that delivered it and a tag
// from an old channel can never reach a new one (tags restart at 1).
type generation struct {
	id      uint64
	revoked atomic.Bool
	// acks holds the ACKs sent on this channel and not yet proven.
	acks ackLedger
	// settler writes the channel's ACKs and NACKs.
	settler *settler
}

func (g *generation) revoke() { g.revoked.Store(true) }

// authority is the right to settle one delivery: owned by the runtime, used at
// most once, void once its channel's generation is revoked.
type authority struct {
	tag  uint64
	gen  *generation
	used atomic.Bool
}

func newAuthority(d *amqp.Delivery, gen *generation) *authority {
	return &authority{tag: d.DeliveryTag, gen: gen}
}

// ack sends the ACK of the original delivery, by the deadline.
func (a *authority) ack(deadline time.Time) SettlementEvidence {
	return a.use(deadline, &settlement{tag: a.tag}, AckSent)
}

// nack sends the NACK of the original delivery, with or without requeue.
func (a *authority) nack(deadline time.Time, requeue bool) SettlementEvidence {
	return a.use(deadline, &settlement{tag: a.tag, nack: true, requeue: requeue}, NackSent)
}

func (a *authority) use(deadline time.Time, st *settlement, sent SettlementStatus) SettlementEvidence {
	requeue := st.requeue
	if a.gen.revoked.Load() {
		return SettlementEvidence{Status: SettlementNotAttempted, Requeue: requeue, Detail: revokedDetail}
	}
	if !a.used.CompareAndSwap(false, true) {
		return SettlementEvidence{Status: SettlementNotAttempted, Requeue: requeue, Detail: "authority already used"}
	}
	st.written = make(chan error, 1)
	err := a.gen.settler.settle(st, deadline)
	switch {
	case err == nil:
		return SettlementEvidence{Status: sent, Requeue: requeue}
	case errors.Is(err, errRevoked):
		return SettlementEvidence{Status: SettlementNotAttempted, Requeue: requeue, Detail: revokedDetail}
	case errors.Is(err, amqp.ErrClosed), errors.Is(err, errNotWritten):
		// The client refused before writing a frame: nothing reached the broker.
		return SettlementEvidence{Status: SettlementNotAttempted, Requeue: requeue, Detail: "channel closed before the write"}
	case errors.Is(err, errStepTimeout):
		return SettlementEvidence{Status: SettlementAmbiguous, Requeue: requeue, Detail: "the write did not return in time"}
	}
	return SettlementEvidence{Status: SettlementAmbiguous, Requeue: requeue, Detail: sanitize(err.Error(), 120)}
}

const revokedDetail = "authority revoked: the delivery's channel closed or the consumer aborted"
