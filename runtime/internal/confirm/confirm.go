// Package confirm publishes mandatory on a confirm-mode channel and reports
// the broker's answer to each publish: confirmed, returned (unroutable),
// nacked, or unknown. The consumer's handoffs and the user's Publisher both
// publish through it, each on a channel of its own, on a connection they may
// share. A reply to a direct reply-to address alone is published without
// mandatory: RabbitMQ returns it even when it delivers it.
package confirm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/internal/frame"
	"github.com/lily-mq/lily/internal/sanitize"
	"github.com/lily-mq/lily/runtime/internal/guard"
	"github.com/lily-mq/lily/runtime/internal/outcome"
	"github.com/lily-mq/lily/runtime/internal/step"
)

// Publisher publishes mandatory on a confirm-mode channel of its own, on a
// connection it may share with other publishers, then waits for the confirm.
// A channel of its own keeps a channel exception (a publish to an exchange
// that does not exist) from failing another publisher's publishes.
//
// A mandatory publish that cannot be routed is still confirmed with ack=true;
// only its Return tells the failure apart. The broker sends the Return before
// the confirm, and the client hands it to the buffered returns channel before
// it resolves the confirm, so after a confirm a non-blocking drain of that
// channel is certain to find the Return of its own publish. Each publish
// carries a unique publish id, and only this type reads the channel.
//
// A nack retires the channel it came on from publishing (release says when):
// the next publish opens another.
type Publisher struct {
	conn        *Conn
	stepTimeout time.Duration
	window      chan struct{} // bounds the publishes the broker has not answered
	// Backoff, when set, is the wait before the n-th attempt (from 1) to
	// connect again after an attempt failed: a publish then keeps trying
	// until its WriteBy or its Done. When nil, a publish tries once.
	Backoff func(n int) time.Duration
	// BeforePublish and AfterPublish are test hooks around the publish.
	BeforePublish, AfterPublish func()
	idPrefix                    string
	seq                         atomic.Uint64

	mu      sync.Mutex // guards current, opening, closed, shut, renewed, stalled, stalls, exchanges and each channel's users and renewed
	current *channel
	// exchanges is the record of exchanges found that the next channel
	// opened on its connection shares.
	exchanges *exchanges
	// stalled counts, for each channel, the publishes on it that stopped
	// waiting for their answer and still had none a step later; stalls
	// is their sum.
	stalled map[*channel]int
	stalls  int
	// renewed holds the channels a nack retired from publishing that are
	// not closed yet: each waits for the publishes that took it.
	renewed map[*channel]struct{}
	// opening is closed when the channel a publish is opening is open, or
	// failed; nil when none is opening.
	opening chan struct{}
	closed  bool
	// shut is closed once every channel's close begun by Close has
	// returned: a second close waits for it.
	shut chan struct{}

	returnsMu sync.Mutex      // guards pending and serialises drains
	pending   map[string]bool // publish id → returned
}

type channel struct {
	ch      *amqp.Channel
	returns chan amqp.Return
	// closes hears why the channel closed (the client sends it before it
	// closes the confirms a publish waits on); closedBy keeps the broker's
	// reason for every publish the close failed, each of which asks
	// (closeReason).
	closes   chan *amqp.Error
	closeMu  sync.Mutex
	closedBy *amqp.Error
	link     *link
	opened   time.Time
	// users counts the publishes that took the channel and have not had
	// their answer; renewed is set once a nack retired it from publishing:
	// no publish takes it again, and the last user closes it.
	users   int
	renewed bool
	// exchanges records the exchanges found: the same record as the
	// channel's before it on its connection, as exchanges says.
	exchanges *exchanges
	// retiring closes the channel once: when a stalled publish waits on
	// it and half the window has stalled (answered), or when the last
	// publish on it has its answer after a nack retired it (release).
	retiring sync.Once
	// retired is set, and writes taken, before the channel is closed: a
	// frame written after its channel.close reaches RabbitMQ as the first
	// frame of a channel never opened, which closes the whole connection
	// (504), under every publish on it. Each publish holds writes (read)
	// while it writes, and writes nothing once retired is set.
	retired atomic.Bool
	writes  sync.RWMutex
}

// retiredDetail is why a publish that found its channel closing wrote
// nothing.
const retiredDetail = "its channel was being closed: not written"

