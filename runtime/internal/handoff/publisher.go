// Package handoff moves a failed message to a retry bucket or the DLQ: a copy
// built from the original, published mandatory on a confirm-mode channel of
// the handoff's own connection, and the broker's answer to it.
package handoff

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

// Publisher moves failed messages to a retry bucket or the DLQ: a
// mandatory publish on a confirm-mode channel, then the wait for the confirm.
//
// A mandatory publish that cannot be routed is still confirmed with ack=true;
// only its Return tells the failure apart. The broker sends the Return before
// the confirm, and the client hands it to the buffered returns channel before
// it resolves the confirm, so after a confirm a non-blocking drain of that
// channel is certain to find the Return of its own publish. Each publish
// carries a unique handoff id, and only this type reads the channel.
type Publisher struct {
	// dial opens the publisher's own connection, again after it was lost,
	// and returns its socket too.
	dial        func() (*amqp.Connection, net.Conn, error)
	stepTimeout time.Duration
	window      chan struct{} // bounds the handoffs in flight
	// BeforePublish and AfterPublish are test hooks around the publish.
	BeforePublish, AfterPublish func()
	idPrefix                    string
	seq                         atomic.Uint64

	mu      sync.Mutex // guards conn, socket, current and closed
	conn    *amqp.Connection
	socket  net.Conn // conn's
	current *handoffChannel
	closed  bool

	returnsMu sync.Mutex      // guards pending and serialises drains
	pending   map[string]bool // handoff id → returned
}

type handoffChannel struct {
	ch      *amqp.Channel
	returns chan amqp.Return
	// socket is the connection's: closing it ends a write that is stuck.
	socket net.Conn
	// broken is set before the socket is closed. The client notices a closed
	// socket only when its reader next fails, so until then the channel and
	// the connection still say they are open; broken keeps the next handoff
	// off them.
	broken atomic.Bool
}

// abandon closes the connection's socket under every handoff on it, so the
// next handoff opens a new connection.
func (hc *handoffChannel) abandon() {
	hc.broken.Store(true)
	_ = hc.socket.Close()
}

