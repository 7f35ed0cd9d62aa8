package runtime

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/internal/quarantine"
	"github.com/lily-mq/lily/internal/sanitize"
	"github.com/lily-mq/lily/runtime/internal/decide"
	"github.com/lily-mq/lily/runtime/internal/guard"
	"github.com/lily-mq/lily/runtime/internal/step"
)

// maxOrderKey bounds the part of an order key that tells lanes apart: keys
// that share it share a lane, which only serializes more than asked.
const maxOrderKey = 256

// lanes serialize the deliveries of each order key: a delivery starts once
// the one before it with its key has ended, in the order the queue delivered
// them. A lane exists while a delivery of its key is in flight, or what it
// abandoned still runs.
type lanes struct {
	mu sync.Mutex
	// tail holds, for each lane, the place of its last delivery, which the
	// next one waits for.
	tail map[laneKey]place
}

// place is a delivery's place in its lane: what the next one waits for.
type place struct {
	// ended is closed when its journey has ended: the next may then be
	// requeued behind it. Not before: a delivery that started may still be
	// requeued (a retry in line at the stop, a deferral, a failed handoff),
	// and a quorum queue hands requeued messages back in the order they
	// came back.
	ended chan struct{}
	// free is closed once, besides, nothing it abandoned still runs (its
	// handler past its timeout, a scope step given up on), or its budget
	// has ended: the next may then start.
	free chan struct{}
}

// laneKey names a lane: the key OrderKey returned, or a lane of the
// runtime's own, which no key can name: a header's string reaches OrderKey
// as sent, NUL and all.
type laneKey struct {
	key  string
	kind laneKind
}

type laneKind uint8

const (
	byOrderKey  laneKind = iota // key is what OrderKey returned
	keyPanicked                 // OrderKey panicked
	keyRefused                  // the guard refused the delivery
)

// ended is what the first delivery of a lane waits for: nothing.
var ended = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// enter puts a delivery at the end of key's lane: prev is the place of the
// one before it. The delivery's turn must be left (turn.leave) when its
// journey has ended.
func (l *lanes) enter(key laneKey) (prev place, own *turn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.tail == nil {
		l.tail = map[laneKey]place{}
	}
	prev, ok := l.tail[key]
	if !ok {
		prev = place{ended, ended}
	}
	at := place{make(chan struct{}), make(chan struct{})}
	l.tail[key] = at
	return prev, &turn{at: at, prev: prev.free, freeLane: func() {
		close(at.free)
		l.mu.Lock()
		if l.tail[key] == at {
			delete(l.tail, key)
		}
		l.mu.Unlock()
	}}
}

// turn is a delivery's hold on its place in its lane, shared by its
// journey and by what of it runs on abandoned (its handler past its
// timeout, a scope step given up on): the next delivery of its key starts
// only once all of them have returned, or the delivery's budget has ended,
// so that no user code of two deliveries of a key runs at once, and one
// hung step stops its key for one budget at most (a lane held for good
// would let the key fill the prefetch, and stop the queue).
type turn struct {
	at       place
	prev     <-chan struct{} // the free of the place before it
	freeLane func()          // closes at.free; the lane forgets it

	mu      sync.Mutex
	steps   int         // of its user code running, each holding the turn
	left    bool        // the journey has ended
	freed   bool        // freeLane was called
	expires *time.Timer // the budget's end, when the journey ended before its steps
}

