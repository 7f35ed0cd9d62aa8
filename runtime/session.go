package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/internal/sanitize"
	"github.com/lily-mq/lily/runtime/internal/decide"
	"github.com/lily-mq/lily/runtime/internal/settle"
	"github.com/lily-mq/lily/runtime/internal/step"
)

// session is one connection and its consumer channel: one generation.
type session struct {
	gen *settle.Generation
	// link is the connection the channel is on, which other sessions may
	// share.
	link       *link
	ch         *amqp.Channel
	tag        string
	deliveries <-chan amqp.Delivery
	started    time.Time
	// rpc serialises synchronous calls on ch: amqp091 hands a reply to
	// whichever call waits first, so two at once could take each other's.
	rpc sync.Mutex
	// lost is closed by the watcher when the broker ends the session under us;
	// why says how: a consumer cancel (the channel stays healthy), or the
	// channel or connection closing with an error, which revokes the session's
	// authority at that moment.
	lost chan struct{}
	why  error
	// broken is set as the session's authority is revoked for its channel
	// or connection's loss (revokeLost), not the final abort's: what waits
	// on it then tells the loss.
	broken atomic.Bool
	// lostAfterCancel tells of a loss that follows a consumer cancel: the
	// session was already lost, and only this says the channel went too.
	lostAfterCancel func(why error)
	// chEnded is closed by the watcher once the consumer channel has closed;
	// chErr is the error it closed with, nil when our own close ended it.
	chEnded chan struct{}
	chErr   *amqp.Error
	// closing is set before Lily closes the channel: only then is an end
	// without an error its own close.
	closing atomic.Bool
	// released is set once the session's end is judged and its connection
	// about to be released: what the channel does after that reports
	// nothing more.
	released atomic.Bool
	// prover runs the session's proofs (startProver); proving is held while
	// one runs, so that stopProver returns only once none runs or will.
	prover        *time.Timer
	proving       sync.Mutex
	proverStopped bool
	// stopAsking cancels the prover's question of the queue for its
	// starvation, and asking waits for it to end.
	stopAsking context.CancelFunc
	asking     sync.WaitGroup
	// outlived is closed (once, by the prover) when the channel is to be
	// recycled, recycled saying why: a delivery received on it is still
	// unsettled a budget and a step later (errRecycled), or the queue
	// starves it (errStarved).
	outlived     chan struct{}
	outlivedOnce sync.Once
	recycled     error
	// idle is what the prover last saw of the channel's deliveries, for
	// the starvation watch; the prover's alone. retired is set once the
	// session's intake ended (retire): nothing feeds its channel any more,
	// by design, and the watch no longer applies.
	idle    idleWatch
	retired atomic.Bool
	// declared is when the topology was last declared for the session, and
	// redeclaring whether it is being declared again (drift.go), which
	// stopRedeclare cancels; under proving.
	declared      time.Time
	redeclaring   bool
	stopRedeclare context.CancelFunc
	// unanswered is when the declare outstanding that ran past its step
	// began (Unix nanoseconds; 0: none does), for Health: written under
	// proving, read without it.
	unanswered atomic.Int64
	// missing are the external exchanges the declare found missing as the
	// session opened after the run had consumed, and went on past
	// (Consumer.open); reconnect tells them as a drift.
	missing []error
	// inflight counts the session's deliveries still on their journey.
	inflight sync.WaitGroup
	// cancelled is closed once the session's intake is cancelled (by Lily,
	// or, on a session the broker cancelled, at the recycle bound: retire):
	// the deliveries waiting for their order key are requeued then.
	cancelled  chan struct{}
	cancelOnce sync.Once
	// unrequeued is set when the cancel of its intake failed: why what the
	// client buffered was not requeued, listed again as the channel closes.
	unrequeued string
}

