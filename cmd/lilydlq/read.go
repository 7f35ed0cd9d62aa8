package main

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/internal/quarantine"
	"github.com/lily-mq/lily/internal/sanitize"
	"github.com/lily-mq/lily/wire"
)

// verdict is what a visit decides for one copy.
type verdict int

const (
	// keep leaves the copy in the DLQ: it stays unacknowledged on the
	// reading channel until the read ends, and the broker then returns it.
	keep verdict = iota
	// take ACKs the copy, which removes it from the DLQ: only after its
	// re-drive was confirmed.
	take
)

// errEnough ends a read early without failing it.
var errEnough = errors.New("enough read")

// readOptions bound a read.
type readOptions struct {
	// window is how many copies one consumer may hold unacknowledged (its
	// prefetch), and so how many the client may buffer at once: a count,
	// not bytes, so the memory a read needs is about window × the largest
	// body.
	window int
	// idle is how long to wait for the next copy before deciding that the
	// DLQ holds fewer than it did when the read began, and, after the read,
	// for the broker to count its consumers gone.
	idle time.Duration
	// connected, when set, is told the frame size the broker negotiated
	// for the read's connection, before the first copy is visited.
	connected func(frameSize int)
	// settle, when set, is called once the read has visited every copy it
	// will, unless a visit's error or ctx ended it, with the copies held
	// since their visit still held: it ACKs those it takes, one by one, by
	// h before the close. It lets a command decide on a copy by what the
	// rest of the DLQ holds (purge -id: whether another copy has its id).
	// Its error ends the read as a visit's does.
	settle func(res readResult, h *holding) error
	// alone: the read holds the queue's re-drive lock (lockName) for as
	// long as its connection lives, refuses to begin beside another
	// consumer of the queue, consumes exclusively (which a classic queue
	// enforces, a quorum queue ignores), and stops before its next copy
	// when a count of consumers, at a window's start and every recount
	// within one, finds one not its own.
	// A re-drive beside another would move again a copy the other leaves
	// in doubt (its publish unconfirmed, its ACK unproven), once the other
	// hands it back.
	alone bool
	// watch: a read that begins with no other consumer of the queue
	// consumes exclusively and counts the queue's consumers as alone does,
	// and once more after its last copy, and stops for one not its own: a
	// consumer begun during the read may hold a copy the read never sees
	// while new copies make up the count, so that the read looks whole.
	// For the commands that rely on a whole read (purge -id, export,
	// redrive -id).
	watch bool
	// limit is the queue's delivery limit as the operator gave it
	// (-delivery-limit), 0 when not known: AMQP does not say it. A quorum
	// queue drops or dead-letters a copy returned past it, so the read stops
	// at a copy it would return at the limit, before the next read loses it.
	limit int64
}

// readResult says what a read saw.
type readResult struct {
	Ready     int  `json:"ready"`            // ready in the DLQ when the read began
	Consumers int  `json:"consumers"`        // other consumers of the DLQ then
	Read      int  `json:"read"`             // copies visited
	Taken     int  `json:"moved,omitempty"`  // copies ACKed (moved out)
	Windows   int  `json:"windows"`          // consumers the read used, one per window
	Idle      bool `json:"fewer_than_ready"` // fewer copies came than were ready
	// Lingering is how many consumers more than the others the DLQ still
	// counted -wait after the read's close: on a quorum DLQ, likely the
	// read's own, whose copies come back later.
	Lingering int `json:"lingering_consumers,omitempty"`
}

// whole reports whether the read visited every copy ready when it began.
// A read beside other consumers is not: a copy one of them hands back
// meanwhile goes to the head of the queue and is read in the place of a
// ready one, so even a full count proves nothing.
func (r readResult) whole() bool { return r.Read >= r.Ready && r.Consumers == 0 }

// among is where a read found no copy of an id: in the queue when the read
// was whole; else only among the copies it read, for one it did not read
// may carry it.
func among(r readResult) string {
	if r.whole() {
		return "in"
	}
	return "among the copies read of"
}

