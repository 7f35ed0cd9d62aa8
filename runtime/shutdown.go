package runtime

import (
	"context"
	"errors"
	"os"
	"sync"
	"time"

	"github.com/lily-mq/lily/internal/sanitize"
)

// shutdown runs the stop phases after intake has stopped (stopIntake cancelled
// the consumer and requeued what was received but not started) and returns
// the report:
//
//  1. cooperative window (ShutdownGrace, counted from the moment intake
//     began to stop): in-flight work runs and settles normally; Force (a
//     second signal) ends it early, and a Force while intake stops leaves
//     none: the force window began then;
//  2. force notification: handlers' contexts are cancelled; settlement
//     authority stays valid on a healthy channel, so work that completes still
//     settles within ForceWindow (counted from the notification) and its own
//     budget;
//  3. final abort: every generation's authority is revoked, and no handler
//     starts any more; deliveries still in flight are reported unresolved
//     and the broker redelivers them when the channel closes;
//  4. close: the consumer channel is closed cleanly, and its close-ok proves
//     every ACK still waiting for proof; then the connections. Sessions
//     retired earlier (a broker cancel, a recycle) close too; the handoffs'
//     channel and connection close beside them, and Run waits for them
//     before it returns. The journeys still in a step of user code are
//     waited for. One step bounds the phase, so that a shutdown ends within
//     ShutdownGrace + ForceWindow + StepTimeout of the moment the Run
//     goroutine turned to the stop (docs/runtime.md, "Stopping", says what
//     can delay that, and a stop of intake longer than the grace); the user
//     code still running at its end (handlers, steps) is counted abandoned.
//
// s is nil when no session is open (lost, not yet reconnected).
func (c *Consumer) shutdown(r *run, s *session) *Report {
	r.stopOnce.Do(func() { close(r.stopping) })
	// Without a consuming session there was no cancel to wait for; with
	// one, stop intake has said so already.
	r.cancelledAtStop()
	finished := waitChan(&r.deliveries)
	forced := r.forced
	if forced == nil {
		end := c.phase(r, "cooperative window")
		left := c.cfg.ShutdownGrace
		if !r.stopAt.IsZero() {
			left -= time.Since(r.stopAt)
		}
		grace := time.NewTimer(left)
		select {
		case <-finished:
		case <-grace.C:
		case <-c.forceNow:
		}
		grace.Stop()
		end()
		if !closed(finished) {
			forced = c.startForce(r)
		}
	}
	if forced != nil {
		waitFor(finished, time.Until(forced.until))
		forced.end()
	}

	end := c.phase(r, "final abort")
	r.revokeAll()
	r.force()
	// Sealed before the abort is told: a handler that started between the
	// two would run with its context cancelled, to be abandoned at once.
	// Nothing that waits for the abort waits for the seal.
	r.handlers.seal()
	close(r.aborted)
	end()

	end = c.phase(r, "close")
	by := time.Now().Add(c.cfg.StepTimeout)
	r.closeBy = by
	// The handoffs close beside the session, by the same step: a close
	// that runs into a handoff still dialling ends the handoff's wait at
	// once, and does not wait for the dial, whose connection, should it
	// open, is closed by the dialling publish. Run waits for it, closing
	// them again.
	go c.closeHandoffs(r, by)
	if s != nil {
		c.closeSession(r, s, by)
	}
	r.retiring.Wait()
	// The deliveries still waiting for their order key, a lost session's
	// among them, were given up at the abort, one after another in their
	// lane: their records go into the report, within the step.
	waitFor(waitChan(&r.waiting), time.Until(by))
	// So do the journeys still in a step of user code (a commit, a
	// cleanup, after_delivery): the user code still running then, handlers
	// and steps, runs on after Run returns, and the report counts it.
	waitFor(finished, time.Until(by))
	end()
	return r.report.seal(c.spec.Name, r.handlers.running()+int(c.userSteps.Load()))
}

// forceWindow is the force window under way: the handlers' contexts are
// cancelled, and it ends at until, or once nothing is in flight.
type forceWindow struct {
	until time.Time
	end   func()
}