// awaitCancelAtStop waits, once the consumer stops, until the session's
// intake has ended (our cancel answered, or failed; the broker's cancel;
// the channel lost), and then until stop intake's cancel of the consuming
// session, which may be another, has returned; or until the consumer
// aborts. What goes back to the queue at the stop goes after the cancel, as
// what was received and not started does, or the broker would hand it
// straight back to this consumer: a session the broker cancelled earlier
// (retired) has its intake ended already, but its requeue, sent before the
// stop's cancel, would reach the consuming session, behind its key's later
// messages. A session whose authority is revoked sends nothing, and waits
// no longer. s is nil in a trial, which has no cancel to wait for.
func (s *session) awaitCancelAtStop(r *run) {
	if s == nil || !closed(r.stopping) {
		return
	}
	select {
	case <-s.cancelled:
	case <-s.lost:
	case <-s.gen.Ended():
		return
	case <-r.aborted:
		return
	}
	select {
	case <-r.stopCancelled:
	case <-s.gen.Ended():
	case <-r.aborted:
	}
}

// endWaiting marks the session's intake cancelled, once: the deliveries
// waiting for their order key or a slot on it are requeued, each behind the
// one before it in its lane.
func (s *session) endWaiting() { s.cancelOnce.Do(func() { close(s.cancelled) }) }

// recycleFor has the channel recycled, for why, unless it already is.
func (s *session) recycleFor(why error) {
	s.outlivedOnce.Do(func() {
		s.recycled = why
		close(s.outlived)
	})
}

// call runs one synchronous method on the consumer channel, bounded by ctx.
func (s *session) call(ctx context.Context, method func() error) error {
	return step.DoErr(ctx, func() error {
		s.rpc.Lock()
		defer s.rpc.Unlock()
		return method()
	})
}

// watch follows the session until its consumer channel has closed. A
// consumer cancel marks it lost and leaves the channel healthy; the channel
// closing with an error (its connection's, when that is lost), or Lily
// closing its connection under it, before or after a cancel, revokes the
// generation at once, so no handoff starts that could never be followed by
// its ACK. A cancel of a tag that is not the session's cancels nothing
// (amqp091 has no consumer of that tag to end, and ours goes on
// delivering): foreign is told of the first, and the rest are ignored.
//
// cancelled is read until the channel closes, a cancel of ours after the
// first too: amqp091 sends each cancel to it from the connection's reader,
// which waits up to 5 s on a send that finds it full, and every frame of
// every channel on the connection waits with it.
func (s *session) watch(chClosed chan *amqp.Error, cancelled chan string, foreign func(tag string)) {
	defer close(s.chEnded)
	killed := s.link.killed
	for told := false; chClosed != nil; {
		select {
		case tag, ok := <-cancelled:
			switch {
			case !ok:
				cancelled = nil // closed with the channel
			case tag == s.tag:
				s.lose(errCancelled) // once: a repeat changes nothing
			case !told:
				told = true
				foreign(tag)
			}
		case <-killed:
			killed = nil
			s.chErr = errLinkKilled
			s.broke(errLinkKilled)
		case err, ok := <-chClosed:
			chClosed = nil
			if s.chErr != nil {
				break // the kill, told already
			}
			if !ok && (!s.closing.Load() || closed(s.link.killed)) {
				// Ended without an error, but not by our own close.
				err, ok = errLinkKilled, true
			}
			if ok {
				s.chErr = err
				s.broke(err)
			}
		}
	}
}

// errLinkKilled is how a channel ends whose connection Lily closed because
// a channel on it could not be closed (see links.release).
var errLinkKilled = &amqp.Error{Code: amqp.ConnectionForced, Reason: "Lily closed the consuming connection: a channel on it did not close cleanly"}

