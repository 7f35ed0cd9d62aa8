package runtime

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
)

// handoffPublisher moves failed messages to a retry bucket or the DLQ: a
// mandatory publish on a confirm-mode channel, then the wait for the confirm.
//
// A mandatory publish that cannot be routed is still confirmed with ack=true;
// only its Return tells the failure apart. The broker sends the Return before
// the confirm, and the client hands it to the buffered returns channel before
// it resolves the confirm, so after a confirm a non-blocking drain of that
// channel is certain to find the Return of its own publish. Each publish
// carries a unique handoff id, and only this type reads the channel.
type handoffPublisher struct {
	// dial opens the publisher's own connection, again after it was lost,
	// and returns its socket too.
	dial        func() (*amqp.Connection, net.Conn, error)
	stepTimeout time.Duration
	window      chan struct{} // bounds the handoffs in flight
	// beforePublish and afterPublish are test hooks around the publish.
	beforePublish, afterPublish func()
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

func newHandoffPublisher(dial func() (*amqp.Connection, net.Conn, error), stepTimeout time.Duration, window int) *handoffPublisher {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return &handoffPublisher{
		dial:          dial,
		stepTimeout:   stepTimeout,
		beforePublish: func() {},
		afterPublish:  func() {},
		window:        make(chan struct{}, window),
		idPrefix:      hex.EncodeToString(b[:]) + "-",
		pending:       make(map[string]bool),
	}
}

// channel returns the open confirm-mode channel, opening a new one (on a new
// connection if that was lost too) when the last one closed. Opening is bounded
// by the deadline; the lock keeps concurrent handoffs from opening channels twice.
func (h *handoffPublisher) channel(deadline time.Time) (*handoffChannel, error) {
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
		d, err := boundedOpen(ctx, func() (dialed, error) {
			conn, socket, err := h.dial()
			return dialed{conn, socket}, err
		}, func(d dialed) { _ = d.conn.CloseDeadline(time.Now().Add(h.stepTimeout)) })
		if err != nil {
			return nil, err
		}
		h.conn, h.socket = d.conn, d.socket
	}
	ch, err := boundedOpen(ctx, h.conn.Channel, func(ch *amqp.Channel) { _ = ch.Close() })
	if err != nil {
		return nil, err
	}
	if err := boundedErr(ctx, func() error { return ch.Confirm(false) }); err != nil {
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

// publish hands msg to queue dest and reports what the broker said, by the
// deadline at the latest. writing runs just before the publish is written;
// when it returns false (the consumer's report is sealed) nothing is written.
// msg.Headers must be a table the caller owns: publish adds the handoff id to
// it. One timer bounds every wait: for a slot, for the publish and for the
// confirm.
func (h *handoffPublisher) publish(deadline time.Time, dest string, msg amqp.Publishing, writing func() bool) HandoffEvidence {
	ev := HandoffEvidence{Destination: dest}
	timer := timerUntil(deadline)
	defer releaseTimer(timer)
	select {
	case h.window <- struct{}{}:
	case <-timer.C:
		ev.Status, ev.Detail = HandoffTimedOut, "no handoff slot within the budget"
		return ev
	}
	defer func() { <-h.window }()

	hc, err := h.channel(stepDeadline(h.stepTimeout, deadline))
	if err != nil {
		ev.Status, ev.Detail = HandoffFailed, "open channel: "+sanitize(err.Error(), 120)
		return ev
	}
	// The publish is a step of its own. Waiting for the channel (behind
	// another handoff's dial) may have used the delivery's whole budget; a
	// watchdog armed with (almost) no time left would close the connection
	// the other handoff just opened.
	step := stepDeadline(h.stepTimeout, deadline)
	if time.Until(step) < min(h.stepTimeout/4, 20*time.Millisecond) {
		ev.Status, ev.Detail = HandoffTimedOut, "no time left to publish"
		return ev
	}
	id := h.idPrefix + strconv.FormatUint(h.seq.Add(1), 36)
	msg.Headers[HeaderHandoffID] = id
	h.expect(id)
	defer h.forget(id)
	h.drain(hc)

	h.beforePublish()
	if !writing() {
		ev.Status, ev.Detail = HandoffFailed, "the consumer closed before the publish"
		return ev
	}
	// amqp091's publish is not bounded by anything of ours, and its write
	// blocks while the broker does not read (a resource alarm, a dead peer).
	// A watchdog closes the socket at the step's end: the write then fails,
	// and so does the connection, unfit for handoffs anyway. The publish runs
	// on this goroutine: handing each publish to another cost about a tenth
	// of the retry path's throughput.
	watchdog := time.AfterFunc(time.Until(step), hc.abandon)
	dc, err := hc.ch.PublishWithDeferredConfirm("", dest, true, false, msg)
	if !watchdog.Stop() {
		// The watchdog may not have run yet; abandon again so the next
		// handoff cannot find this channel. The write may still have
		// completed: the copy may exist.
		hc.abandon()
		ev.Status, ev.Detail, ev.Published = HandoffTimedOut, "the publish did not return in time", true
		return ev
	}
	if err != nil {
		if !errors.Is(err, amqp.ErrClosed) {
			// A failed write leaves the connection's framing unknown.
			hc.abandon()
		}
		ev.Status, ev.Detail = HandoffFailed, "publish: "+sanitize(err.Error(), 120)
		return ev
	}
	ev.Published = true
	h.afterPublish()
	timer.Reset(time.Until(stepDeadline(h.stepTimeout, deadline)))
	select {
	case <-dc.Done():
	case <-timer.C:
		ev.Status, ev.Detail = HandoffTimedOut, "no confirm in time"
		return ev
	}
	acked := dc.Acked()
	h.drain(hc)
	switch {
	case h.returned(id):
		ev.Status, ev.Detail, ev.Published = HandoffReturned, "unroutable: no queue named "+sanitize(dest, 120), false
	case !acked && hc.ch.IsClosed():
		ev.Status, ev.Detail = HandoffFailed, "channel closed before the confirm"
	case !acked:
		ev.Status, ev.Detail, ev.Published = HandoffNacked, "the broker refused the publish", false
	default:
		ev.Status = HandoffConfirmed
	}
	return ev
}

func (h *handoffPublisher) expect(id string) {
	h.returnsMu.Lock()
	h.pending[id] = false
	h.returnsMu.Unlock()
}

func (h *handoffPublisher) forget(id string) {
	h.returnsMu.Lock()
	delete(h.pending, id)
	h.returnsMu.Unlock()
}

func (h *handoffPublisher) returned(id string) bool {
	h.returnsMu.Lock()
	defer h.returnsMu.Unlock()
	return h.pending[id]
}

// drain records every Return already buffered. A Return whose handoff has
// already given up waiting matches no pending id and is dropped.
func (h *handoffPublisher) drain(hc *handoffChannel) {
	h.returnsMu.Lock()
	defer h.returnsMu.Unlock()
	for {
		select {
		case r, ok := <-hc.returns:
			if !ok {
				return
			}
			id, _ := r.Headers[HeaderHandoffID].(string)
			if _, waiting := h.pending[id]; waiting {
				h.pending[id] = true
			}
		default:
			return
		}
	}
}

// close closes the publisher's connection; handoffs still waiting resolve as failed.
func (h *handoffPublisher) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	if h.conn != nil {
		// Bounded: the broker may not read a blocked connection (a resource
		// alarm) until the alarm clears, so the close-ok could wait as long.
		_ = h.conn.CloseDeadline(time.Now().Add(h.stepTimeout))
	}
}

// dialSocket dials as amqp.DialConfig does and also returns the socket under
// the connection (under TLS, if any), for a watchdog to close.
func dialSocket(url string, cfg amqp.Config) (*amqp.Connection, net.Conn, error) {
	dial := cfg.Dial
	if dial == nil {
		dial = amqp.DefaultDial(30 * time.Second)
	}
	var socket net.Conn
	cfg.Dial = func(network, addr string) (net.Conn, error) {
		s, err := dial(network, addr)
		socket = s
		return s, err
	}
	conn, err := amqp.DialConfig(url, cfg)
	return conn, socket, err
}
