// Package confirm publishes mandatory on a confirm-mode channel of its own
// connection and reports the broker's answer to each publish: confirmed,
// returned (unroutable), nacked, or unknown. The consumer's handoffs and the
// user's Publisher both publish through it.
package confirm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/runtime/internal/guard"
	"github.com/lily-mq/lily/runtime/internal/outcome"
	"github.com/lily-mq/lily/runtime/internal/sanitize"
	"github.com/lily-mq/lily/runtime/internal/step"
)

// Publisher publishes mandatory on a confirm-mode channel, then waits for the
// confirm.
//
// A mandatory publish that cannot be routed is still confirmed with ack=true;
// only its Return tells the failure apart. The broker sends the Return before
// the confirm, and the client hands it to the buffered returns channel before
// it resolves the confirm, so after a confirm a non-blocking drain of that
// channel is certain to find the Return of its own publish. Each publish
// carries a unique publish id, and only this type reads the channel.
type Publisher struct {
	// dial opens the publisher's own connection, again after it was lost,
	// and returns its socket too.
	dial        func() (*amqp.Connection, net.Conn, error)
	stepTimeout time.Duration
	window      chan struct{} // bounds the publishes in flight
	// Backoff, when set, is the wait before the n-th attempt (from 1) to
	// connect again after an attempt failed: a publish then keeps trying
	// until its deadline or its context ends. When nil, a publish tries once.
	Backoff func(n int) time.Duration
	// BeforePublish and AfterPublish are test hooks around the publish.
	BeforePublish, AfterPublish func()
	idPrefix                    string
	seq                         atomic.Uint64

	mu      sync.Mutex // guards conn, socket, current and closed
	conn    *amqp.Connection
	socket  net.Conn // conn's
	current *channel
	closed  bool

	returnsMu sync.Mutex      // guards pending and serialises drains
	pending   map[string]bool // publish id → returned
}

type channel struct {
	ch      *amqp.Channel
	returns chan amqp.Return
	// socket is the connection's: closing it ends a write that is stuck.
	socket net.Conn
	// broken is set before the socket is closed. The client notices a closed
	// socket only when its reader next fails, so until then the channel and
	// the connection still say they are open; broken keeps the next publish
	// off them.
	broken atomic.Bool
	// unblocked is closed while the broker lets the connection publish, and
	// replaced by an open channel while it blocks it (connection.blocked, a
	// resource alarm): a write then would not be read.
	blockMu   sync.Mutex
	unblocked chan struct{}
}

// abandon closes the connection's socket under every publish on it, so the
// next publish opens a new connection.
func (c *channel) abandon() {
	c.broken.Store(true)
	_ = c.socket.Close()
}

// whenUnblocked is closed once the broker lets the connection publish.
func (c *channel) whenUnblocked() chan struct{} {
	c.blockMu.Lock()
	defer c.blockMu.Unlock()
	return c.unblocked
}

// follow keeps unblocked in step with the connection's blocked notifications
// until the connection closes, which releases any publish still waiting.
func (c *channel) follow(blockings <-chan amqp.Blocking) {
	for b := range blockings {
		c.blockMu.Lock()
		select {
		case <-c.unblocked:
			if b.Active {
				c.unblocked = make(chan struct{})
			}
		default:
			if !b.Active {
				close(c.unblocked)
			}
		}
		c.blockMu.Unlock()
	}
	c.blockMu.Lock()
	select {
	case <-c.unblocked:
	default:
		close(c.unblocked)
	}
	c.blockMu.Unlock()
}

// New returns a publisher that opens its connection with dial, bounds each
// broker step by stepTimeout and holds at most window publishes in flight.
func New(dial func() (*amqp.Connection, net.Conn, error), stepTimeout time.Duration, window int) *Publisher {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return &Publisher{
		dial:          dial,
		stepTimeout:   stepTimeout,
		BeforePublish: func() {},
		AfterPublish:  func() {},
		window:        make(chan struct{}, window),
		idPrefix:      hex.EncodeToString(b[:]) + "-",
		pending:       make(map[string]bool),
	}
}

// errClosed: the publisher was closed.
var errClosed = errors.New("the publisher has closed")