// broke revokes the session's authority: the broker closed its channel or
// connection with err.
func (s *session) broke(err *amqp.Error) {
	s.revokeLost()
	if s.released.Load() {
		return // its end was judged, and its closing may take the connection
	}
	why := fmt.Errorf("lily: the consumer channel closed: %w", err)
	// RabbitMQ's text for it, the same from 3.10 to 4.2 (rabbit_channel's
	// handle_consumer_timed_out): not any 406 that says "timeout".
	if err.Code == amqp.PreconditionFailed && strings.HasPrefix(err.Reason, "PRECONDITION_FAILED - delivery acknowledgement on channel ") &&
		strings.Contains(err.Reason, " timed out.") {
		why = fmt.Errorf("lily: the broker's consumer_timeout closed the channel (a delivery was held too long): %w", err)
	}
	if !s.lose(why) {
		s.lostAfterCancel(why)
	}
}

// revokeLost revokes the session's authority: its channel or connection
// was lost.
func (s *session) revokeLost() {
	s.broken.Store(true)
	s.gen.Revoke()
}

// lose marks the session lost for why and reports true, unless it already
// was; only the watcher calls it.
func (s *session) lose(why error) bool {
	if closed(s.lost) {
		return false
	}
	s.why = why
	close(s.lost)
	return true
}

// closedCleanly waits, until ctx ends, for the watcher to see the consumer
// channel's end, and says whether our close ended it: amqp091's Close answers
// nil for a channel that had already closed under it, so only the channel's
// own end proves the ACKs sent on it.
func (s *session) closedCleanly(ctx context.Context) error {
	select {
	case <-s.chEnded:
	case <-ctx.Done():
		// A channel that had ended by then is judged by how it ended,
		// whichever case the select picked.
		select {
		case <-s.chEnded:
		default:
			return step.ErrTimeout
		}
	}
	if s.chErr != nil {
		return fmt.Errorf("the channel had closed: %w", s.chErr)
	}
	return nil
}

// intake is a delivery taken for its journey, with its concurrency slot.
type intake struct {
	d  amqp.Delivery
	sl slot
}

// slot is one of the consumer's concurrency slots, held by a delivery's
// goroutine and by its handler's: a handler that outlives its timeout keeps
// the slot until it returns, so hung handlers cannot pile up without bound.
type slot struct {
	holders atomic.Int32
	slots   chan struct{} // the run's: release frees one
	// owed: a retry in line took no slot back after its wait (the stop, or
	// the end of what its budget allowed, came first), so the last release
	// has none to free.
	owed atomic.Bool
	// left: the journey gave its share back (leave); the journey's
	// goroutine alone reads and writes it.
	left bool
	// lane lets the next delivery of an ordered journey's key take its
	// turn (nil once called, and on a queue without an OrderKey); the
	// journey's goroutine alone calls it, by leaveLane.
	lane func()
	// turn is the journey's place in its key's lane (nil without one),
	// which its user code holds while it runs (holdLane): a handler past
	// its timeout, or a scope step given up on, keeps the key's next
	// delivery from starting until it returns, within the budget.
	turn *turn
}

func (s *slot) hold() { s.holders.Add(1) }

// leave gives the journey's share of the slot back, once: as soon as its
// delivery is settled and recorded, and again, doing nothing then, as the
// journey's goroutine ends (which a runtime.Goexit in user code may make
// sooner).
func (s *slot) leave() {
	if !s.left {
		s.left = true
		s.release()
	}
}

// leaveLane lets the next delivery of the journey's order key take its
// turn, once: as soon as its delivery is settled and recorded, and again,
// doing nothing then, as the journey's goroutine ends.
func (s *slot) leaveLane() {
	if lane := s.lane; lane != nil {
		s.lane = nil
		lane()
	}
}

// holdLane holds the journey's turn in its lane while a step of its user
// code runs, and returns what gives it back when the step returns.
func (s *slot) holdLane() (release func()) {
	if s == nil {
		return func() {}
	}
	return s.turn.hold()
}

func (s *slot) release() {
	if s.holders.Add(-1) == 0 && !s.owed.Swap(false) {
		<-s.slots
	}
}

