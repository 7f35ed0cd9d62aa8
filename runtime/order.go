package runtime

import (
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// maxOrderKey bounds the part of an order key that tells lanes apart: keys
// that share it share a lane, which only serializes more than asked.
const maxOrderKey = 256

// lanes serialize the deliveries of each order key: a delivery starts once
// the one before it with its key has ended, in the order the queue delivered
// them. A lane exists while a delivery of its key is in flight.
type lanes struct {
	mu   sync.Mutex
	tail map[string]chan struct{} // the end of each lane's last delivery
}

// enter puts a delivery at the end of key's lane. It may start once wait is
// closed, and calls leave when it has ended.
func (l *lanes) enter(key string) (wait <-chan struct{}, leave func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.tail == nil {
		l.tail = map[string]chan struct{}{}
	}
	prev, ok := l.tail[key]
	if !ok {
		prev = make(chan struct{})
		close(prev)
	}
	done := make(chan struct{})
	l.tail[key] = done
	return prev, func() {
		close(done)
		l.mu.Lock()
		if l.tail[key] == done {
			delete(l.tail, key)
		}
		l.mu.Unlock()
	}
}

// orderKey is d's order key, bounded. A body over the queue's limit takes no
// part in it: it is dead-lettered unread.
func (c *Consumer) orderKey(d *amqp.Delivery) string {
	body := d.Body
	if len(body) > c.spec.MaxBodyBytes {
		body = nil
	}
	key := c.spec.OrderKey(d.Headers, body)
	if len(key) > maxOrderKey {
		key = key[:maxOrderKey]
	}
	return key
}

// inOrder takes d into its key's lane, in the order received, and runs it on
// a worker once the delivery before it in the lane has ended and a
// concurrency slot is free. Waiting holds no slot, so one busy key does not
// keep the others waiting, and it does not count against the delivery's
// budget, which starts when the wait ends: the settler knows the delivery
// from its receipt (so that no multiple ACK covers it), but times it from
// then. A delivery still waiting when intake stops, or whose session was
// lost while it waited, is not started: requeued, or left to the broker.
// A delivery leaves its lane when its journey ends: a handler past its
// timeout runs on beside the next one of its key rather than stop the lane
// (and, with the prefetch full of that key, the queue).
func (c *Consumer) inOrder(r *run, s *session, d *amqp.Delivery, quarantined string) {
	s.gen.Settler.Received(d.DeliveryTag, time.Time{})
	wait, leave := r.lanes.enter(c.orderKey(d))
	r.deliveries.Add(1)
	s.inflight.Add(1)
	r.workers.Run(func() {
		defer r.deliveries.Done()
		defer s.inflight.Done()
		defer leave()
		why := "not started: intake stopped while it waited for its order key"
		select {
		case <-wait:
			select {
			case r.slots <- struct{}{}:
				why = ""
			case <-r.stopping:
			}
		case <-r.stopping:
		}
		if why != "" {
			c.notStarted(r, s.gen, d, why)
			return
		}
		sl := &slot{slots: r.slots}
		sl.hold()
		defer sl.release()
		if s.gen.Revoked() {
			c.notStarted(r, s.gen, d, "not started: its session was lost while it waited for its order key")
			return
		}
		started := time.Now()
		s.gen.Settler.Started(d.DeliveryTag, started)
		c.process(r, s.gen, d, started, quarantined, sl)
	})
}
