package runtime

import (
	"context"
	"time"

	"github.com/lily-mq/lily/internal/sanitize"
	"github.com/lily-mq/lily/runtime/internal/settle"
	"github.com/lily-mq/lily/runtime/internal/step"
)

// prove proves the ACKs waiting on the session's channel, with one basic.qos.
func (c *Consumer) prove(r *run, s *session) {
	acks := s.gen.Acks.Take()
	if len(acks) == 0 {
		return
	}
	defer s.gen.Acks.Done(acks)
	ctx, cancel := step.Context(c.cfg.StepTimeout, time.Time{})
	defer cancel()
	if err := s.call(ctx, func() error { return s.ch.Qos(c.spec.Prefetch, 0, false) }); err != nil {
		c.acksAmbiguous(r, s.gen, acks, "no reply on the channel after the ACK: "+sanitize.Text(err.Error(), 120))
		return
	}
	c.acksProven(r, s.gen, acks)
}

// startProver runs prove a proof interval after the last one ended, until
// stopProver, and has the session's channel recycled when a delivery has
// stayed unsettled on it past its budget and a step, or the queue starves
// it (starvation.go). It runs on a timer, not on a goroutine of its own: an
// idle consumer holds one goroutine less.
func (c *Consumer) startProver(r *run, s *session) {
	// Under the lock, so that the first proof sees the timer.
	s.proving.Lock()
	defer s.proving.Unlock()
	s.prover = time.AfterFunc(c.tuning.proofInterval, func() {
		s.proving.Lock()
		if s.proverStopped {
			s.proving.Unlock()
			return
		}
		c.prove(r, s)
		if oldest := s.gen.Settler.Oldest(); !oldest.IsZero() && time.Since(oldest) > c.recycleAfter() {
			s.recycleFor(errRecycled)
		}
		idle, free := c.idle(r, s)
		if c.redeclareDue(s) {
			c.startRedeclare(r, s)
		}
		var ask context.Context
		var asked context.CancelFunc
		if idle > 0 {
			ask, asked = context.WithCancel(context.Background())
			s.stopAsking = asked
			s.asking.Add(1)
		}
		s.proving.Unlock()
		// The queue is asked outside the lock: a close must not wait a
		// step for the answer before its own proof. stopProver cancels the
		// question instead, and waits for it to end.
		if ask != nil {
			why := c.starved(ask, s, idle, free)
			asked()
			s.asking.Done()
			if why != nil {
				s.recycleFor(why)
			}
		}
		s.proving.Lock()
		defer s.proving.Unlock()
		if !s.proverStopped {
			s.prover.Reset(c.tuning.proofInterval)
		}
	})
}

func (c *Consumer) acksProven(r *run, gen *settle.Generation, acks []settle.SentAck) {
	n := 0
	for _, a := range acks {
		if !a.DeadLetter {
			n++
			c.emit(event{stage: stageAckProven, messageID: a.MessageID, attempt: a.Attempt, generation: gen.ID})
		}
	}
	r.report.proven(n)
}

// acksAmbiguous records ACKs whose fate is unknown: each becomes unresolved in
// the report, and its work is remembered so that a redelivery is settled from
// the record instead of running the handler again. An unproven dead-lettering
// NACK is unresolved too; it did no work to remember.
func (c *Consumer) acksAmbiguous(r *run, gen *settle.Generation, acks []settle.SentAck, why string) {
	for _, a := range acks {
		rec := Record{
			Queue: c.spec.Name, MessageID: a.MessageID, Attempt: a.Attempt, Path: PathUnresolved,
			Reason:  "ack sent, never proven: " + why,
			Handoff: handoffWord(a.Handoff), Destination: a.Handoff.Destination,
		}
		if a.DeadLetter {
			rec.Reason = "dead-lettering nack sent, never proven: " + why
		} else {
			r.completed.Add(a.Work)
		}
		r.report.unresolved(a.Token, rec, a.Handoff.Published)
		c.emit(event{stage: stageAckAmbiguous, messageID: a.MessageID, attempt: a.Attempt, generation: gen.ID, detail: why})
	}
}
