package confirm

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/runtime/internal/step"
	"github.com/lily-mq/lily/runtime/internal/transport"
)

// Conn is the connection publishers share: opened at the first need, and
// again after it was lost. It keeps what belongs to the connection, not to
// a channel: its socket and whether the broker blocks it.
//
// The broker bounds the channels of a connection (its channel_max, 2047 by
// default, as low as a hosted plan's 16), and the publishers sharing one
// hold a channel each, and open another to look for an exchange: a channel
// that finds no channel id free opens on another connection, dialled as
// the first was, which closes once it holds no channel.
type Conn struct {
	// dial opens the connection and returns its socket too, and silent
	// (nil when there is none), which link.abandonSilent calls.
	dial        func() (conn *amqp.Connection, socket net.Conn, silent func(), err error)
	stepTimeout time.Duration

	// Backoff, when set, is the wait after the n-th dial in a row that
	// failed (from 1): until it has passed, publishes get that failure
	// instead of dialling again. When nil, a publish may dial at once.
	Backoff func(n int) time.Duration

	mu sync.Mutex // guards the fields below and each link's opening, channels and full
	// links are the connections open: a channel opens on the first with a
	// channel id free. Each after the first was dialled when those before
	// it had none, and closes once it holds no channel.
	links []*link
	// dialing is closed when the dial under way ends; nil when none is.
	// One dial at a time, and each publish waits for it only as long as
	// its own bound allows.
	dialing chan struct{}
	closed  bool
	// closing is closed with closed set: it ends every wait of a publish
	// for the connection (a dial, another publish's dial, a blocked broker,
	// the publisher's backoff), which then fails at once rather than wait
	// its own bound out after Close.
	closing chan struct{}
	// shut is closed once the close under way has ended, every
	// connection's close returned: a second close waits for it.
	shut chan struct{}
	// dials counts the dials ended: a publish that waited for one takes
	// its outcome rather than dial again at once.
	dials uint64
	// failed is the last failure of a dial, lastFailed whether the last
	// dial ended so, failures the dials failed in a row, and retryAt the
	// moment before which no dial follows them.
	failed     error
	lastFailed bool
	failures   int
	retryAt    time.Time
}

// link is one connection of a Conn.
type link struct {
	conn *amqp.Connection
	// socket is the connection's: closing it ends a write that is stuck.
	socket net.Conn
	// sent is when the socket last sent bytes (transport.Sent).
	sent func() time.Time
	// user is the user name the connection logged in with, or "" when
	// unknown: the only user_id the broker accepts on it.
	user string
	// silent, when not nil, moves the next dial on from the connection's
	// node: the broker left the connection unanswered.
	silent func()
	// broken is set before the socket is closed. The client notices a closed
	// socket only when its reader next fails, so until then the connection
	// still says it is open; broken keeps the next publish off it.
	broken atomic.Bool
	// unblocked is closed while the broker lets the connection publish, and
	// replaced by an open channel while it blocks it (connection.blocked, a
	// resource alarm): a write then would not be read. blockedSince is when
	// the block began and blockedWhy the reason the broker gave, while it
	// lasts.
	blockMu      sync.Mutex
	unblocked    chan struct{}
	blockedSince time.Time
	blockedWhy   string
	// opening counts the channels publishes are opening on the connection,
	// channels those open on it; full is set when one found no channel id
	// free, until one of its channels closes.
	opening, channels int
	full              bool
}

// errClosed: the publisher was closed.
var errClosed = errors.New("the publisher has closed")

// errStopped: the publish stopped waiting (its Done) for the channel another
// publish was opening.
var errStopped = errors.New("stopped waiting for a channel")