// readQueue visits, in queue order, the copies ready in queue when the read
// begins (a passive declare counts them), without taking any it is not told
// to: it consumes with manual acknowledgement and never NACKs. A copy visit
// keeps stays unacknowledged on the reading channel; closing the channel at
// the end hands every one back to the broker, which puts it back in its
// place (classic queues; quorum queues when the read used at most 32
// windows: docs/dlq.md has what was measured). A quorum queue does that
// after the close-ok: the read returns once the DLQ counts none of its
// consumers, or after o.idle (res.Lingering says so). A copy visit takes is
// ACKed at once. A process killed during the read loses nothing: its
// connection closes, and the broker returns what it held.
//
// A consumer with a prefetch of o.window reads until it holds that many,
// then is cancelled and another starts: the client never buffers more than a
// window, however long the DLQ.
func readQueue(ctx context.Context, url, queue, name string, o readOptions, visit func(d *amqp.Delivery, quarantined string) (verdict, error)) (readResult, error) {
	var res readResult
	conn, filter, err := dial(url, name)
	if err != nil {
		return res, err
	}
	defer conn.Close()
	if o.connected != nil {
		o.connected(conn.Config.FrameSize)
	}
	ch, err := conn.Channel()
	if err != nil {
		return res, fmt.Errorf("open a channel: %w", err)
	}
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		return res, queueError(queue, err)
	}
	res.Ready, res.Consumers = q.Messages, q.Consumers
	if o.alone {
		if err := lock(ch, queue, name); err != nil {
			return res, err
		}
	}
	if o.alone && q.Consumers > 0 {
		return res, fmt.Errorf("refusing to %s beside %d other consumer(s) of %s (another %s?): it runs alone, or it could move again a copy another leaves in doubt; nothing was read, run it once they are gone", name, q.Consumers, sanitize.Text(queue, maxQueue), name)
	}

	// watching: the read looks for consumers begun beside it. One that
	// began beside others is not whole already, and reads on to say what
	// it can.
	watching := o.alone || (o.watch && q.Consumers == 0)
	// others counts the consumers of the queue not the read's own. A
	// quorum queue counts each window cancelled before this one too, as
	// each holds the copies it kept; a classic queue does not, but refuses
	// any consumer beside an exclusive one.
	others := func() (int, error) {
		q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		if err != nil {
			return 0, err
		}
		return q.Consumers - res.Windows, nil
	}
	stopped := func(n int) error {
		if o.alone {
			return fmt.Errorf("stopped: %d other consumer(s) of %s began during the %s; it runs alone, or it could move again a copy another leaves in doubt", n, sanitize.Text(queue, maxQueue), name)
		}
		return fmt.Errorf("stopped: %d other consumer(s) of %s began during the %s: a copy one holds is not read, so the read is not whole", n, sanitize.Text(queue, maxQueue), name)
	}

	var (
		dels  <-chan amqp.Delivery
		tag   string
		held  int // copies of this window visited and kept
		took  int // copies of this window visited and taken
		idle  = time.NewTimer(o.idle)
		ended error
		// counted is when the consumers were last counted.
		counted time.Time
	)
	defer idle.Stop()
	// When a visit or ctx ended the read, that is said first: the channel
	// failing as the read then closes (a lost connection) is second to it.
	first := func(err error) error {
		if ended != nil && !errors.Is(ended, errEnough) {
			return errors.Join(ended, err)
		}
		return err
	}
	// cut says why the channel's end cut the read short, and that the ACKs
	// of the copies taken so far are unproven: only the close-ok proves them.
	cut := func(err error) error {
		err = readError(closed, err)
		if res.Taken > 0 {
			return fmt.Errorf("%w; the ACKs of the %d copies taken are unproven: the last ones may be in the DLQ as well", err, res.Taken)
		}
		return err
	}
	for res.Read < res.Ready && ended == nil {
		// Asked to stop, the read stops before the next copy, even with
		// copies waiting: select would pick among them at random.
		if ctx.Err() != nil {
			ended = context.Cause(ctx)
			continue
		}
		if dels == nil {
			// Tags that sort in window order: a quorum queue returns the
			// copies of up to 32 consumers in the order of their tags.
			tag = fmt.Sprintf("lilydlq-%09d", res.Windows)
			res.Windows++
			if err := ch.Qos(o.window, 0, false); err != nil {
				return res, cut(err)
			}
			if dels, err = ch.Consume(queue, tag, false, watching, false, false, nil); err != nil {
				return res, cut(err)
			}
			held, took = 0, 0
			// Between two windows the queue has no open consumer of ours:
			// another may have begun there.
			counted = time.Time{}
		}
		if watching && time.Since(counted) >= recount {
			n, err := others()
			if err != nil {
				return res, cut(err)
			}
			counted = time.Now()
			if n > 0 {
				ended = stopped(n)
				continue
			}
		}
		idle.Reset(o.idle)
		var d amqp.Delivery
		var ok bool
		select {
		case d, ok = <-dels:
		case <-idle.C:
			res.Idle = true
			ended = errEnough
			continue
		case <-ctx.Done():
			ended = context.Cause(ctx)
			continue
		}
		if !ok {
			return res, cut(errors.New("the broker ended the consumer"))
		}
		res.Read++
		v, err := visit(&d, quarantinedWhy(filter, &d))
		if v == take {
			if err := ch.Ack(d.DeliveryTag, false); err != nil {
				return res, fmt.Errorf("ACK of a moved copy (it may stay in the DLQ as well): %w", readError(closed, err))
			}
			res.Taken++
			took++
		} else {
			held++
		}
		if err != nil {
			ended = err
		}
		if v == keep && o.limit > 0 && ended == nil {
			ended = nearLimit(&d, o.limit)
		}
		if held == o.window {
			if err := cancel(ch, tag, dels); err != nil {
				return res, first(cut(err))
			}
			dels = nil
		}
	}
	// A consumer begun since the last count, within the last second, is
	// counted before a read that relies on being whole ends. (On a classic
	// queue none began while a window of the read was open; one begun
	// after its last window came too late to hide a copy from it.)
	if o.watch && watching && (ended == nil || errors.Is(ended, errEnough)) {
		n, err := others()
		if err != nil {
			return res, cut(err)
		}
		if n > 0 {
			ended = stopped(n)
		}
	}
	if dels != nil {
		// An ACK in this window gave the consumer room for one more copy,
		// which the broker may be sending as the cancel arrives: a quorum
		// queue's channel hands such a copy back itself, behind every ready
		// copy (measured on 3.10.8: after redrive -limit 1, the 65th of
		// 130 went to the tail). Filled, the consumer has none on its way;
		// a copy that does not come within -wait was not on its way.
		if took > 0 && !res.Idle {
			if err := fill(dels, min(o.window-held, res.Ready-res.Read), o.idle); err != nil {
				return res, first(cut(err))
			}
		}
		if err := cancel(ch, tag, dels); err != nil {
			return res, first(cut(err))
		}
	}
	if o.settle != nil && (ended == nil || errors.Is(ended, errEnough)) {
		h := &holding{ch: ch, res: &res, cut: cut}
		err := o.settle(res, h)
		if h.lost != nil {
			// The channel is gone: nothing to close, and the settle said
			// what it left in doubt.
			return res, cmp.Or(err, h.lost)
		}
		if err != nil {
			ended = err
		}
	}
	// The close hands back every copy still held, and its close-ok proves
	// every ACK written before it.
	if err := ch.Close(); err != nil {
		return res, first(fmt.Errorf("close the reading channel (the ACKs of moved copies are unproven: a copy may stay in the DLQ as well): %w", err))
	}
	// A quorum queue hands a closed channel's copies back only after the
	// close-ok, when it sees the channel gone, and counts the channel's
	// consumers until then: a command run at once after this one would find
	// them still held, and read the others first. So the read ends, its
	// lock still held, once the count is down to what it was before it.
	if res.Lingering, err = handedBack(conn, queue, res.Consumers, o.idle); err != nil {
		return res, first(err)
	}
	if errors.Is(ended, errEnough) {
		ended = nil
	}
	return res, ended
}