// stoppedDetail is why a publish whose caller stopped waiting before it was
// written wrote nothing.
const stoppedDetail = "stopped before the publish was written"

// close closes the channel once no publish is writing on it, and none will,
// within ctx (a write the broker does not read ends within a step, when its
// watchdog abandons the connection).
func (c *channel) close(ctx context.Context) error {
	c.retired.Store(true)
	return step.DoErr(ctx, func() error {
		// A barrier: the writes under way have ended, and those after it
		// see retired.
		c.writes.Lock()
		//lint:ignore SA2001 the lock is taken for its wait alone
		c.writes.Unlock()
		return c.ch.Close()
	})
}

// New returns a publisher on conn that holds at most window publishes in
// flight.
func New(conn *Conn, window int) *Publisher {
	return &Publisher{
		conn:          conn,
		stepTimeout:   conn.stepTimeout,
		BeforePublish: func() {},
		AfterPublish:  func() {},
		window:        make(chan struct{}, window),
		idPrefix:      newIDPrefix(),
		pending:       make(map[string]bool),
		renewed:       make(map[*channel]struct{}),
		stalled:       make(map[*channel]int),
	}
}

// newIDPrefix is what each publish id of a Publisher begins with: 6 random
// bytes in hex and a '-', apart from those of another Publisher, in this
// process or another.
func newIDPrefix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:]) + "-"
}

// publishID is the id of the publish numbered seq, which a Return of it
// carries back. frame.MaxPublishID reserves room for the longest.
func (p *Publisher) publishID(seq uint64) string {
	return p.idPrefix + strconv.FormatUint(seq, 36)
}

// channel returns the open confirm-mode channel, opening a new one (on a new
// connection if that was lost too) when the last one closed or a nack
// retired it. One publish opens it, within its deadline; the others wait for
// that one only as long as their own bounds allow, or until done is closed.
// The publish takes the channel: it gives it back with release.
func (p *Publisher) channel(deadline time.Time, done <-chan struct{}) (*channel, error) {
	for {
		p.mu.Lock()
		switch {
		case p.closed:
			p.mu.Unlock()
			return nil, errClosed
		// Under the lock the link is taken afresh: one taken before it may
		// have been dropped, and replaced, while another publish opened the
		// channel this one would reuse.
		case p.current != nil && p.current.link.usable() && !p.current.ch.IsClosed() && !p.current.retired.Load():
			c := p.current
			c.users++
			p.mu.Unlock()
			return c, nil
		case p.opening != nil:
			opening := p.opening
			p.mu.Unlock()
			if err := p.conn.awaitOpen(opening, step.Deadline(p.stepTimeout, deadline), done); err != nil {
				return nil, err
			}
			continue
		}
		p.opening = make(chan struct{})
		p.mu.Unlock()
		return p.openCurrent(deadline, done)
	}
}

// openCurrent is channel's open, by the publish that set p.opening: it opens
// the channel, takes it and ends the opening, on a panic too (in the client,
// in allocating), so that the publishes waiting on it, and those after, open
// again rather than wait on it until their bounds.
func (p *Publisher) openCurrent(deadline time.Time, done <-chan struct{}) (c *channel, err error) {
	locked := false
	defer func() {
		if !locked {
			p.mu.Lock()
		}
		close(p.opening)
		p.opening = nil
		p.mu.Unlock()
	}()
	c, err = p.open(deadline, done)
	p.mu.Lock()
	locked = true
	switch {
	case err == nil && p.closed:
		// Closed while it opened: nobody would close this one.
		go c.ch.Close()
		c, err = nil, errClosed
	case err == nil:
		// The exchanges found pass on to the next channel on the same
		// connection, unless the last closed (the broker may have closed
		// it for one deleted since: exchanges says more).
		if p.exchanges == nil || p.exchanges.link != c.link || p.current != nil && p.current.ch.IsClosed() {
			p.exchanges = newExchanges(c.link)
		}
		c.exchanges = p.exchanges
		p.current = c
		c.users++
	}
	return c, err
}