// lend gives the journey's share of the slot back while wait runs, so that
// other keys run on while a retry waits in line, and holds it again after:
// a slot is taken anew unless a handler of the delivery, past its timeout,
// still holds the old one. It reports false when wait did, or when stop or
// lost came, or the moment by passed, before a slot was free.
func (s *slot) lend(wait func() bool, stop, lost <-chan struct{}, by time.Time) bool {
	s.release()
	ok := wait()
	if s.holders.Add(1) > 1 {
		return ok
	}
	if ok {
		t := step.Timer(by)
		defer step.Release(t)
		select {
		case s.slots <- struct{}{}:
			return true
		case <-stop:
		case <-lost:
		case <-t.C:
		}
	}
	s.owed.Store(true)
	return false
}

// connect opens a session: lease a consuming connection (dialing it when
// there is none to share), declare the topology, open the consumer channel,
// set prefetch and start consuming. Every step is bounded, and ctx ending
// stops the attempt. A node that takes the connection but cannot serve it
// (the declare or the consume fails or hangs, as on a node cut off from its
// cluster's majority) is passed over for the next URL, each dialed once (a
// refusal the broker answers on the channel is no reason to); a
// shared connection that fails this session (it was dying as it was leased)
// is passed over without using up a URL's turn, up to once more than there
// are URLs.
func (c *Consumer) connect(ctx context.Context, r *run) (*session, error) {
	var errs []error
	urls := len(c.links.dialer.cfg.URLs)
	for dialed, reusedFailed := 0, 0; dialed < urls && reusedFailed <= urls; {
		s, served, reused, err := c.connectOnce(ctx, r)
		if err == nil {
			return s, nil
		}
		errs = append(errs, err)
		if served == nil || refused(err) || answered(err) || ctx.Err() != nil {
			break
		}
		c.links.passOver(served)
		if reused {
			reusedFailed++
		} else {
			dialed++
		}
	}
	return nil, errors.Join(errs...)
}

// lastAttempt is the error of connect's last attempt, of the errors it
// joins: a refusal or an answer on the channel ends its attempts, so it is
// that one when one did, whatever nodes passed over before it said.
func lastAttempt(err error) error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		if errs := j.Unwrap(); len(errs) > 0 {
			return errs[len(errs)-1]
		}
	}
	return err
}

// answered reports a refusal the broker sent on the channel alone (403, an
// exclusive consumer's queue; 404; 405): the node served the session, and
// another would answer the same. Passing over it would move every session
// that shares its connection for nothing.
func answered(err error) bool {
	var ae *amqp.Error
	return errors.As(err, &ae) && ae.Server && ae.Recover
}

// servedError is the error of a session's opening on a connection a node
// took: the dial and the login went through, and a step on it failed.
type servedError struct{ error }

func (e *servedError) Unwrap() error { return e.error }

// stalled reports whether connect's last attempt failed on a connection a
// node took because a step of the session's opening (the declare, the
// consume) did not answer in time, as for a quorum queue without a leader
// or on a node cut off from its cluster's majority: the queue is out of
// reach, not misdeployed, and the broker is there.
func stalled(last error) bool {
	var se *servedError
	return errors.As(last, &se) && errors.Is(se.error, step.ErrTimeout)
}

// dropped reports whether connect's last attempt failed because the
// connection a node took closed under the session's opening (the peer's EOF
// or reset, the broker's 320 as its node restarts, any error that ends a
// connection): the dial and the login went through, so the deployment is
// not at fault, and the next attempt may well find the node back.
func dropped(last error) bool {
	var se *servedError
	if !errors.As(last, &se) {
		return false
	}
	var ae *amqp.Error
	if errors.As(se.error, &ae) {
		return !ae.Recover
	}
	var ne *net.OpError
	return errors.As(se.error, &ne) || errors.Is(se.error, io.EOF) || errors.Is(se.error, io.ErrUnexpectedEOF)
}

