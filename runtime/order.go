package runtime

import (
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/runtime/internal/decide"
	"github.com/lily-mq/lily/runtime/internal/guard"
	"github.com/lily-mq/lily/runtime/internal/sanitize"
)

// maxOrderKey bounds the part of an order key that tells lanes apart: keys
// that share it share a lane, which only serializes more than asked.
const maxOrderKey = 256

// lanes serialize the deliveries of each order key: a delivery starts once
// the one before it with its key has ended, in the order the queue delivered
// them. A lane exists while a delivery of its key is in flight.
type lanes struct {
	mu sync.Mutex
	// tail holds, for each lane, what its last delivery closes when its
	// journey has ended: the next one may then start, or be requeued behind
	// it. Not before: a delivery that started may still be requeued (a retry
	// in line at the stop, a deferral, a failed handoff), and a quorum queue
	// hands requeued messages back in the order they came back.
	tail map[laneKey]chan struct{}
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

// enter puts a delivery at the end of key's lane: prev is closed when the
// journey of the one before it has ended. It must call leave when its own
// journey has ended.
func (l *lanes) enter(key laneKey) (prev <-chan struct{}, leave func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.tail == nil {
		l.tail = map[laneKey]chan struct{}{}
	}
	prev, ok := l.tail[key]
	if !ok {
		prev = ended
	}
	own := make(chan struct{})
	l.tail[key] = own
	return prev, func() {
		close(own)
		l.mu.Lock()
		if l.tail[key] == own {
			delete(l.tail, key)
		}
		l.mu.Unlock()
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

// orderKey is d's order key, bounded, and the guard's reading of d, which
// the journey then uses (nil when d was quarantined: quarantined is why the
// filter replaced d's content header, "" when it did not). OrderKey runs on
// the intake's goroutine, after the guard but before the journey: a panic
// there, on one message, would end the process, again at each redelivery.
// It is logged instead, and the delivery takes the lane of those whose key
// panicked.
func (c *Consumer) orderKey(d *amqp.Delivery, quarantined string) (key laneKey, read *reading) {
	if quarantined != "" {
		return guardRefused, nil
	}
	own := c.read(d, time.Now())
	if own.verdict != guard.Passed {
		return guardRefused, &own
	}
	defer func() {
		if p := recover(); p != nil {
			c.cfg.Logger.Error("lily OrderKey panicked; the delivery is ordered only behind others whose key panicked",
				"queue", c.spec.Name, "message_id", sanitize.Text(d.MessageId, maxIDText), "detail", sanitize.Text(fmt.Sprint(p), decide.MaxCause))
			key = panicked
		}
	}()
	k := c.spec.OrderKey(d.Headers, d.Body)
	if len(k) > maxOrderKey {
		k = k[:maxOrderKey]
	}
	return laneKey{key: k}, &own
}

// inOrder takes d into its key's lane, in the order received, and runs it on
// a worker once the delivery before it in the lane has ended and a
// concurrency slot is free. Waiting for the lane holds no slot, so one busy
// key does not keep the others waiting, and does not count against the
// delivery's budget, which starts when that wait ends: the settler knows the
// delivery from its receipt (so that no multiple ACK covers it), but times
// it from then, so a delivery kept from a slot by handlers past their
// timeout has its channel recycled, as on an unordered queue.
//
// When the session's intake is cancelled (the stop, a recycle), the
// deliveries still waiting are requeued, each once the one before it in its
// lane has ended, so that the queue gets them back in their order. A delivery
// whose session was lost while it waited is not started: the broker
// redelivers it. A delivery leaves its lane when its journey ends: a handler
// past its timeout runs on beside the next one of its key rather than stop
// the lane (and, with the prefetch full of that key, the queue).
func (c *Consumer) inOrder(r *run, s *session, d *amqp.Delivery, quarantined string) {
	s.gen.Settler.Received(d.DeliveryTag, time.Time{})
	key, read := c.orderKey(d, quarantined)
	prev, leave := (<-chan struct{})(ended), func() {}
	if key != guardRefused {
		prev, leave = r.lanes.enter(key)
	}
	r.deliveries.Add(1)
	s.inflight.Add(1)
	r.waiting.Add(1)
	c.hooks.enteredLane()
	r.workers.Run(func() {
		defer r.deliveries.Done()
		defer s.inflight.Done()
		defer leave()
		requeue := func(why string) {
			// After the final abort nothing is NACKed any more, so the
			// journey ahead is not waited for: the record goes into the
			// report before it is sealed.
			select {
			case <-prev:
			case <-r.aborted:
			}
			s.gen.Settler.Started(d.DeliveryTag, time.Now())
			c.notStarted(r, s.gen, d, why)
			r.waiting.Done()
		}
		c.hooks.laneTurn(d.MessageId)
		// A stop that came with the turn, or with the slot, wins over it (a
		// select picks at random among the ready): the delivery before this
		// one may have been requeued by that stop, and this one goes back
		// behind it rather than run ahead of it.
		select {
		case <-prev:
		case <-s.cancelled:
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
		started := time.Now()
		s.gen.Settler.Started(d.DeliveryTag, started)
		took := false
		select {
		case r.slots <- struct{}{}:
			took = true
		case <-s.cancelled:
		case <-s.gen.Ended():
		case <-r.aborted:
		case <-r.stopping:
		}
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
		if why := laneStopped(s, r); why != "" || s.gen.Revoked() {
			if took {
				<-r.slots
			}
			if why != "" {
				requeue("not started: " + why + " while it waited for a slot")
				return
			}
			c.notStarted(r, s.gen, d, "not started: its session was lost while it waited for its order key")
			r.waiting.Done() // recorded
			return
		}
		sl := &slot{slots: r.slots}
		sl.hold()
		defer sl.leave()
		r.waiting.Done() // the journey tells the report of itself at once
		c.process(r, s, s.gen, d, started, quarantined, read, sl)
	})
}

// laneStopped says why an ordered delivery that has not started must not:
// intake was cancelled (the stop, a recycle; at the stop, a session the
// broker cancelled or lost has its intake ended already) or the consumer
// aborted; "" when neither.
func laneStopped(s *session, r *run) string {
	switch {
	case closed(s.cancelled), closed(r.stopping) && closed(s.lost):
		return "intake stopped"
	case closed(r.aborted):
		return "the consumer aborted"
	}
	return ""
}
