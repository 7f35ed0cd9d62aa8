package runtime

import (
	"sync"
	"time"
)

// An ACK that was written is not yet an ACK the broker processed. AMQP keeps a
// channel's frames in order, so a later synchronous reply on the same channel
// proves every earlier ACK on it: a prover sends basic.qos (with the same
// prefetch: a no-op) now and then while ACKs wait, and the channel's close-ok
// proves the rest at shutdown. ACKs still unproven when their channel is lost
// are ambiguous: the broker may redeliver work that was done. A NACK that
// dead-letters (an oversized body) waits for the same proof: until the broker
// has read it, the delivery may still come back.

// DefaultProofInterval is how often waiting ACKs are proven when a Config
// leaves ProofInterval zero.
const DefaultProofInterval = 250 * time.Millisecond

// sentAck is one ACK waiting for its proof, or one dead-lettering NACK.
type sentAck struct {
	token      uint64 // the delivery's journey in the report
	work       workKey
	messageID  string // sanitized, for the report
	attempt    int
	handoff    HandoffEvidence // the confirmed copy this ACK follows, if any
	deadLetter bool            // a NACK without requeue: no work was done
}

// ackLedger holds one generation's ACKs sent and not yet proven.
type ackLedger struct {
	mu      sync.Mutex
	pending []sentAck
	closed  bool // the channel's end was judged; no later ACK can be proven
}

// add keeps a for its proof; it reports false when the channel's end was
// already judged, and a can no longer be proven.
func (l *ackLedger) add(a sentAck) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.pending = append(l.pending, a)
	return true
}

// close returns every waiting ACK and refuses later ones: the channel ended.
func (l *ackLedger) close() []sentAck {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	p := l.pending
	l.pending = nil
	return p
}

// take removes and returns every waiting ACK. Whatever proof follows covers
// exactly these: each was written before take returned.
func (l *ackLedger) take() []sentAck {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.pending
	l.pending = nil
	return p
}

// prove proves the ACKs waiting on the session's channel, with one basic.qos.
func (c *Consumer) prove(r *run, s *session) {
	acks := s.gen.acks.take()
	if len(acks) == 0 {
		return
	}
	ctx, cancel := stepContext(c.cfg.StepTimeout, time.Time{})
	defer cancel()
	if err := s.call(ctx, func() error { return s.ch.Qos(c.spec.Prefetch, 0, false) }); err != nil {
		c.acksAmbiguous(r, s.gen, acks, "no reply on the channel after the ACK: "+sanitize(err.Error(), 120))
		return
	}
	c.acksProven(r, s.gen, acks)
}

// proveEvery runs prove at the proof interval until the session ends.
func (c *Consumer) proveEvery(r *run, s *session) {
	t := time.NewTicker(c.cfg.ProofInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			c.prove(r, s)
		case <-s.ended:
			return
		}
	}
}

func (c *Consumer) acksProven(r *run, gen *generation, acks []sentAck) {
	n := 0
	for _, a := range acks {
		if !a.deadLetter {
			n++
			c.emit(Event{Stage: StageAckProven, MessageID: a.messageID, Attempt: a.attempt, Generation: gen.id})
		}
	}
	r.report.proven(n)
}

// acksAmbiguous records ACKs whose fate is unknown: each becomes unresolved in
// the report, and its work is remembered so that a redelivery is settled from
// the record instead of running the handler again. An unproven dead-lettering
// NACK is unresolved too; it did no work to remember.
func (c *Consumer) acksAmbiguous(r *run, gen *generation, acks []sentAck, why string) {
	for _, a := range acks {
		rec := Record{
			Queue: c.spec.Name, MessageID: a.messageID, Attempt: a.attempt, Path: PathUnresolved,
			Reason:     "ack sent, never proven: " + why,
			Settlement: SettlementEvidence{Status: SettlementAmbiguous, Detail: why},
			Handoff:    a.handoff,
		}
		if a.deadLetter {
			rec.Reason = "dead-lettering nack sent, never proven: " + why
		} else {
			r.completed.add(a.work)
		}
		r.report.unresolved(a.token, rec)
		c.emit(Event{Stage: StageAckAmbiguous, MessageID: a.messageID, Attempt: a.attempt, Generation: gen.id, Detail: why})
	}
}