// holding is what a read's settle may do with the copies the read holds.
type holding struct {
	ch   *amqp.Channel
	res  *readResult
	cut  func(error) error
	lost error // why the reading channel closed, once open or ack found it so
}

// open says why the reading channel closed, nil while it is open: a copy
// moved then could not be ACKed, and would be in two places.
func (h *holding) open() error {
	if h.lost == nil && h.ch.IsClosed() {
		h.lost = h.cut(amqp.ErrClosed)
	}
	return h.lost
}

// ack ACKs the held copy of tag, which takes it out of the DLQ. Once an ACK
// failed, or open found the channel closed, none is sent.
func (h *holding) ack(tag uint64) error {
	if h.lost != nil {
		return h.lost
	}
	if err := h.ch.Ack(tag, false); err != nil {
		h.lost = h.cut(err)
		return h.lost
	}
	h.res.Taken++
	return nil
}

// nearLimit says why a read stops at the copy d, which it keeps and so
// returns, when that return takes its x-delivery-count (none: 0, never
// returned) to limit or past it; else nil. The copies the read holds beside
// it return too: nothing else is read.
func nearLimit(d *amqp.Delivery, limit int64) error {
	n, _ := wire.HeaderInt(d.Headers[headerDeliveryCount])
	if n+1 < limit {
		return nil
	}
	id, typ := orDash(sanitize.Text(d.MessageId, maxID)), orDash(sanitize.Text(d.Type, maxID))
	const out = "Read the DLQ no more: redrive -all -to <a queue without a delivery limit> moves its copies out and returns none it moves (docs/dlq.md)"
	if n+1 > limit {
		return fmt.Errorf("stopped: %s (%s) carries %s %d: this read returns it at %d, past the delivery limit -delivery-limit gives (%d): the broker drops or dead-letters it as this read ends. %s", id, typ, headerDeliveryCount, n, n+1, limit, out)
	}
	return fmt.Errorf("stopped: %s (%s) carries %s %d: this read returns it at %d, the delivery limit -delivery-limit gives: the broker drops or dead-letters it at the next read that returns it. %s", id, typ, headerDeliveryCount, n, n+1, out)
}