// channel returns the open confirm-mode channel, opening a new one (on a new
// connection if that was lost too) when the last one closed. Opening is bounded
// by the deadline; the lock keeps concurrent publishes from opening channels twice.
func (p *Publisher) channel(deadline time.Time) (*channel, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errClosed
	}
	if p.current != nil && p.current.broken.Load() {
		// Its socket is closed: the connection is gone too.
		p.conn, p.socket, p.current = nil, nil, nil
	}
	if p.current != nil && !p.current.ch.IsClosed() {
		return p.current, nil
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if p.conn == nil || p.conn.IsClosed() {
		type dialed struct {
			conn   *amqp.Connection
			socket net.Conn
		}
		d, err := step.Open(ctx, func() (dialed, error) {
			conn, socket, err := p.dial()
			return dialed{conn, socket}, err
		}, func(d dialed) { _ = d.conn.CloseDeadline(time.Now().Add(p.stepTimeout)) })
		if err != nil {
			return nil, err
		}
		p.conn, p.socket = d.conn, d.socket
	}
	ch, err := step.Open(ctx, p.conn.Channel, func(ch *amqp.Channel) { _ = ch.Close() })
	if err != nil {
		return nil, err
	}
	if err := step.DoErr(ctx, func() error { return ch.Confirm(false) }); err != nil {
		_ = ch.Close()
		return nil, err
	}
	// Every Return belongs to a publish in the window, and each drains the
	// buffer before and after its publish; four windows of room keep the
	// client from ever blocking on (and after 5 s dropping) a Return.
	returns := ch.NotifyReturn(make(chan amqp.Return, 4*cap(p.window)))
	c := &channel{ch: ch, returns: returns, socket: p.socket, unblocked: make(chan struct{})}
	close(c.unblocked)
	// The connection's blocked notifications go to each of its channels in
	// turn; a connection serves one channel at a time here, so each channel
	// follows its own.
	go c.follow(p.conn.NotifyBlocked(make(chan amqp.Blocking, 2)))
	p.current = c
	return c, nil
}

// connect is channel, again after the backoff while connecting fails, when
// the publisher has one: until the deadline, or done is closed.
func (p *Publisher) connect(deadline time.Time, done <-chan struct{}) (*channel, error) {
	for n := 1; ; n++ {
		c, err := p.channel(step.Deadline(p.stepTimeout, deadline))
		if err == nil || p.Backoff == nil || errors.Is(err, errClosed) {
			return c, err
		}
		wait := p.Backoff(n)
		if !deadline.IsZero() && time.Until(deadline) < wait {
			return nil, err
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-done:
			t.Stop()
			return nil, err
		}
	}
}