// open opens a confirm-mode channel, each step by the deadline, or until
// done is closed; on a connection the broker blocks, once it unblocks it.
func (p *Publisher) open(deadline time.Time, done <-chan struct{}) (*channel, error) {
	// Every Return belongs to a publish in the window, and each drains the
	// buffer before and after its publish (or answered does, for one that
	// stopped waiting); four windows of room keep the client from ever
	// blocking on (and after 5 s dropping) a Return. Made before the
	// channel opens, so that a panic making it leaves no channel open.
	buffer := make(chan amqp.Return, 4*cap(p.window))
	ch, l, err := p.conn.channel(deadline, done, func(ch *amqp.Channel) error { return ch.Confirm(false) })
	if err != nil {
		return nil, err
	}
	returns := ch.NotifyReturn(buffer)
	// One reason at most is sent, before the client closes closes.
	closes := ch.NotifyClose(make(chan *amqp.Error, 1))
	return &channel{ch: ch, returns: returns, closes: closes, link: l, opened: time.Now()}, nil
}

// blockedError is why a publish gave up, before it opened a channel, while
// the broker blocked its connection: it is the cause (errors.Is says so), a
// bound that ended (step.ErrTimeout) or a Done closed (errStopped), and says
// why in its own words.
type blockedError struct {
	why   string
	cause error
}

func (e *blockedError) Error() string { return e.why }

func (e *blockedError) Is(target error) bool { return target == e.cause }

var (
	errBlocked        = &blockedError{"the broker blocks publishes (a resource alarm)", step.ErrTimeout}
	errStoppedBlocked = &blockedError{"stopped waiting while the broker blocks publishes", errStopped}
)

// awaitUnblocked waits while the broker blocks l, until deadline (none when
// zero), until done is closed or until c closes, as a publish waits before
// its write. The broker does not read a blocked connection (a resource
// alarm): a channel.open sent then would hang until the alarm clears, and
// each retry and handoff would open another, a goroutine and a channel id
// each, for the whole alarm. A wait cut short proves nothing of the broker.
func (c *Conn) awaitUnblocked(l *link, deadline time.Time, done <-chan struct{}) error {
	unblocked := l.whenUnblocked()
	if closed(unblocked) {
		return nil
	}
	var expired <-chan time.Time
	if !deadline.IsZero() {
		t := step.Timer(deadline)
		defer step.Release(t)
		expired = t.C
	}
	select {
	case <-unblocked:
		return nil
	case <-expired:
		return errBlocked
	case <-done:
		if passed(deadline) {
			return errBlocked
		}
		return errStoppedBlocked
	case <-c.closing:
		return errClosed
	}
}

// connect is channel, again after the backoff while connecting fails, when
// the publisher has one: until writeBy, done is closed, or the connection
// closes. failing (when not nil) hears each failure it will try again
// after.
func (p *Publisher) connect(writeBy time.Time, done <-chan struct{}, failing func(error)) (*channel, error) {
	for n := 1; ; n++ {
		c, err := p.channel(writeBy, done)
		if err == nil || p.Backoff == nil || errors.Is(err, errClosed) || errors.Is(err, errStopped) {
			return c, err
		}
		wait := p.Backoff(n)
		if !writeBy.IsZero() && time.Until(writeBy) < wait {
			return nil, err
		}
		if failing != nil {
			failing(err)
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-done:
			t.Stop()
			return nil, err
		case <-p.conn.closing:
			t.Stop()
			return nil, errClosed
		}
	}
}

// Bounds bound one publish.
type Bounds struct {
	// Deadline ends every wait, the confirm's too; zero sets none beyond
	// each broker step's own.
	Deadline time.Time
	// WriteBy ends the waits before the write, for a slot, a connection and
	// while the broker blocks publishers, when it is earlier than Deadline:
	// a handoff given up then still has the budget for its requeue.
	WriteBy time.Time
	// Done, when closed, ends the waits, the confirm's too.
	Done <-chan struct{}
	// Failing, when set, hears each failure to open a channel while the
	// publish waits to try again: the waits may be long (internal/connectnote).
	Failing func(error)
}

// writeBy is the moment the waits before the write end.
func (b Bounds) writeBy() time.Time {
	if b.WriteBy.IsZero() || !b.Deadline.IsZero() && b.Deadline.Before(b.WriteBy) {
		return b.Deadline
	}
	return b.WriteBy
}