// hold holds t while a step of the delivery's user code runs, and returns
// what gives it back, once, when the step returns; it holds nothing once
// the next delivery may start (a step that started after the budget's
// end, or after its journey and all else of it had ended).
func (t *turn) hold() (release func()) {
	if t == nil {
		return func() {}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.freed {
		return func() {}
	}
	t.steps++
	var once sync.Once
	return func() { once.Do(t.release) }
}

func (t *turn) release() {
	t.mu.Lock()
	t.steps--
	done := t.steps == 0 && t.left
	t.mu.Unlock()
	if done {
		t.end()
	}
}

// leave ends t's journey (ran: it took its turn, and ran, with its budget
// ending by). The next delivery may be requeued behind it at once, and
// start once nothing it abandoned runs, or by has passed. One that never
// ran passes the turn on as the one before it frees it (or at the final
// abort, aborted), since nothing of its own runs.
func (t *turn) leave(ran bool, by time.Time, aborted <-chan struct{}) {
	close(t.at.ended)
	if !ran {
		go func() {
			select {
			case <-t.prev:
			case <-aborted:
			}
			t.end()
		}()
		return
	}
	t.mu.Lock()
	t.left = true
	running := t.steps > 0
	if running {
		t.expires = time.AfterFunc(time.Until(by), t.end)
	}
	t.mu.Unlock()
	if !running {
		t.end()
	}
}

// end frees t for the next delivery, once.
func (t *turn) end() {
	t.mu.Lock()
	freed := t.freed
	t.freed = true
	if t.expires != nil {
		t.expires.Stop()
	}
	t.mu.Unlock()
	if !freed {
		t.freeLane()
	}
}

// panicked is the lane of the deliveries whose OrderKey panicked.
var panicked = laneKey{kind: keyPanicked}

// guardRefused is the key of the deliveries the guard refuses or the
// connection's filter quarantined, which take no lane: they go to the DLQ
// unread, so their order buys nothing, and one whose handoff is slow (a DLQ
// that refuses it, a blocked connection) must not hold the others. OrderKey,
// user code, never sees their metadata.
var guardRefused = laneKey{kind: keyRefused}

// consumeInOrder is consume for an ordered queue, whose deliveries are read
// where their OrderKey, user code, runs: not on Run's goroutine, where a
// runtime.Goexit in it (t.FailNow, off its test's goroutine) would end Run
// without a shutdown or a report, its channel left open with the
// deliveries it holds. A goroutine of the session's own reads them
// (laneIntake), which one that exits replaces; Run's waits for the stop, a
// recycle or the end of the deliveries. Nothing is handed from one to the
// other per delivery.
func (c *Consumer) consumeInOrder(ctx context.Context, r *run, s *session) error {
	stop := make(chan struct{})
	in := c.readInOrder(r, s, stop)
	select {
	case <-ctx.Done():
	case <-s.outlived:
	case <-in.done:
		return c.whyLost(s)
	}
	// Nothing more goes into the lanes before the cancel; the delivery being
	// read, if any, goes in first.
	close(stop)
	<-in.done
	if ctx.Err() != nil {
		c.stopIntake(r, s, nil)
		return nil
	}
	return c.recycle(r, s, nil)
}

// laneIntake reads an ordered session's deliveries into their lanes, in the
// order received, on a goroutine of its own, until stop is closed (nil:
// until the client ends the deliveries, after the cancel); done is closed
// then. A runtime.Goexit in OrderKey ends that goroutine; another goes on
// from there (exited).
type laneIntake struct {
	c    *Consumer
	r    *run
	s    *session
	stop <-chan struct{}
	done chan struct{}
}

// readInOrder starts reading s's deliveries into their lanes until stop.
func (c *Consumer) readInOrder(r *run, s *session, stop <-chan struct{}) *laneIntake {
	in := &laneIntake{c: c, r: r, s: s, stop: stop, done: make(chan struct{})}
	go in.read()
	return in
}

// read takes the deliveries into their lanes. It defers nothing: a Goexit
// in OrderKey must find nothing of it to run.
func (in *laneIntake) read() {
	for !closed(in.stop) {
		select {
		case <-in.stop:
		case received, ok := <-in.s.deliveries:
			if !ok {
				close(in.done)
				return
			}
			in.take(&received, in.s.quarantined(&received))
		}
	}
	close(in.done)
}

// take takes d, received, into its key's lane.
func (in *laneIntake) take(d *amqp.Delivery, quarantined quarantine.Verdict) {
	in.s.gen.Settler.Received(d.DeliveryTag, time.Time{})
	key, read := in.c.orderKey(d, quarantined, in)
	in.c.inOrder(in.r, in.s, d, quarantined, key, read)
}

// exited goes on, on a new goroutine, from d, whose OrderKey ended the
// intake's goroutine with runtime.Goexit: d takes key, and the deliveries
// after it are read as before. Only a Goexit pays for a goroutine.
func (in *laneIntake) exited(d *amqp.Delivery, key laneKey, read *reading) {
	go func() {
		in.c.inOrder(in.r, in.s, d, quarantine.Verdict{}, key, read)
		in.read()
	}()
}

// keyExit goes on from a delivery, d, whose OrderKey called runtime.Goexit,
// which ends the goroutine that read d: with key, the lane of those whose
// key panicked, and read, the guard's reading of d. The intake reading d
// is one (laneIntake.exited), and a trial's reading its one delivery.
type keyExit interface {
	exited(d *amqp.Delivery, key laneKey, read *reading)
}

// orderKey is d's order key, bounded, and the guard's reading of d, which
// the journey then uses (nil when d was quarantined: quarantined is why the
// filter replaced d's content header, its Why "" when it did not). OrderKey runs on
// the intake's goroutine, after the guard but before the journey: a panic
// there, on one message, would end the process, again at each redelivery.
// It is logged instead, and the delivery takes the lane of those whose key
// panicked; so does one whose OrderKey called runtime.Goexit, which in,
// reading d (nil in a test), goes on from.
func (c *Consumer) orderKey(d *amqp.Delivery, quarantined quarantine.Verdict, in keyExit) (key laneKey, read *reading) {
	if quarantined.Why != "" {
		return guardRefused, nil
	}
	own := c.read(d, time.Now())
	if own.verdict != guard.Passed {
		return guardRefused, &own
	}
	returned := false
	defer func() {
		if returned {
			return
		}
		// A Goexit: this goroutine ends once its deferred calls have run.
		key, read = c.keyPanicked(d, &own, "it called runtime.Goexit instead of returning")
		if in != nil {
			in.exited(d, key, read)
		}
	}()
	var k string
	p := recovered(func() { k = c.spec.OrderKey(d.Headers, d.Body) })
	returned = true
	if p != nil {
		return c.keyPanicked(d, &own, fmt.Sprint(p))
	}
	if len(k) > maxOrderKey {
		// A copy: the cut alone would keep the whole key (a field of the
		// body, say) alive while its delivery waits in its lane.
		k = strings.Clone(k[:maxOrderKey])
	}
	return laneKey{key: k}, &own
}

// keyPanicked logs that d's OrderKey panicked, or called runtime.Goexit, as
// detail says, and returns the lane of those whose key panicked, with own,
// the guard's reading of d.
func (c *Consumer) keyPanicked(d *amqp.Delivery, own *reading, detail string) (laneKey, *reading) {
	c.cfg.Logger.Error("lily OrderKey panicked; the delivery is ordered only behind others whose key panicked",
		"queue", c.spec.Name, "message_id", idText(d, own.env), "detail", sanitize.Text(detail, decide.MaxCause))
	return panicked, own
}

// inOrder takes d into the lane of key, orderKey's, in the order received,
// and runs it on a worker once the delivery before it in the lane has ended
// and a concurrency slot is free. Waiting for the lane holds no slot, so
// one busy key does not keep the others from the slots (it holds its place
// in the prefetch window, which one key can fill), and does not count
// against the delivery's budget, which starts when that wait ends: the
// settler knows the delivery from its receipt (so that no multiple ACK
// covers it), but times it from then, so a delivery kept from a slot by
// handlers past their timeout has its channel recycled, as on an unordered
// queue.
//
// When the session's intake is cancelled (the stop, a recycle, the recycle
// bound of a session the broker cancelled), the deliveries still waiting are
// requeued, each once the one before it in its lane has ended, so that the
// queue gets them back in their order. A delivery whose session was lost
// while it waited is not started: the broker redelivers it, and its journey
// ends once the one before it has ended. A delivery leaves its lane when its
// journey ends (settled and recorded, before the telemetry hook's ends and
// the log), but the next one of its key starts only once what it abandoned
// (a handler past its timeout, a scope step given up on) has returned too,
// or its budget has ended: what outlives the budget runs on beside it rather
// than stop the lane (and, with the prefetch full of that key, the queue)
// for good.
func (c *Consumer) inOrder(r *run, s *session, d *amqp.Delivery, quarantined quarantine.Verdict, key laneKey, read *reading) {
	prev, own := place{ended, ended}, (*turn)(nil)
	if key != guardRefused {
		prev, own = r.lanes.enter(key)
	}
	r.deliveries.Add(1)
	s.inflight.Add(1)
	r.waiting.Add(1)
	c.hooks.enteredLane()
	// The key its records name it by, as a started delivery's do; nil for
	// one the guard refused or the filter quarantined.
	var env *guard.Envelope
	if read != nil {
		env = read.env
	}
	r.workers.Run(func() {
		defer r.deliveries.Done()
		defer s.inflight.Done()
		// The journey leaves its lane once it is settled and recorded
		// (record), whether it started or not.
		sl := &slot{slots: r.slots, turn: own}
		var ran bool
		var started time.Time
		if own != nil {
			sl.lane = func() { own.leave(ran, started.Add(c.spec.budget()), r.aborted) }
		}
		defer sl.leaveLane()
		requeue := func(why string) {
			// After the final abort nothing is NACKed any more, so the
			// journey ahead is not waited for: the record goes into the
			// report before it is sealed.
			select {
			case <-prev.ended:
			case <-r.aborted:
			}
			s.gen.Settler.Started(d.DeliveryTag, time.Now())
			c.notStartedBy(r, s.gen, d, env, why, step.Deadline(c.cfg.StepTimeout, time.Time{}), sl.leaveLane)
			r.waiting.Done()
		}
		c.hooks.laneTurn(d.MessageId)
		// A stop that came with the turn, or with the slot, wins over it (a
		// select picks at random among the ready): the delivery before this
		// one may have been requeued by that stop, and this one goes back
		// behind it rather than run ahead of it. A loss ends the wait at
		// once: the broker has the delivery back, and its journey ends as
		// soon as the one before it has ended, not once that is free, so
		// that the next of its key (its redelivery, on the consuming
		// session) can go back at the stop; its turn still passes on only
		// once the one before it is free (turn.leave).
		select {
		case <-prev.free:
		case <-s.cancelled:
		case <-s.gen.Ended():
		case <-r.aborted:
		}
		// Its turn may come at the stop before the stop's cancel is answered
		// (the one before it settled meanwhile): it goes back then, after
		// the cancel, rather than start.
		s.awaitCancelAtStop(r)
		if why := laneStopped(s, r); why != "" {
			requeue("not started: " + why + " while it waited for its order key")
			return
		}
		started = time.Now()
		s.gen.Settler.Started(d.DeliveryTag, started)
		took, spent := c.laneSlot(r, s, started.Add(c.spec.budget()))
		if closed(r.stopping) {
			// A slot that freed at the stop, before its cancel was answered,
			// starts nothing: as on an unordered queue, the delivery goes
			// back once the cancel is answered.
			if took {
				<-r.slots
				took = false
			}
			s.awaitCancelAtStop(r)
		}
		if why := laneStopped(s, r); why != "" {
			if took {
				<-r.slots
			}
			if spent && why == intakeStopped && !closed(r.stopping) && !closed(r.aborted) {
				// The recycle its spent budget waited for; a stop, an abort
				// or a loss says so itself.
				requeue(decide.SpentWaiting)
				return
			}
			requeue("not started: " + why + " while it waited for a slot")
			return
		}
		sl.hold()
		defer sl.leave()
		ran = true
		r.waiting.Done() // the journey tells the report of itself at once
		c.process(r, s, s.gen, d, started, quarantined, read, sl)
	})
}

// laneSlot takes a concurrency slot for an ordered delivery whose budget
// ends at by, and reports whether it took one. It takes none, and returns at
// once, when intake is cancelled, the session ends, or the consumer stops or
// aborts first. A slot that frees only once the budget is spent starts
// nothing (decide.Starts), and spent says so: the delivery waits on for
// the recycle, which comes a step after its budget, so that it goes back
// behind the ones before it in its lane and ahead of those after it, rather
// than be requeued now, and let its key's next delivery run before it.
func (c *Consumer) laneSlot(r *run, s *session, by time.Time) (took, spent bool) {
	budget := step.Timer(by)
	defer step.Release(budget)
	// Once the budget is spent, only the end of the wait is waited for.
	slots, expired := r.slots, budget.C
	for {
		select {
		case slots <- struct{}{}:
			if decide.Starts(time.Until(by)) {
				return true, false
			}
			<-r.slots
			slots, expired, spent = nil, nil, true
			c.hooks.laneSpent()
		case <-expired:
			slots, expired, spent = nil, nil, true
			c.hooks.laneSpent()
		case <-s.cancelled:
			return false, spent
		case <-s.gen.Ended():
			return false, spent
		case <-r.aborted:
			return false, spent
		case <-r.stopping:
			return false, spent
		}
	}
}

// laneStopped says why an ordered delivery that has not started must not:
// its session was lost (its channel or connection: its authority revoked,
// so its requeue cannot be sent, and the broker redelivers it), intake was
// cancelled (the stop, a recycle, the recycle bound of a session the broker
// cancelled; at the stop, a session the broker cancelled has its intake
// ended already) or the consumer aborted; "" when none. A loss is told
// first, whatever came with it: it is what leaves the delivery unresolved.
func laneStopped(s *session, r *run) string {
	switch {
	case s.broken.Load(), s.gen.Revoked() && !closed(r.stopping):
		// Before the stop only a loss revokes a session.
		return "its session was lost"
	case closed(s.cancelled), closed(r.stopping) && closed(s.lost):
		return intakeStopped
	case closed(r.aborted), s.gen.Revoked():
		// At the stop, the final abort revokes every session, then says so.
		return "the consumer aborted"
	}
	return ""
}

// intakeStopped is laneStopped's word for an intake cancelled.
const intakeStopped = "intake stopped"