// connectOnce is one attempt of connect. When it fails after a node took
// the connection, served is that connection, and reused says another session
// had opened it.
func (c *Consumer) connectOnce(ctx context.Context, r *run) (_ *session, served *link, reused bool, _ error) {
	l, reused, err := c.links.lease(ctx)
	if err != nil {
		return nil, nil, false, err
	}
	s, err := c.open(ctx, r, l)
	if err != nil {
		return nil, l, reused, &servedError{err}
	}
	c.startProver(r, s)
	c.emit(event{stage: stageConnected, generation: s.gen.ID})
	return s, nil, false, nil
}

// open opens the session's channel on l and starts consuming. When it fails,
// it has closed a channel it opened and released l. A close not answered
// in time (its channel process blocked, as in a consume of a quorum queue
// without a leader) leaves l to the sessions on it, passed over: the
// broker handles a channel's methods in order, so a consume that succeeds
// late is followed by the close, which hands back what it delivered, and
// a close it never handles follows a consume it never did. A close the
// writer could not send ends the connection, coalesced when shared, within
// a step; one of its own ends with its last session, this one.
func (c *Consumer) open(ctx context.Context, r *run, l *link) (_ *session, err error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.StepTimeout)
	defer cancel()
	var ch *amqp.Channel
	defer func() {
		if err != nil {
			by := time.Now().Add(c.cfg.StepTimeout)
			if ch != nil && closeChannel(ch, by) != nil {
				// The close goes on in the background until answered or
				// the connection ends.
				c.links.passOver(l)
			}
			c.links.release(l, by, false)
		}
	}()
	missing, err := step.Do(ctx, func() ([]error, error) {
		return declareAtOpen(l.conn, c.spec, r.consumed.Load())
	})
	if err != nil {
		return nil, fmt.Errorf("lily: %w", err)
	}
	ch, err = step.Open(ctx, l.conn.Channel, func(late *amqp.Channel) { _ = closeChannel(late, time.Now().Add(c.cfg.StepTimeout)) })
	if err != nil {
		return nil, fmt.Errorf("lily: open consumer channel: %w", err)
	}
	if err := step.DoErr(ctx, func() error { return ch.Qos(c.spec.Prefetch, 0, false) }); err != nil {
		return nil, fmt.Errorf("lily: set prefetch: %w", err)
	}
	s := &session{
		gen: r.newGeneration(), link: l, ch: ch, tag: consumerTag(c.spec.Name), started: time.Now(), declared: time.Now(),
		lost: make(chan struct{}), chEnded: make(chan struct{}),
		outlived: make(chan struct{}), cancelled: make(chan struct{}),
		missing: missing,
	}
	s.lostAfterCancel = func(why error) { c.intakeLost(r, s.gen.ID, why) }
	chClosed := ch.NotifyClose(make(chan *amqp.Error, 1))
	cancelled := ch.NotifyCancel(make(chan string, 1))
	s.deliveries, err = step.Do(ctx, func() (<-chan amqp.Delivery, error) {
		return ch.Consume(c.spec.Name, s.tag, false, false, false, false, c.consumeArgs())
	})
	if err != nil {
		// Revoked, so that the run forgets it: a consume refused on every
		// reconnect (another consumer's exclusive hold) made one a time.
		s.gen.Revoke()
		return nil, fmt.Errorf("lily: consume %s: %w", c.spec.Name, err)
	}
	var acker settle.Acker = ch
	if c.hooks.acker != nil {
		acker = c.hooks.acker(ch)
	}
	s.gen.Settler = settle.NewSettler(acker, s.gen, c.spec.Prefetch)
	go s.watch(chClosed, cancelled, func(tag string) {
		c.cfg.Logger.Warn("lily ignored the broker's cancel of a consumer tag not its channel's", "queue", c.spec.Name,
			"detail", "tag "+sanitize.Text(tag, decide.MaxCause))
	})
	return s, nil
}