// Refused is what Publish answers, before it waits for anything, when it
// writes nothing: to a publish the broker would refuse, one whose waits
// before the write have ended or whose caller has stopped waiting. Its
// Status is HandoffNone when the publish goes on. A publisher that stands
// in for Publish, and waits for nothing, asks Refused, then Late.
func (b Bounds) Refused(exchange, key string, msg amqp.Publishing) outcome.HandoffEvidence {
	ev := outcome.HandoffEvidence{Destination: destination(exchange, key)}
	if err := frame.CheckPublish(exchange, key, msg); err != nil {
		ev.Status, ev.Detail = outcome.HandoffFailed, sanitize.Text(err.Error(), 160)
		return ev
	}
	if passed(b.writeBy()) {
		// A select would pick at random between a free slot and a passed
		// bound: the bound decides.
		ev.Status, ev.Detail = outcome.HandoffTimedOut, noTimeDetail
		return ev
	}
	if closed(b.Done) {
		// Likewise: a caller who has stopped waiting gets nothing written.
		ev.Status, ev.Detail = outcome.HandoffFailed, stoppedDetail
	}
	return ev
}

// Late is what Publish answers, once done waiting, when too little of b is
// left for the write, each broker step taking up to stepTimeout: a publish
// written with (almost) no time left could not wait for its confirm, and
// would only leave a possible copy behind. Its Status is HandoffNone when
// there is time.
func (b Bounds) Late(stepTimeout time.Duration, exchange, key string) outcome.HandoffEvidence {
	ev := outcome.HandoffEvidence{Destination: destination(exchange, key)}
	if time.Until(step.Deadline(stepTimeout, b.Deadline)) < min(stepTimeout/4, 20*time.Millisecond) {
		ev.Status, ev.Detail = outcome.HandoffTimedOut, noTimeDetail
	}
	return ev
}

// passed says whether the moment by, if any, has come. A wait that sees its
// done closed asks it too: a context's Done closes at the deadline its timer
// shares with the wait's own, and a loaded scheduler may run either timer
// first. Whichever the select saw, the bound ended the wait.
func passed(by time.Time) bool {
	return !by.IsZero() && !time.Now().Before(by)
}

// ended is ev for a wait before the write that ended first: timed out, for
// timedOut, once writeBy has passed (passed), else failed, for stopped (Done
// was closed).
func ended(ev outcome.HandoffEvidence, writeBy time.Time, timedOut, stopped string) outcome.HandoffEvidence {
	ev.Status, ev.Detail = outcome.HandoffFailed, stopped
	if passed(writeBy) {
		ev.Status, ev.Detail = outcome.HandoffTimedOut, timedOut
	}
	return ev
}

// noTimeDetail is why a publish that had no time left wrote nothing.
const noTimeDetail = "no time left to publish"