// startForce starts the force window: the force notification.
func (c *Consumer) startForce(r *run) *forceWindow {
	end := c.phase(r, "force window")
	r.force()
	return &forceWindow{until: time.Now().Add(c.cfg.ForceWindow), end: end}
}

// closeSession closes the consumer channel cleanly: its close-ok is the proof
// of every ACK sent on it before. A channel already lost proves nothing
// (amqp091 answers Close on a closed channel with nil): its ACKs are ambiguous.
func (c *Consumer) closeSession(r *run, s *session, by time.Time) {
	// Its cancel failed: what the client buffered since, the consumer
	// still registered, goes back with the close, and is listed, as is what
	// the broker sends until the close has returned (listWhileClosing).
	listed := c.listWhileClosing(r, s)
	s.stopProver()
	s.gen.Settler.Close()
	ctx, cancel := context.WithDeadline(context.Background(), by)
	defer cancel()
	var err error
	switch {
	case s.gone():
		// Lost during the shutdown: consume had already returned, so this
		// is the loss's only line and event.
		err = s.why
		c.intakeLost(r, s.gen.ID, err)
	case !s.gen.Settler.Stopped(ctx):
		// A write still running could reach the broker after channel.close,
		// which discards it: the close-ok would prove an ACK that never counted.
		err = errors.New("a settlement write did not return in time")
	default:
		c.hooks.beforeClose()
		s.closing.Store(true)
		if err = s.call(ctx, s.ch.Close); err == nil {
			err = s.closedCleanly(ctx)
		}
		if s.gone() {
			// Lost as it closed: the watcher had revoked the session, but
			// not yet marked it lost, when the close began.
			err = s.why
			c.intakeLost(r, s.gen.ID, err)
		}
	}
	if acks := s.gen.Acks.Close(); err == nil {
		c.acksProven(r, s.gen, acks)
	} else {
		c.acksAmbiguous(r, s.gen, acks, "the channel did not close cleanly: "+sanitize.Text(err.Error(), 120))
	}
	// Asked of the channel itself: the broker's close may be on its way to
	// the watcher still.
	c.release(s, by)
	listed()
	// Closed, or given up: no tag of it is used again, and the run may
	// forget it.
	s.gen.Revoke()
}

// closeHandoffs closes the handoffs' channel, and their connection unless it
// is the Publisher's, by by at most. Run closes them too, for the ends that
// bypass the shutdown; closing again waits for the close under way, which
// is how Run waits for the shutdown's.
func (c *Consumer) closeHandoffs(r *run, by time.Time) {
	r.handoff.CloseBy(by)
	if c.cfg.Publisher == nil {
		r.conn.CloseBy(by)
	}
}

// phase starts the shutdown phase name and returns what ends it: an event as
// it starts and one with its duration as it ends, so that the log shows each
// phase when it happens, and its line in the report.
func (c *Consumer) phase(r *run, name string) (end func()) {
	start := time.Now()
	c.emit(event{stage: stagePhase, detail: name + ": started"})
	return func() {
		took := time.Since(start)
		r.report.phase(name, took)
		c.emit(event{stage: stagePhase, detail: name + ": ended", duration: took})
	}
}

func waitChan(wg *sync.WaitGroup) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	return done
}

func closed(done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// waitFor reports whether done closed within d.
func waitFor(done <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return closed(done)
	}
}

// forceOnSignal forces the shutdown at a SIGINT or SIGTERM that arrives
// until the returned function is called. Run calls it once ctx is done:
// whatever stopped the consumer (a signal.NotifyContext, Serve, a cancel of
// the user's own), a signal now is the operator's second, so Run(ctx) forces
// as Serve does.
func (c *Consumer) forceOnSignal() (stop func()) {
	signals := make(chan os.Signal, 1)
	notifySignals(signals)
	done := make(chan struct{})
	go func() {
		select {
		case <-signals:
			c.Force()
		case <-done:
		}
	}()
	return func() {
		stopSignals(signals)
		close(done)
	}
}