// NewPublisher returns a publisher that opens its connection with dial, bounds
// each broker step by stepTimeout and holds at most window handoffs in flight.
func NewPublisher(dial func() (*amqp.Connection, net.Conn, error), stepTimeout time.Duration, window int) *Publisher {
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

// channel returns the open confirm-mode channel, opening a new one (on a new
// connection if that was lost too) when the last one closed. Opening is bounded
// by the deadline; the lock keeps concurrent handoffs from opening channels twice.
func (h *Publisher) channel(deadline time.Time) (*handoffChannel, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, errors.New("the consumer has closed")
	}
	if h.current != nil && h.current.broken.Load() {
		// Its socket is closed: the connection is gone too.
		h.conn, h.socket, h.current = nil, nil, nil
	}
	if h.current != nil && !h.current.ch.IsClosed() {
		return h.current, nil
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if h.conn == nil || h.conn.IsClosed() {
		type dialed struct {
			conn   *amqp.Connection
			socket net.Conn
		}
		d, err := step.Open(ctx, func() (dialed, error) {
			conn, socket, err := h.dial()
			return dialed{conn, socket}, err
		}, func(d dialed) { _ = d.conn.CloseDeadline(time.Now().Add(h.stepTimeout)) })
		if err != nil {
			return nil, err
		}
		h.conn, h.socket = d.conn, d.socket
	}
	ch, err := step.Open(ctx, h.conn.Channel, func(ch *amqp.Channel) { _ = ch.Close() })
	if err != nil {
		return nil, err
	}
	if err := step.DoErr(ctx, func() error { return ch.Confirm(false) }); err != nil {
		_ = ch.Close()
		return nil, err
	}
	// Every Return belongs to a handoff in the window, and each drains the
	// buffer before and after its publish; four windows of room keep the
	// client from ever blocking on (and after 5 s dropping) a Return.
	returns := ch.NotifyReturn(make(chan amqp.Return, 4*cap(h.window)))
	h.current = &handoffChannel{ch: ch, returns: returns, socket: h.socket}
	return h.current, nil
}

// Publish hands msg to queue dest and reports what the broker said, by the
// deadline at the latest. writing runs just before the publish is written;
// when it returns false (the consumer's report is sealed) nothing is written.
// msg.Headers must be a table the caller owns: publish adds the handoff id to
// it. One timer bounds every wait: for a slot, for the publish and for the
// confirm.
func (h *Publisher) Publish(deadline time.Time, dest string, msg amqp.Publishing, writing func() bool) outcome.HandoffEvidence {
	ev := outcome.HandoffEvidence{Destination: dest}
	timer := step.Timer(deadline)
	defer step.Release(timer)
	select {
	case h.window <- struct{}{}:
	case <-timer.C:
		ev.Status, ev.Detail = outcome.HandoffTimedOut, "no handoff slot within the budget"
		return ev
	}
	defer func() { <-h.window }()

	hc, err := h.channel(step.Deadline(h.stepTimeout, deadline))
	if err != nil {
		ev.Status, ev.Detail = outcome.HandoffFailed, "open channel: "+sanitize.Text(err.Error(), 120)
		return ev
	}
	// The publish is a step of its own. Waiting for the channel (behind
	// another handoff's dial) may have used the delivery's whole budget; a
	// watchdog armed with (almost) no time left would close the connection
	// the other handoff just opened.
	publishBy := step.Deadline(h.stepTimeout, deadline)
	if time.Until(publishBy) < min(h.stepTimeout/4, 20*time.Millisecond) {
		ev.Status, ev.Detail = outcome.HandoffTimedOut, "no time left to publish"
		return ev
	}
	id := h.idPrefix + strconv.FormatUint(h.seq.Add(1), 36)
	msg.Headers[guard.HeaderHandoffID] = id
	h.expect(id)
	defer h.forget(id)
	h.drain(hc)

	h.BeforePublish()
	if !writing() {
		ev.Status, ev.Detail = outcome.HandoffFailed, "the consumer closed before the publish"
		return ev
	}
	// amqp091's publish is not bounded by anything of ours, and its write
	// blocks while the broker does not read (a resource alarm, a dead peer).
	// A watchdog closes the socket at the step's end: the write then fails,
	// and so does the connection, unfit for handoffs anyway. The publish runs
	// on this goroutine: handing each publish to another cost about a tenth
	// of the retry path's throughput.
	watchdog := time.AfterFunc(time.Until(publishBy), hc.abandon)
	dc, err := hc.ch.PublishWithDeferredConfirm("", dest, true, false, msg)
	if !watchdog.Stop() {
		// The watchdog may not have run yet; abandon again so the next
		// handoff cannot find this channel. The write may still have
		// completed: the copy may exist.
		hc.abandon()
		ev.Status, ev.Detail, ev.Published = outcome.HandoffTimedOut, "the publish did not return in time", true
		return ev
	}
	if err != nil {
		if !errors.Is(err, amqp.ErrClosed) {
			// A failed write leaves the connection's framing unknown.
			hc.abandon()
		}
		ev.Status, ev.Detail = outcome.HandoffFailed, "publish: "+sanitize.Text(err.Error(), 120)
		return ev
	}
	ev.Published = true
	h.AfterPublish()
	timer.Reset(time.Until(step.Deadline(h.stepTimeout, deadline)))
	select {
	case <-dc.Done():
	case <-timer.C:
		ev.Status, ev.Detail = outcome.HandoffTimedOut, "no confirm in time"
		return ev
	}
	acked := dc.Acked()
	h.drain(hc)
	switch {
	case h.returned(id):
		ev.Status, ev.Detail, ev.Published = outcome.HandoffReturned, "unroutable: no queue named "+sanitize.Text(dest, 120), false
	case !acked && hc.ch.IsClosed():
		ev.Status, ev.Detail = outcome.HandoffFailed, "channel closed before the confirm"
	case !acked:
		ev.Status, ev.Detail, ev.Published = outcome.HandoffNacked, "the broker refused the publish", false
	default:
		ev.Status = outcome.HandoffConfirmed
	}
	return ev
}

// Pending counts the handoff ids still waiting for their confirm or Return:
// none once every Publish has returned.
func (h *Publisher) Pending() int {
	h.returnsMu.Lock()
	defer h.returnsMu.Unlock()
	return len(h.pending)
}

func (h *Publisher) expect(id string) {
	h.returnsMu.Lock()
	h.pending[id] = false
	h.returnsMu.Unlock()
}

func (h *Publisher) forget(id string) {
	h.returnsMu.Lock()
	delete(h.pending, id)
	h.returnsMu.Unlock()
}

func (h *Publisher) returned(id string) bool {
	h.returnsMu.Lock()
	defer h.returnsMu.Unlock()
	return h.pending[id]
}

// drain records every Return already buffered. A Return whose handoff has
// already given up waiting matches no pending id and is dropped.
func (h *Publisher) drain(hc *handoffChannel) {
	h.returnsMu.Lock()
	defer h.returnsMu.Unlock()
	for {
		select {
		case r, ok := <-hc.returns:
			if !ok {
				return
			}
			id, _ := r.Headers[guard.HeaderHandoffID].(string)
			if _, waiting := h.pending[id]; waiting {
				h.pending[id] = true
			}
		default:
			return
		}
	}
}

// Close closes the publisher's connection; handoffs still waiting resolve as failed.
func (h *Publisher) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	if h.conn != nil {
		// Bounded: the broker may not read a blocked connection (a resource
		// alarm) until the alarm clears, so the close-ok could wait as long.
		_ = h.conn.CloseDeadline(time.Now().Add(h.stepTimeout))
	}
}