// Publish publishes msg mandatory (not to a direct reply-to address, which
// frame.DirectReply explains) to exchange with routing key key and reports what
// the broker said, within b. writing runs just before the
// publish is written; when it returns an error, nothing is written and the
// publish failed for that reason. msg.Headers must be a table the caller
// owns: Publish adds the publish id to it.
func (p *Publisher) Publish(b Bounds, exchange, key string, msg amqp.Publishing, writing func() error) outcome.HandoffEvidence {
	ev := b.Refused(exchange, key, msg)
	if ev.Status != outcome.HandoffNone {
		return ev
	}
	writeBy := b.writeBy()
	var expired <-chan time.Time
	if !writeBy.IsZero() {
		timer := step.Timer(writeBy)
		defer step.Release(timer)
		expired = timer.C
	}
	select {
	case p.window <- struct{}{}:
	case <-expired:
		return ended(ev, writeBy, "no publish slot within the budget", "stopped waiting for a publish slot")
	case <-b.Done:
		return ended(ev, writeBy, "no publish slot within the budget", "stopped waiting for a publish slot")
	case <-p.conn.closing:
		ev.Status, ev.Detail = outcome.HandoffFailed, "waiting for a publish slot: "+errClosed.Error()
		return ev
	}
	// The slot is the publish's until the broker answers it: a publish that
	// stops waiting for its confirm leaves it to answered.
	held := true
	defer func() {
		if held {
			<-p.window
		}
	}()

	c, err := p.connect(writeBy, b.Done, b.Failing)
	if err != nil {
		ev.Status, ev.Detail = outcome.HandoffFailed, "open channel: "+sanitize.Text(err.Error(), 120)
		if errors.Is(err, step.ErrTimeout) {
			ev.Status = outcome.HandoffTimedOut
		}
		return ev
	}
	// The channel is the publish's until the broker answers it, like its
	// slot: a publish that stops waiting for its confirm leaves it to
	// answered.
	nacked := false
	defer func() {
		if held {
			p.release(c, nacked)
		}
	}()
	if msg.UserId != "" && c.link.user != "" && msg.UserId != c.link.user {
		// The broker would close the channel under every publish on it.
		ev.Status, ev.Detail = outcome.HandoffFailed, "user_id "+strconv.Quote(sanitize.Text(msg.UserId, 64))+" is not the user the connection logged in as, which the broker would refuse by closing the channel"
		return ev
	}
	select {
	case <-c.link.whenUnblocked():
	default:
		select {
		case <-c.link.whenUnblocked():
		case <-expired:
			return ended(ev, writeBy, "the broker blocks publishes (a resource alarm)", "stopped waiting while the broker blocks publishes")
		case <-b.Done:
			return ended(ev, writeBy, "the broker blocks publishes (a resource alarm)", "stopped waiting while the broker blocks publishes")
		case <-p.conn.closing:
			ev.Status, ev.Detail = outcome.HandoffFailed, "waiting while the broker blocks publishes: "+errClosed.Error()
			return ev
		}
	}
	if ev.Status, ev.Detail = c.exchangeExists(p.conn, exchange, p.stepTimeout, writeBy, b.Done); ev.Status != outcome.HandoffNone {
		return ev
	}
	// The publish is a step of its own. Waiting for the channel (behind
	// another publish's dial) may have used the whole budget.
	if late := b.Late(p.stepTimeout, exchange, key); late.Status != outcome.HandoffNone {
		return late
	}
	id := p.publishID(p.seq.Add(1))
	msg.Headers[guard.HeaderHandoffID] = id
	if err := frame.Check(msg, c.link.conn.Config.FrameSize); err != nil {
		// A content header is never split across frames.
		ev.Status, ev.Detail = outcome.HandoffFailed, err.Error()+" on this connection"
		return ev
	}
	p.expect(id)
	defer p.forget(id)
	p.drain(c)

	p.BeforePublish()
	// The channel's writes are held from the last look at the caller's and
	// the channel's state to the end of the write.
	if c.retired.Load() {
		ev.Status, ev.Detail = outcome.HandoffFailed, retiredDetail
		return ev
	}
	c.writes.RLock()
	// A panic on the way (in writing, or in the client) must not leave the
	// channel's close waiting for this write for good.
	writeHeld := true
	unlock := func() { writeHeld = false; c.writes.RUnlock() }
	defer func() {
		if writeHeld {
			c.writes.RUnlock()
		}
	}()
	if c.retired.Load() {
		unlock()
		ev.Status, ev.Detail = outcome.HandoffFailed, retiredDetail
		return ev
	}
	if closed(b.Done) {
		unlock()
		ev.Status, ev.Detail = outcome.HandoffFailed, stoppedDetail
		return ev
	}
	if err := writing(); err != nil {
		unlock()
		ev.Status, ev.Detail = outcome.HandoffFailed, err.Error()
		return ev
	}
	// amqp091's publish is not bounded by anything of ours. Its write goes
	// to the connection's writer (transport.Coalesce) and waits only while
	// the writer's queue is full, or behind another publish that waits so:
	// behind the frames of the publishes ahead on a slow link, or while the
	// broker does not read (a resource alarm, a dead peer). A watchdog
	// closes the socket once nothing has gone out on it for a whole step,
	// which only the latter explains: the write then fails, and so does the
	// connection, unfit for publishing anyway. While bytes go out it waits
	// until this publish's bounds, but for a step at least: a nearer
	// deadline would fail every publish sharing the connection for one
	// caller's haste. The frames are built on this goroutine: handing each
	// publish to another cost about a tenth of the retry path's throughput.
	watchdog := c.link.watch(p.stepTimeout, b.Deadline, b.Done)
	dc, err := c.ch.PublishWithDeferredConfirm(exchange, key, !frame.DirectReply(exchange, key), false, msg)
	unlock()
	if watchdog.stop() {
		// The write may still have completed: the message may exist.
		ev.Status, ev.Detail, ev.Published = outcome.HandoffTimedOut, "the publish did not return in time", true
		return ev
	}
	if err != nil {
		if !errors.Is(err, amqp.ErrClosed) {
			// A failed write leaves the connection's framing unknown.
			c.link.abandon()
		}
		ev.Status, ev.Detail = outcome.HandoffFailed, "publish: "+sanitize.Text(err.Error(), 120)
		return ev
	}
	ev.Published = true
	p.AfterPublish()
	by := step.Deadline(p.stepTimeout, b.Deadline)
	confirmBy := step.Timer(by)
	defer step.Release(confirmBy)
	select {
	case <-dc.Done():
	case <-confirmBy.C:
		ev.Status, ev.Detail = outcome.HandoffTimedOut, "no confirm in time"
		held = false
		go p.answered(c, dc)
		return ev
	case <-b.Done:
		ev.Status, ev.Detail = outcome.HandoffTimedOut, "stopped waiting for the confirm"
		if passed(by) {
			ev.Detail = "no confirm in time"
		}
		held = false
		go p.answered(c, dc)
		return ev
	}
	acked := dc.Acked()
	p.drain(c)
	switch {
	case p.returned(id):
		ev.Status, ev.Detail, ev.Published = outcome.HandoffReturned, "unroutable: "+unroutable(exchange, key), false
	case !acked && c.ch.IsClosed():
		// The broker's reason (a 403 for a write not permitted, a 404 for
		// an exchange deleted) is what an operator needs; the copy may
		// still exist, routed before whatever closed the channel.
		ev.Status, ev.Detail = outcome.HandoffFailed, "channel closed before the confirm"
		if why := c.closeReason(); why != "" {
			ev.Detail += ": " + why
		}
		c.exchanges.forget()
	case !acked:
		// A nack says one queue refused it, not that none holds it: the
		// others it was routed to (by an exchange, or by a CC header through
		// the default one) may, and a queue with reject-publish-dlx
		// dead-letters what it refuses. Published stays true.
		ev.Status, ev.Detail = outcome.HandoffNacked, "the broker refused the publish"
		nacked = true
	default:
		ev.Status = outcome.HandoffConfirmed
	}
	return ev
}