// recount is how often a read that runs alone counts the queue's consumers
// within a window: a re-drive that moves every copy it reads keeps one
// window throughout, and would otherwise read beside a consumer begun during
// it to its end. A passive declare each time: not one per copy.
const recount = time.Second

// lockPrefix begins the name of a re-drive lock.
const lockPrefix = "lilydlq.redrive."

// lockName is the name of queue's re-drive lock: the prefix and the queue's
// name, or, where that would pass AMQP's 255 bytes, its SHA-256.
func lockName(queue string) string {
	if len(lockPrefix)+len(queue) <= maxQueue {
		return lockPrefix + queue
	}
	sum := sha256.Sum256([]byte(queue))
	return lockPrefix + "sha256." + hex.EncodeToString(sum[:])
}

// lock takes queue's re-drive lock on ch: an exclusive queue, which the
// broker refuses to any other connection (405 RESOURCE_LOCKED) and deletes
// when this one closes, however it ends. Unlike a count of consumers it
// does not depend on the queue's type, and it holds from the read's start
// to its end, after the close that hands back the copies it kept.
func lock(ch *amqp.Channel, queue, name string) error {
	lock := lockName(queue)
	_, err := ch.QueueDeclare(lock, false, true, true, false, nil)
	var ae *amqp.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ae) && ae.Code == amqp.ResourceLocked:
		return fmt.Errorf("refusing to %s: another %s of %s is running (its connection holds the lock %s); nothing was read, run it once that one ended", name, name, sanitize.Text(queue, maxQueue), sanitize.Text(lock, maxQueue))
	default:
		return fmt.Errorf("take the lock %s, an exclusive queue that keeps a second %s of %s from running (the user needs the configure permission on it): %s", sanitize.Text(lock, maxQueue), name, sanitize.Text(queue, maxQueue), sanitize.Text(err.Error(), maxReason))
	}
}

