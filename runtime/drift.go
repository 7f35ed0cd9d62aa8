package runtime

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/internal/sanitize"
	"github.com/lily-mq/lily/runtime/internal/decide"
	"github.com/lily-mq/lily/runtime/internal/step"
)

// The topology is declared when a session opens, and the estate may change
// under a session that lives for weeks: an owner that deletes an exchange
// and declares it again (the way to change its type or arguments) leaves it
// without the bindings to this queue, and what is sent to it meanwhile goes
// nowhere, dropped or to its alternate exchange, with no sign on the
// consumer's channel. So a consuming session declares the topology again
// every topologyEvery, on the prover's timer: Lily's own bindings and
// exchanges come back, idempotently, and a refusal (an external exchange
// deleted, a 406) is told, at error and in Health, while consuming goes on:
// the messages in the queue are no less good for it. A refusal stops only
// what was refused: everything else is declared past it, so that one
// exchange deleted by its owner keeps no other binding from coming back.
//
// A session that opens after the run has consumed (a reconnect) goes on so
// past an external exchange found missing, and tells it the same way:
// another team's deletion, which left the queue consumed while the
// connection lasted, must not stop it when the connection drops. Any other
// refusal still fails that open (Consumer.open).

// redeclareDue says whether s's topology is to be declared again now, and
// notes that it is: one declare at a time. The prover calls it under its
// lock.
func (c *Consumer) redeclareDue(s *session) bool {
	if s.redeclaring || time.Since(s.declared) < c.tuning.topologyEvery {
		return false
	}
	s.declared, s.redeclaring = time.Now(), true
	return true
}

// startRedeclare declares s's topology again on a goroutine of its own,
// which stopProver cancels and waits for, as it does the starvation ask: a
// broker slow to answer a declare (a quorum queue's leader out of reach)
// must not hold the proofs. The prover calls it under its lock.
func (c *Consumer) startRedeclare(r *run, s *session) {
	ctx, cancel := context.WithCancel(context.Background())
	s.stopRedeclare = cancel
	s.asking.Add(1)
	go func() {
		defer s.asking.Done()
		defer cancel()
		c.redeclare(ctx, r, s)
	}()
}

// The declare's own state, under s.proving: it waits to begin, it
// declares, or it is done (returned, or given up before it began).
const (
	redeclareWaiting = iota
	redeclareDeclaring
	redeclareDone
)

// redeclare declares the topology again on s's connection, within a step and
// until ctx ends, past every refusal, and tells the refusals, or their end.
// A session no longer the one consuming (retired, its successor open) tells
// nothing: its answer may be older than the successor's.
//
// amqp091's calls are not context-aware: a declare the broker does not
// answer (a quorum queue's leader out of reach) goes on past its step, its
// channel open, until the broker answers or the connection ends. The
// session is not declared again until it returns (s.redeclaring stays set
// until then), or every topologyEvery would leave one more such channel
// and goroutine on the connection, which runs out of channels (2047 on
// RabbitMQ's default) when a Publisher shares it. Its step's end is told
// once, a topology-unanswered line at warn, and Health's Why says since
// when (the declare began, not its step's end), until it returns;
// consuming goes on.
func (c *Consumer) redeclare(ctx context.Context, r *run, s *session) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.StepTimeout)
	defer cancel()
	state := redeclareWaiting
	var began time.Time // when the declare began: the since of Health's Why
	refusals, err := step.Do(ctx, func() ([]error, error) {
		s.proving.Lock()
		if state == redeclareDone { // given up before it began
			s.proving.Unlock()
			return nil, nil
		}
		state, began = redeclareDeclaring, time.Now()
		s.proving.Unlock()
		defer func() {
			s.proving.Lock()
			defer s.proving.Unlock()
			state, s.redeclaring = redeclareDone, false
			s.unanswered.Store(0)
		}()
		d := declarer{conn: s.link.conn, goOn: pastRefusals}
		err := d.topology(c.spec)
		return d.refusals, err
	})
	s.proving.Lock()
	unanswered := state == redeclareDeclaring
	switch {
	case state == redeclareWaiting:
		state, s.redeclaring = redeclareDone, false
	case unanswered && errors.Is(ctx.Err(), context.DeadlineExceeded):
		s.unanswered.Store(began.UnixNano())
	}
	s.proving.Unlock()
	if r.consuming.Load() != s {
		return
	}
	// The connection ending is the session's to tell, not the topology's;
	// the refusals met before it are told all the same.
	refusals = stoppedAt(refusals, err)
	switch {
	case unanswered && errors.Is(ctx.Err(), context.DeadlineExceeded):
		c.emit(event{stage: stageUnanswered, generation: s.gen.ID, detail: fmt.Sprintf(
			"the broker did not answer the topology declared again within %s; not declared again on this session until it does", c.cfg.StepTimeout)})
	case err == nil && len(refusals) == 0:
		c.mended(r)
	case len(refusals) > 0:
		c.drifted(r, s.gen.ID, refusals, func() bool { return r.consuming.Load() == s })
	}
}

// pastRefusals says what the topology declared again while consuming goes
// on past: every refusal, and the 404 of a bind, which waits for an owner
// as a refusal does (what it binds deleted since it was declared).
func pastRefusals(err error) bool { return refused(err) || errors.As(err, new(unbound)) }

// stoppedAt adds to refusals err, the failure that stopped the topology
// declared again, when it is its channel's alone (a 404 of a classic queue
// whose node is down): the rest of the topology was not declared, and that
// is told as a refusal is, not dropped. The connection ending (a hard
// error, or the channel closed under it) is not.
func stoppedAt(refusals []error, err error) []error {
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Recover {
		return append(refusals, fmt.Errorf("stopped at %w", err))
	}
	return refusals
}

// drifted tells the refusals of the topology declared for the session of
// generation gen, while it consumes or as it opens after the run consumed
// (Consumer.open): a topology-drifted line at error, then Health's Why,
// unless they are told already. current says whether the session is still
// the one Health speaks of.
func (c *Consumer) drifted(r *run, gen uint64, refusals []error, current func() bool) {
	why := refusalsText(refusals)
	if was := r.drifted.Load(); was == nil || *was != why {
		// Told before Health says it, so that a reader of Health finds the
		// line already there; and not said if the session retired
		// meanwhile, or another answer came first.
		c.emit(event{stage: stageDrifted, generation: gen, detail: why})
		if current() {
			r.drifted.CompareAndSwap(was, &why)
		}
	}
}

// mended clears a refusal of the topology declared again, once the broker
// takes it (declared again, or at a new session), and says so first.
func (c *Consumer) mended(r *run) {
	if was := r.drifted.Load(); was != nil {
		c.emit(event{stage: stageMended, detail: "the broker took the topology again"})
		r.drifted.CompareAndSwap(was, nil)
	}
}

// maxRefusalsTold bounds the refusals a topology-drifted line and Health
// name; the rest are counted.
const maxRefusalsTold = 4

// refusalsText tells refusals, in the order they were met, each bounded as
// a cause is: the first maxRefusalsTold of them, and how many more.
func refusalsText(refusals []error) string {
	told := make([]string, 0, maxRefusalsTold+1)
	for i, err := range refusals {
		if i == maxRefusalsTold {
			told = append(told, fmt.Sprintf("and %d more refused", len(refusals)-i))
			break
		}
		told = append(told, sanitize.Text(err.Error(), decide.MaxCause))
	}
	return strings.Join(told, "; ")
}