// closeReason is the broker's reason for closing c, sanitized and cut, or
// "" when it gave none (the connection closed, or Lily closed the channel).
func (c *channel) closeReason() string {
	c.closeMu.Lock()
	defer c.closeMu.Unlock()
	if c.closedBy == nil {
		select {
		case e := <-c.closes:
			// Only the broker's: a lost connection's error is the
			// client's own (a 501 frame error for an EOF), no reason the
			// broker gave, and the detail says enough without it.
			if e != nil && e.Server {
				c.closedBy = e
			}
		default:
		}
	}
	if c.closedBy == nil {
		return ""
	}
	return sanitize.Text(c.closedBy.Error(), maxCloseReason)
}

// maxCloseReason bounds the broker's reason in a publish's detail: the
// broker's own text is at most 255 bytes, and the record cuts its reason at
// 200 (decide.MaxCause) anyway.
const maxCloseReason = 160

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

// answered waits for the broker's answer to a publish that stopped waiting
// for it, or for its channel to close (which answers every publish on it),
// then reads its Return, if one came, and frees its slot. So the window
// bounds the publishes the broker has not answered, and the Returns waiting
// in the buffer never outnumber its room: a Return the client cannot buffer
// it drops after 5 s, and a publish whose Return was dropped would be taken
// for routed.
//
// A destination that never answers (a quorum queue without a majority)
// would hold the slots of every publish to it, and publishes to every other
// destination would find none. So once half the window (at least one
// publish) has waited a step past its give-up, every channel they wait on
// is closed, one a nack retired included, where no publish goes any more:
// that answers them all, unconfirmed, and the next publish opens another.
// None is left to hold its slot, or to count towards the next close, which
// a single stall would otherwise reach.
func (p *Publisher) answered(c *channel, dc *amqp.DeferredConfirmation) {
	stalled := time.NewTimer(p.stepTimeout)
	select {
	case <-dc.Done():
		stalled.Stop()
	case <-stalled.C:
		for _, s := range p.stall(c) {
			go s.retire(p.stepTimeout)
		}
		<-dc.Done()
		p.mu.Lock()
		if p.stalled[c]--; p.stalled[c] == 0 {
			delete(p.stalled, c)
		}
		p.stalls--
		p.mu.Unlock()
	}
	p.drain(c)
	if !dc.Acked() && c.ch.IsClosed() {
		c.exchanges.forget()
	}
	p.release(c, !dc.Acked() && !c.ch.IsClosed())
	<-p.window
}