// awaitOpen waits for opening, closed when another publish's dial or
// channel open has ended (either way), until by, until done is closed or
// until c closes.
func (c *Conn) awaitOpen(opening <-chan struct{}, by time.Time, done <-chan struct{}) error {
	t := step.Timer(by)
	defer step.Release(t)
	select {
	case <-opening:
		return nil
	case <-t.C:
		return step.ErrTimeout
	case <-done:
		if passed(by) {
			return step.ErrTimeout
		}
		return errStopped
	case <-c.closing:
		return errClosed
	}
}

// until is a context that ends at the moment by, when done is closed, or
// when c closes.
func (c *Conn) until(by time.Time, done <-chan struct{}) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithDeadline(context.Background(), by)
	go func() {
		select {
		case <-done:
			cancel()
		case <-c.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// NewConn returns a connection that dial opens, each step of opening it
// bounded by stepTimeout. dial returns the connection's socket too, and
// silent (or nil), called once when the connection is abandoned because the
// broker left it unanswered for a whole step.
func NewConn(dial func() (conn *amqp.Connection, socket net.Conn, silent func(), err error), stepTimeout time.Duration) *Conn {
	return &Conn{dial: dial, stepTimeout: stepTimeout, closing: make(chan struct{})}
}

// link returns the first open connection with a channel id free, dialling
// one by the deadline when there is none, counted as opening a channel
// until opened says it has ended; a dial under way for another publish is
// waited for, until the deadline. Either wait ends when done is closed.
func (c *Conn) link(deadline time.Time, done <-chan struct{}) (*link, error) {
	by := step.Deadline(c.stepTimeout, deadline)
	var waited *uint64 // the dials ended when this publish began to wait
	for {
		c.mu.Lock()
		free := c.free()
		switch {
		case c.closed:
			c.mu.Unlock()
			return nil, errClosed
		case free != nil:
			l := free
			l.opening++
			c.mu.Unlock()
			return l, nil
		case c.failed != nil && (waited != nil && c.dials != *waited && c.lastFailed || time.Now().Before(c.retryAt)):
			// The dial waited for failed, or the last one did so recently:
			// a broker that refuses is not asked again by every publish.
			err := c.failed
			c.mu.Unlock()
			return nil, err
		case c.dialing != nil:
			dialing, dials := c.dialing, c.dials
			c.mu.Unlock()
			if err := c.awaitOpen(dialing, by, done); err != nil {
				return nil, err
			}
			waited = &dials
			continue
		}
		c.dialing = make(chan struct{})
		c.mu.Unlock()
		l, unused, err := c.dialOnce(by, done)
		if unused != nil {
			_ = unused.conn.CloseDeadline(time.Now().Add(c.stepTimeout))
		}
		return l, err
	}
}

// dialOnce is link's dial, by the publish that set c.dialing; unused is a
// connection dialled as the Conn closed, for the caller to close. The dial
// ends, c.dialing closed and cleared, on a panic too (in the dial, the
// client or Backoff, which may log): the publishes waiting on it, and those
// after, dial again rather than wait on it until their bounds.
func (c *Conn) dialOnce(by time.Time, done <-chan struct{}) (l, unused *link, err error) {
	locked := false
	defer func() {
		if !locked {
			c.mu.Lock()
		}
		c.dials++
		close(c.dialing)
		c.dialing = nil
		c.mu.Unlock()
	}()
	began := time.Now()
	l, err = c.open(by, done)
	c.mu.Lock()
	locked = true
	c.lastFailed = false
	switch {
	case err == nil && c.closed:
		// Closed while it dialled: nobody would close this one.
		unused, l, err = l, nil, errClosed
	case c.closed:
		// The close may have cut the dial short: it proves nothing of
		// the broker.
		err = errClosed
	case err == nil:
		c.links = append(c.links, l)
		l.opening++
		c.failed, c.failures = nil, 0
	case errors.Is(err, step.ErrTimeout) && time.Since(began) < c.stepTimeout:
		// Cut short by this publish's own bounds: it proves nothing of
		// the broker.
	default:
		c.failed, c.lastFailed = err, true
		c.failures++
		if c.Backoff != nil {
			c.retryAt = time.Now().Add(c.Backoff(c.failures))
		}
	}
	return l, unused, err
}

// free drops the connections no publish may use any more and returns the
// first left with a channel id free, or nil. Under c.mu.
func (c *Conn) free() *link {
	c.links = slices.DeleteFunc(c.links, func(l *link) bool { return !l.usable() })
	for _, l := range c.links {
		if !l.full {
			return l
		}
	}
	return nil
}

// channel opens a channel on the first connection with a channel id free
// (link), then runs then on it within the same step, each step by the
// deadline, or until done is closed; on a connection the broker blocks,
// once it unblocks it. When then fails, the channel is closed. A broker
// that answers neither in a whole step, unblocked, will not read a publish
// either: the connection is abandoned, and the next channel opens on
// another, rather than hang on this one too. A bound of the caller's cut
// short proves nothing, nor does a blocked connection, which the broker
// reads again once the alarm clears.
func (c *Conn) channel(deadline time.Time, done <-chan struct{}, then func(*amqp.Channel) error) (*amqp.Channel, *link, error) {
	for {
		l, err := c.link(deadline, done)
		if err != nil {
			return nil, nil, err
		}
		if err := c.awaitUnblocked(l, deadline, done); err != nil {
			c.opened(l, false)
			return nil, nil, err
		}
		stepEnd := time.Now().Add(c.stepTimeout)
		ctx, cancel := c.until(step.Deadline(c.stepTimeout, deadline), done)
		ch, err := step.Open(ctx, func() (*amqp.Channel, error) {
			ch, err := l.conn.Channel()
			if err == nil {
				c.mu.Lock()
				l.channels++
				c.mu.Unlock()
				go c.hold(l, ch)
			}
			return ch, err
		}, func(ch *amqp.Channel) { _ = ch.Close() })
		c.opened(l, errors.Is(err, amqp.ErrChannelMax))
		if errors.Is(err, amqp.ErrChannelMax) {
			// Said by the client before it asked the broker anything.
			cancel()
			continue
		}
		if err == nil {
			err = step.DoErr(ctx, func() error { return then(ch) })
			if err != nil {
				// Nothing waits for the close-ok, which a dead peer never
				// sends.
				go ch.Close()
			}
		}
		cancel()
		if err != nil && closed(c.closing) {
			// The close may have cut the step short.
			return nil, nil, errClosed
		}
		if err != nil {
			if errors.Is(err, step.ErrTimeout) && !time.Now().Before(stepEnd) && closed(l.whenUnblocked()) {
				l.abandonSilent()
				err = &unansweredError{err}
			}
			return nil, nil, err
		}
		return ch, l, nil
	}
}

// unansweredError is a step the broker left unanswered for a whole step.
type unansweredError struct{ error }

func (e *unansweredError) Unwrap() error { return e.error }

// opened ends a channel's opening on l that link counted; full says it
// found no channel id free.
func (c *Conn) opened(l *link, full bool) {
	c.count(l, func() {
		l.opening--
		l.full = full
	})
}

// hold counts ch among l's channels until it closes, whoever closes it.
func (c *Conn) hold(l *link, ch *amqp.Channel) {
	for range ch.NotifyClose(make(chan *amqp.Error, 1)) {
	}
	c.count(l, func() {
		l.channels--
		l.full = false
	})
}

// count changes l's counts under c.mu, and closes l once that leaves it
// idle: on a goroutine of its own, since the caller may be a publish, whose
// bounds a broker that no longer answers must not stretch by a step.
func (c *Conn) count(l *link, change func()) {
	c.mu.Lock()
	change()
	idle := c.idle(l)
	c.mu.Unlock()
	if idle {
		go l.conn.CloseDeadline(time.Now().Add(c.stepTimeout))
	}
}

// idle reports whether l is a connection after the first that holds no
// channel and opens none, and drops it from c's for its close. Under c.mu.
func (c *Conn) idle(l *link) bool {
	i := slices.Index(c.links, l)
	if c.closed || i < 1 || l.opening > 0 || l.channels > 0 {
		return false
	}
	c.links = slices.Delete(c.links, i, i+1)
	return true
}

// open dials a connection by the moment by, or until done is closed.
func (c *Conn) open(by time.Time, done <-chan struct{}) (*link, error) {
	ctx, cancel := c.until(by, done)
	defer cancel()
	type dialed struct {
		conn   *amqp.Connection
		socket net.Conn
		silent func()
	}
	d, err := step.Open(ctx, func() (dialed, error) {
		conn, socket, silent, err := c.dial()
		return dialed{conn, socket, silent}, err
	}, func(d dialed) { _ = d.conn.CloseDeadline(time.Now().Add(c.stepTimeout)) })
	if err != nil {
		return nil, err
	}
	l := &link{conn: d.conn, socket: d.socket, user: user(d.conn), silent: d.silent, unblocked: make(chan struct{})}
	l.sent = func() time.Time { return transport.Sent(l.socket) }
	close(l.unblocked)
	// Registered before any channel opens, so no block goes unseen; the
	// client closes the notifications when the connection closes, which ends
	// follow.
	go l.follow(d.conn.NotifyBlocked(make(chan amqp.Blocking, 2)))
	return l, nil
}

// user is the user name conn logged in with, or "" when its mechanism does
// not say (EXTERNAL: the broker takes it from the client's certificate).
func user(conn *amqp.Connection) string {
	for _, auth := range conn.Config.SASL {
		switch a := auth.(type) {
		case *amqp.PlainAuth:
			return a.Username
		case *amqp.AMQPlainAuth:
			return a.Username
		}
	}
	return ""
}

// usable reports whether publishes may still use the connection.
func (l *link) usable() bool { return !l.broken.Load() && !l.conn.IsClosed() }

// abandon closes the connection's socket under every publish on it, so the
// next publish opens a new connection.
func (l *link) abandon() {
	l.broken.Store(true)
	_ = l.socket.Close()
}

// abandonSilent is abandon for a connection the broker left unanswered for
// a whole step: a node that completes the handshake and then answers
// nothing would otherwise take every dial while another node is listed.
// Only the connection's first abandon moves the next dial, so that a late
// second one cannot move it off a node that has answered since.
func (l *link) abandonSilent() {
	if !l.broken.Swap(true) && l.silent != nil {
		l.silent()
	}
	_ = l.socket.Close()
}

// abandonStalled is abandon for a write or a close that waited a whole
// step: the broker's silence, unless it blocks the connection, which says
// nothing of its node (an alarm blocks publishers on every node).
func (l *link) abandonStalled() {
	if closed(l.whenUnblocked()) {
		l.abandonSilent()
		return
	}
	l.abandon()
}

// watch arms a watchdog on a write the client may hold behind others. A
// step on, it abandons the connection (abandonStalled) if the socket has
// sent nothing for a whole step: the broker stopped reading. While bytes go
// out, a slow link moves the writes ahead, and it waits on, until by, when
// not zero, or until done is closed: the bounds of the publish, which a
// caller may need (a relay's row must not be published after its lease);
// it then abandons the connection, not its node. So it fires a step after
// it was armed at the soonest, never at a bound nearer than that, which
// would fail every publish sharing the connection for one caller's haste.
func (l *link) watch(stepTimeout time.Duration, by time.Time, done <-chan struct{}) *watchdog {
	w := &watchdog{l: l, step: stepTimeout, by: by, done: done}
	w.mu.Lock()
	w.t = time.AfterFunc(stepTimeout, w.check)
	w.mu.Unlock()
	return w
}

// watchdog is a write's watch (link.watch), one per publish: its state is
// kept in one value, which the publish path allocates once.
type watchdog struct {
	l    *link
	step time.Duration
	by   time.Time
	done <-chan struct{}

	mu             sync.Mutex
	stopped, fired bool
	t              *time.Timer
}

func (w *watchdog) check() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	now := time.Now()
	quiet := w.l.sent().Add(w.step)
	next := quiet
	if !w.by.IsZero() && w.by.Before(next) {
		next = w.by
	}
	if next.After(now) && !closed(w.done) {
		w.t.Reset(next.Sub(now))
		return
	}
	w.fired = true
	if quiet.After(now) {
		// Bytes go out: the node answers, over a slow link.
		w.l.abandon()
		return
	}
	w.l.abandonStalled()
}

// stop disarms the watchdog and reports whether it fired; it never fires
// after stop returns.
func (w *watchdog) stop() (fired bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	w.t.Stop()
	return w.fired
}

// whenUnblocked is closed once the broker lets the connection publish.
func (l *link) whenUnblocked() chan struct{} {
	l.blockMu.Lock()
	defer l.blockMu.Unlock()
	return l.unblocked
}

// follow keeps unblocked in step with the connection's blocked
// notifications until the connection closes, which releases any publish
// still waiting.
func (l *link) follow(blockings <-chan amqp.Blocking) {
	for b := range blockings {
		l.setBlocked(b)
	}
	l.setBlocked(amqp.Blocking{})
}

func (l *link) setBlocked(b amqp.Blocking) {
	l.blockMu.Lock()
	defer l.blockMu.Unlock()
	select {
	case <-l.unblocked:
		if b.Active {
			l.unblocked = make(chan struct{})
			l.blockedSince, l.blockedWhy = time.Now(), b.Reason
		}
	default:
		if !b.Active {
			close(l.unblocked)
			l.blockedSince, l.blockedWhy = time.Time{}, ""
		}
	}
}

// Blocked reports since when the broker has blocked publishes on a
// connection of c (connection.blocked, a resource alarm), the longest
// blocked, and the reason it gave, raw; the zero time while it blocks none.
func (c *Conn) Blocked() (since time.Time, reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range c.links {
		l.blockMu.Lock()
		if !l.blockedSince.IsZero() && (since.IsZero() || l.blockedSince.Before(since)) {
			since, reason = l.blockedSince, l.blockedWhy
		}
		l.blockMu.Unlock()
	}
	return since, reason
}

// Closing is closed when Close begins: a wait of the caller's own before a
// publish ends with it, as the publish's waits do.
func (c *Conn) Closing() <-chan struct{} { return c.closing }

// Close closes the connections within a step; publishes still waiting for
// their answer resolve as failed, those still waiting to publish (for a
// connection, its backoff, or a blocked broker) fail at once, and later
// ones fail.
func (c *Conn) Close() { c.CloseBy(time.Now().Add(c.stepTimeout)) }

// CloseBy is Close waiting for the broker's close-ok until by at most:
// the broker may not read a blocked connection (a resource alarm) until the
// alarm clears, so the close-ok could wait as long. It waits without the
// lock: a publish that needs the connection meanwhile fails at once, not
// once the close ends. Closing again closes nothing more, and waits for the
// close under way until by at most: its caller, too, may count the
// connections closed once it returns in time.
func (c *Conn) CloseBy(by time.Time) {
	c.mu.Lock()
	if c.closed {
		shut := c.shut
		c.mu.Unlock()
		awaitBy(shut, by)
		return
	}
	c.closed = true
	close(c.closing)
	shut := make(chan struct{})
	c.shut = shut
	defer close(shut)
	links := c.links
	c.links = nil
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, l := range links {
		wg.Go(func() { _ = l.conn.CloseDeadline(by) })
	}
	wg.Wait()
}

// awaitBy waits until done is closed, or until by.
func awaitBy(done <-chan struct{}, by time.Time) {
	t := step.Timer(by)
	defer step.Release(t)
	select {
	case <-done:
	case <-t.C:
	}
}