// Publish publishes msg mandatory to exchange with routing key key and
// reports what the broker said, by the deadline at the latest (none when
// zero: each broker step is still bounded) or until done is closed, which
// ends the waits before the write. writing runs just before the publish is
// written; when it returns false nothing is written. msg.Headers must be a
// table the caller owns: Publish adds the publish id to it. One timer bounds
// every wait: for a slot, for the publish and for the confirm.
func (p *Publisher) Publish(deadline time.Time, done <-chan struct{}, exchange, key string, msg amqp.Publishing, writing func() bool) outcome.HandoffEvidence {
	ev := outcome.HandoffEvidence{Destination: destination(exchange, key)}
	var expired <-chan time.Time
	if !deadline.IsZero() {
		timer := step.Timer(deadline)
		defer step.Release(timer)
		expired = timer.C
	}
	select {
	case p.window <- struct{}{}:
	case <-expired:
		ev.Status, ev.Detail = outcome.HandoffTimedOut, "no publish slot within the budget"
		return ev
	case <-done:
		ev.Status, ev.Detail = outcome.HandoffFailed, "stopped waiting for a publish slot"
		return ev
	}
	defer func() { <-p.window }()

	c, err := p.connect(deadline, done)
	if err != nil {
		ev.Status, ev.Detail = outcome.HandoffFailed, "open channel: "+sanitize.Text(err.Error(), 120)
		return ev
	}
	select {
	case <-c.whenUnblocked():
	default:
		select {
		case <-c.whenUnblocked():
		case <-expired:
			ev.Status, ev.Detail = outcome.HandoffTimedOut, "the broker blocks publishes (a resource alarm)"
			return ev
		case <-done:
			ev.Status, ev.Detail = outcome.HandoffFailed, "stopped waiting while the broker blocks publishes"
			return ev
		}
	}
	// The publish is a step of its own. Waiting for the channel (behind
	// another publish's dial) may have used the whole budget; a watchdog
	// armed with (almost) no time left would close the connection the other
	// publish just opened.
	publishBy := step.Deadline(p.stepTimeout, deadline)
	if time.Until(publishBy) < min(p.stepTimeout/4, 20*time.Millisecond) {
		ev.Status, ev.Detail = outcome.HandoffTimedOut, "no time left to publish"
		return ev
	}
	id := p.idPrefix + strconv.FormatUint(p.seq.Add(1), 36)
	msg.Headers[guard.HeaderHandoffID] = id
	p.expect(id)
	defer p.forget(id)
	p.drain(c)

	p.BeforePublish()
	if !writing() {
		ev.Status, ev.Detail = outcome.HandoffFailed, "the consumer closed before the publish"
		return ev
	}
	// amqp091's publish is not bounded by anything of ours, and its write
	// blocks while the broker does not read (a resource alarm, a dead peer).
	// A watchdog closes the socket at the step's end: the write then fails,
	// and so does the connection, unfit for publishing anyway. The publish
	// runs on this goroutine: handing each publish to another cost about a
	// tenth of the retry path's throughput.
	watchdog := time.AfterFunc(time.Until(publishBy), c.abandon)
	dc, err := c.ch.PublishWithDeferredConfirm(exchange, key, true, false, msg)
	if !watchdog.Stop() {
		// The watchdog may not have run yet; abandon again so the next
		// publish cannot find this channel. The write may still have
		// completed: the message may exist.
		c.abandon()
		ev.Status, ev.Detail, ev.Published = outcome.HandoffTimedOut, "the publish did not return in time", true
		return ev
	}
	if err != nil {
		if !errors.Is(err, amqp.ErrClosed) {
			// A failed write leaves the connection's framing unknown.
			c.abandon()
		}
		ev.Status, ev.Detail = outcome.HandoffFailed, "publish: "+sanitize.Text(err.Error(), 120)
		return ev
	}
	ev.Published = true
	p.AfterPublish()
	confirmBy := step.Timer(step.Deadline(p.stepTimeout, deadline))
	defer step.Release(confirmBy)
	select {
	case <-dc.Done():
	case <-confirmBy.C:
		ev.Status, ev.Detail = outcome.HandoffTimedOut, "no confirm in time"
		return ev
	case <-done:
		ev.Status, ev.Detail = outcome.HandoffTimedOut, "stopped waiting for the confirm"
		return ev
	}
	acked := dc.Acked()
	p.drain(c)
	switch {
	case p.returned(id):
		ev.Status, ev.Detail, ev.Published = outcome.HandoffReturned, "unroutable: "+unroutable(exchange, key), false
	case !acked && c.ch.IsClosed():
		ev.Status, ev.Detail = outcome.HandoffFailed, "channel closed before the confirm"
	case !acked:
		ev.Status, ev.Detail, ev.Published = outcome.HandoffNacked, "the broker refused the publish", false
	default:
		ev.Status = outcome.HandoffConfirmed
	}
	return ev
}

// destination names where a publish goes: the queue for the default
// exchange, as handoffs publish, else the exchange and the routing key.
func destination(exchange, key string) string {
	if exchange == "" {
		return key
	}
	return exchange + " " + key
}

// unroutable says why the broker returned a publish, bounded and sanitized.
func unroutable(exchange, key string) string {
	if exchange == "" {
		return "no queue named " + sanitize.Text(key, 120)
	}
	return "exchange " + sanitize.Text(exchange, 120) + " routes key " + sanitize.Text(key, 120) + " to no queue"
}

// Pending counts the publish ids still waiting for their confirm or Return:
// none once every Publish has returned.
func (p *Publisher) Pending() int {
	p.returnsMu.Lock()
	defer p.returnsMu.Unlock()
	return len(p.pending)
}

func (p *Publisher) expect(id string) {
	p.returnsMu.Lock()
	p.pending[id] = false
	p.returnsMu.Unlock()
}

func (p *Publisher) forget(id string) {
	p.returnsMu.Lock()
	delete(p.pending, id)
	p.returnsMu.Unlock()
}

func (p *Publisher) returned(id string) bool {
	p.returnsMu.Lock()
	defer p.returnsMu.Unlock()
	return p.pending[id]
}

// drain records every Return already buffered. A Return whose publish has
// already given up waiting matches no pending id and is dropped.
func (p *Publisher) drain(c *channel) {
	p.returnsMu.Lock()
	defer p.returnsMu.Unlock()
	for {
		select {
		case r, ok := <-c.returns:
			if !ok {
				return
			}
			id, _ := r.Headers[guard.HeaderHandoffID].(string)
			if _, waiting := p.pending[id]; waiting {
				p.pending[id] = true
			}
		default:
			return
		}
	}
}

// Close closes the publisher's connection; publishes still waiting resolve as failed.
func (p *Publisher) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	if p.conn != nil {
		// Bounded: the broker may not read a blocked connection (a resource
		// alarm) until the alarm clears, so the close-ok could wait as long.
		_ = p.conn.CloseDeadline(time.Now().Add(p.stepTimeout))
	}
}