// stall counts a stalled publish on c and returns the channels to close:
// once half the window has stalled, each one a stalled publish waits on.
func (p *Publisher) stall(c *channel) []*channel {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stalled[c]++
	p.stalls++
	if p.stalls < max(cap(p.window)/2, 1) {
		return nil
	}
	return slices.Collect(maps.Keys(p.stalled))
}

// renewAfter is how old a channel must be for a nack to retire it from
// publishing. RabbitMQ 3.10 nacks every publish on a channel opened while a
// quorum queue elects a new leader (as a publisher that lost its connection
// with the leader's node opens one at once) for a minute and more, while a
// channel opened after the election publishes at once. So a nack sends the
// next publishes to a new channel; but a queue that nacks every publish
// (full, with overflow reject-publish) would so open a channel per nack, and
// the age makes it one a second at most, each nacked channel retired once.
const renewAfter = time.Second

// release gives back channel c, taken by a publish that has its answer,
// nacked or not, or wrote nothing. A nack retires a channel renewAfter old
// from publishing: no publish takes it again, the next opens another, and
// the publishes in flight on it keep it until each has its answer; the last
// closes it. So a publisher holds at most one channel more than those with
// publishes in flight, no more than its window.
func (p *Publisher) release(c *channel, nacked bool) {
	p.mu.Lock()
	c.users--
	if nacked && !c.renewed && time.Since(c.opened) >= renewAfter {
		c.renewed = true
		p.renewed[c] = struct{}{}
		if p.current == c {
			p.current = nil
		}
	}
	last := c.renewed && c.users == 0 && !p.closed
	if last {
		delete(p.renewed, c)
	}
	p.mu.Unlock()
	if last {
		go c.retire(p.stepTimeout)
	}
}

// retire closes the channel within a step, once; a channel that does not
// close in time takes its connection with it, which answers its publishes
// all the same. So does a close that fails with its connection; one that
// fails because the channel was closed already has closed it, and leaves
// the connection to the publishes on its other channels.
func (c *channel) retire(stepTimeout time.Duration) {
	c.retiring.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
		defer cancel()
		switch err := c.close(ctx); {
		case err == nil:
		case errors.Is(err, step.ErrTimeout):
			c.link.abandonStalled()
		case !c.closedAlone(err):
			c.link.abandon()
		}
	})
}

// closedAlone reports whether err, a failed close of the channel, says the
// channel was closed already and its connection is open. The broker closes
// a channel alone with a soft code (amqp's Recover: 311-313, 403-406): a
// publish just before to an exchange deleted since it was found, or to an
// internal one, with no write permission, a body over max_message_size;
// its channel.close answers a channel.close sent meanwhile. The client
// answers ErrClosed for a channel that closed before its channel.close was
// written. The connection's own end (a hard code, a read or a write that
// failed) reaches each of its channels too, once the connection is marked
// closed, but for a write that failed, which is not an *amqp.Error.
func (c *channel) closedAlone(err error) bool {
	var e *amqp.Error
	return !c.link.conn.IsClosed() && (errors.Is(err, amqp.ErrClosed) || errors.As(err, &e) && e.Recover)
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

// Close closes the publisher's channels within a step, not the connection
// they share: publishes still waiting resolve as failed, and later ones fail.
func (p *Publisher) Close() { p.CloseBy(time.Now().Add(p.stepTimeout)) }

// CloseBy is Close waiting for the broker until by at most: a blocked
// connection's broker reads no close either. Each channel's close starts at
// once, whatever by, the retired channels' too: one the broker does not
// answer in time keeps no other from being sent, and a close not waited for
// still happens, in the background. Closing again closes nothing more, and
// waits for those closes as the first did, until by at most.
func (p *Publisher) CloseBy(by time.Time) {
	p.mu.Lock()
	if p.closed {
		shut := p.shut
		p.mu.Unlock()
		awaitBy(shut, by)
		return
	}
	p.closed = true
	shut := make(chan struct{})
	p.shut = shut
	chans := slices.Collect(maps.Keys(p.renewed))
	if p.current != nil {
		chans = append(chans, p.current)
	}
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range chans {
		wg.Go(func() { _ = c.close(context.Background()) })
	}
	go func() {
		wg.Wait()
		close(shut)
	}()
	awaitBy(shut, by)
}