// quarantinedWhy says why the filter replaced d's headers, or "" when it did
// not. The marker alone proves nothing (a producer can send it); the
// connection's seal beside it does.
func quarantinedWhy(filter *quarantine.Conn, d *amqp.Delivery) string {
	v, _ := filter.Quarantined(d.Headers)
	return v.Why
}

// cancel ends a window's consumer and drains what the broker sent it before
// the cancel: those copies stay held, unvisited, and return at the close.
func cancel(ch *amqp.Channel, tag string, dels <-chan amqp.Delivery) error {
	if err := ch.Cancel(tag, false); err != nil {
		return err
	}
	for range dels {
	}
	return nil
}

// fill receives, without visiting them, up to n more copies for a window's
// consumer, for at most idle: they stay held, and return at the close.
func fill(dels <-chan amqp.Delivery, n int, idle time.Duration) error {
	timer := time.NewTimer(idle)
	defer timer.Stop()
	for range n {
		select {
		case _, ok := <-dels:
			if !ok {
				return errors.New("the broker ended the consumer")
			}
		case <-timer.C:
			return nil
		}
	}
	return nil
}

// handedBack waits, for at most idle, until a passive declare of queue
// counts no more consumers than the others there were when the read began,
// and returns how many more it still counts then. Beside others that come
// and go it cannot tell theirs from the read's own.
func handedBack(conn *amqp.Connection, queue string, others int, idle time.Duration) (int, error) {
	ch, err := conn.Channel()
	if err != nil {
		return 0, fmt.Errorf("open a channel to count the consumers of %s after the read: %s", sanitize.Text(queue, maxQueue), sanitize.Text(err.Error(), maxReason))
	}
	defer ch.Close()
	end := time.Now().Add(idle)
	for {
		q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		if err != nil {
			return 0, fmt.Errorf("counting its consumers after the read: %w", queueError(queue, err))
		}
		if q.Consumers <= others || time.Now().After(end) {
			return max(q.Consumers-others, 0), nil
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// queueError says why a passive declare failed: a missing queue plainly.
func queueError(queue string, err error) error {
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Code == amqp.NotFound {
		return fmt.Errorf("no queue named %s", sanitize.Text(queue, maxQueue))
	}
	return fmt.Errorf("queue %s: %s", sanitize.Text(queue, maxQueue), sanitize.Text(err.Error(), maxReason))
}

// readError says why the reading channel ended when it was closed (closedWhy),
// else err.
func readError(closed <-chan *amqp.Error, err error) error {
	select {
	case e, ok := <-closed:
		if ok && e != nil {
			return errors.New(closedWhy(e))
		}
	case <-time.After(100 * time.Millisecond):
	}
	return fmt.Errorf("reading: %s", sanitize.Text(err.Error(), maxReason))
}

// closedWhy says what closed the reading channel, which tells when the
// copies it held go back: the broker's close (a consumer timeout, a deleted
// queue, a forced close of the connection) returns them at once; the
// client's own end of the connection (its read timed out, the socket was
// reset: Server is false) leaves them with the broker until it sees the
// connection gone, which for a half-open one is its heartbeat timeout.
func closedWhy(e *amqp.Error) string {
	if e.Server {
		return "the broker closed the reading channel (every copy it held returns to the DLQ): " + sanitize.Text(e.Error(), maxReason)
	}
	return "the client lost its connection to the broker (" + sanitize.Text(e.Reason, maxReason) + "): every copy the read held returns to the DLQ once the broker sees the connection gone"
}
