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
// a worker: once the delivery before it in the lane has ended, and a
// concurrency slot is free. Waiting holds no slot, so one busy key does not
// keep the others waiting. A delivery whose session was lost while it
// waited is not started: the broker redelivers it.
func (c *Consumer) inOrder(r *run, s *session, d *amqp.Delivery, received time.Time, quarantined string) {
	wait, leave := r.lanes.enter(c.orderKey(d))
	r.deliveries.Add(1)
	s.inflight.Add(1)
	r.workers.Run(func() {
		defer r.deliveries.Done()
		defer s.inflight.Done()
		select {
		case <-wait:
		case <-r.aborted:
		}
		select {
		case r.slots <- struct{}{}:
		case <-r.aborted:
			c.notStarted(r, s.gen, d, "not started: the consumer aborted while it waited for its order key")
			leave()
			return
		}
		sl := &slot{slots: r.slots, leave: leave}
		sl.hold()
		defer sl.release()
		if s.gen.Revoked() {
			c.notStarted(r, s.gen, d, "not started: its session was lost while it waited for its order key")
			return
		}
		c.process(r, s.gen, d, received, quarantined, sl)
	})
}
