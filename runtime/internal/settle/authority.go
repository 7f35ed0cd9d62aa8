// Package settle is the settlement stage: the authority to settle each
// delivery once, on the channel generation it came from and only while that
// generation stands; the settler that writes a channel's ACKs and NACKs; and
// the ledger of ACKs waiting for their proof.
//
// An ACK that was written is not yet an ACK the broker processed. AMQP keeps a
// channel's frames in order, so a later synchronous reply on the same channel
// proves every earlier ACK on it: the consumer sends basic.qos (with the same
// prefetch: a no-op) now and then while ACKs wait, and the channel's close-ok
// proves the rest at shutdown. ACKs still unproven when their channel is lost
// are ambiguous: the broker may redeliver work that was done. A NACK that
// dead-letters (an oversized body) waits for the same proof: until the broker
// has read it, the delivery may still come back.
package settle

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/internal/sanitize"
	"github.com/lily-mq/lily/runtime/internal/outcome"
	"github.com/lily-mq/lily/runtime/internal/step"
)

// Generation is one consumer channel's life. Every delivery's authority points
// at the generation it came from; when that channel or its connection closes,
// or at the final abort, the generation is revoked and no tag from it is used
// again. Lily does not use amqp091's automatic recovery: it reconnects itself,
// so a tag always travels on the channel object that delivered it and a tag
// from an old channel can never reach a new one (tags restart at 1).
type Generation struct {
	ID      uint64
	revoked atomic.Bool
	// ended, made by the first Ended, is closed by Revoke.
	mu    sync.Mutex
	ended chan struct{}
	// Acks holds the ACKs sent on this channel and not yet proven.
	Acks Ledger
	// Settler writes the channel's ACKs and NACKs.
	Settler *Settler
}

// Revoke ends the generation's authority: no tag from it is used again.
func (g *Generation) Revoke() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.revoked.Swap(true) && g.ended != nil {
		close(g.ended)
	}
}

// Ended is closed once the generation is revoked: for the waits of a
// delivery that has nothing left to wait for then.
func (g *Generation) Ended() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ended == nil {
		g.ended = make(chan struct{})
		if g.revoked.Load() {
			close(g.ended)
		}
	}
	return g.ended
}

// Revoked reports whether the generation's authority has ended.
func (g *Generation) Revoked() bool { return g.revoked.Load() }

// Authority is the right to settle one delivery: owned by the runtime, used at
// most once, void once its channel's generation is revoked.
type Authority struct {
	tag  uint64
	gen  *Generation
	used atomic.Bool
}

// NewAuthority is the authority to settle the delivery tag of gen.
func NewAuthority(tag uint64, gen *Generation) *Authority {
	return &Authority{tag: tag, gen: gen}
}

// Ack sends the ACK of the original delivery, by the deadline.
func (a *Authority) Ack(deadline time.Time) outcome.SettlementEvidence {
	return a.use(deadline, false, false, outcome.AckSent)
}

// Nack sends the NACK of the original delivery, with or without requeue.
func (a *Authority) Nack(deadline time.Time, requeue bool) outcome.SettlementEvidence {
	return a.use(deadline, true, requeue, outcome.NackSent)
}

// settlements are used again once their answer was received: the settler
// answers each once and keeps none. One whose answer was not received (the
// wait timed out, the settler stopped) is left to the collector, since the
// settler may still answer it.
var settlements = sync.Pool{New: func() any { return &settlement{written: make(chan error, 1)} }}

func (a *Authority) use(deadline time.Time, nack, requeue bool, sent outcome.SettlementStatus) outcome.SettlementEvidence {
	if a.gen.Revoked() {
		return outcome.SettlementEvidence{Status: outcome.SettlementNotAttempted, Requeue: requeue, Detail: revokedDetail}
	}
	if !time.Now().Before(deadline) {
		// Written now, it would settle late; left, the channel's recycle
		// hands it back to the broker.
		return outcome.SettlementEvidence{Status: outcome.SettlementNotAttempted, Requeue: requeue, Detail: "the settlement budget was spent before the write"}
	}
	if !a.used.CompareAndSwap(false, true) {
		return outcome.SettlementEvidence{Status: outcome.SettlementNotAttempted, Requeue: requeue, Detail: "authority already used"}
	}
	st := settlements.Get().(*settlement)
	st.tag, st.nack, st.requeue = a.tag, nack, requeue
	answered, err := a.gen.Settler.settle(st, deadline)
	if answered {
		settlements.Put(st)
	}
	switch {
	case err == nil:
		return outcome.SettlementEvidence{Status: sent, Requeue: requeue}
	case errors.Is(err, errRevoked):
		return outcome.SettlementEvidence{Status: outcome.SettlementNotAttempted, Requeue: requeue, Detail: revokedDetail}
	case errors.Is(err, amqp.ErrClosed), errors.Is(err, errNotWritten):
		// The client refused before writing a frame: nothing reached the broker.
		return outcome.SettlementEvidence{Status: outcome.SettlementNotAttempted, Requeue: requeue, Detail: "channel closed before the write"}
	case errors.Is(err, errNotHandedOver):
		return outcome.SettlementEvidence{Status: outcome.SettlementNotAttempted, Requeue: requeue, Detail: "the channel's settler was held up by an earlier write past the deadline"}
	case errors.Is(err, step.ErrTimeout):
		return outcome.SettlementEvidence{Status: outcome.SettlementAmbiguous, Requeue: requeue, Detail: "the write did not return in time"}
	}
	return outcome.SettlementEvidence{Status: outcome.SettlementAmbiguous, Requeue: requeue, Detail: sanitize.Text(err.Error(), 120)}
}

const revokedDetail = "authority revoked: the delivery's channel closed or the consumer aborted"