// declareAtOpen declares q's topology on conn as a session opens, and
// returns the external exchanges it went on past. Once a session of the run
// has consumed, an external exchange found missing is another team's
// deletion that left the queue consumed while the connection lasted: the
// declare goes on past it, as the declare while consuming does, and the
// session opens. The first session still stops at it (a misspelt exchange
// is the deployment's), and every session at any other refusal: a 406 of
// our own queue or DLQ, a 403, a missing external queue may send messages
// nowhere. The error of such a refusal names the exchanges gone on past
// before it too: each waits for its owner as much as the refusal does.
func declareAtOpen(conn *amqp.Connection, q QueueSpec, consumed bool) (missing []error, err error) {
	d := declarer{conn: conn}
	if consumed {
		d.goOn = exchangeGone
	}
	if err := d.topology(q); err != nil {
		if len(d.refusals) > 0 {
			err = fmt.Errorf("%w; and before it, %s", err, refusalsText(d.refusals))
		}
		return nil, err
	}
	return d.refusals, nil
}

// closeChannel closes ch, waiting for the broker's close-ok no later than
// by. nil means it is closed: by us, or already by the broker.
func closeChannel(ch *amqp.Channel, by time.Time) error {
	ctx, cancel := context.WithDeadline(context.Background(), by)
	defer cancel()
	return step.DoErr(ctx, ch.Close)
}

// gone reports whether the broker closed the session's channel or connection
// under us (a consumer cancel leaves the channel healthy).
func (s *session) gone() bool {
	select {
	case <-s.lost:
		return !errors.Is(s.why, errCancelled)
	default:
		return false
	}
}

// stopProver stops the session's prover and waits for it, so that no proof
// runs once the session's end is being judged, and no question about the
// queue outlives the session on a connection it has released.
func (s *session) stopProver() {
	s.proving.Lock()
	s.proverStopped = true
	s.prover.Stop()
	if s.stopAsking != nil {
		s.stopAsking()
	}
	if s.stopRedeclare != nil {
		s.stopRedeclare()
	}
	s.proving.Unlock()
	s.asking.Wait()
}

// lost ends a session that died under us: its authority is revoked, its
// unproven ACKs are ambiguous, and its connection is released.
func (c *Consumer) lost(r *run, s *session, why error) {
	s.revokeLost()
	s.stopProver()
	s.gen.Settler.Close()
	c.intakeLost(r, s.gen.ID, why)
	c.acksAmbiguous(r, s.gen, s.gen.Acks.Close(), "the channel was lost before the proof")
	c.release(s, time.Now().Add(c.cfg.StepTimeout))
}

// release gives up s's connection once its end is judged, by by at most. A
// channel still open (intake ended without the broker closing it: a cancel
// that did not return, a close that timed out) is closed first, or takes
// the connection with it: deliveries taken on it may be held there.
func (c *Consumer) release(s *session, by time.Time) {
	s.released.Store(true)
	closed := s.ch.IsClosed()
	if !closed {
		s.closing.Store(true)
		closed = closeChannel(s.ch, by) == nil
	}
	c.links.release(s.link, by, !closed)
}

// refused records the broker's refusal of the topology at a reconnect: in
// the report's lost intake, and at error, since it waits for a person.
func (c *Consumer) refused(r *run, why error) {
	detail := c.intakeEnded(r, 0, stageRefused, why)
	r.refusal.Store(&detail)
}

// intakeLost tells why intake stopped (gen is the session's generation, 0
// when no session opened).
func (c *Consumer) intakeLost(r *run, gen uint64, why error) { c.intakeEnded(r, gen, stageLost, why) }

// intakeEnded records why intake stopped or did not start: a line in
// Report.Lost, then the event at stage, so that a reader of the event finds
// the line already there. It returns the line.
func (c *Consumer) intakeEnded(r *run, gen uint64, at stage, why error) string {
	detail := sanitize.Text(why.Error(), decide.MaxCause)
	r.report.lostIntake(detail)
	c.telemetry.lost(c.spec.Name, detail)
	c.emit(event{stage: at, generation: gen, detail: detail})
	return detail
}
