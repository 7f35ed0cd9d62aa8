package faults

import (
	"encoding/binary"
	"time"
)

// CancelConsumers sends every consumer on the connections whose announced
// name satisfies match a basic.cancel, as RabbitMQ 4.3 does at a quorum
// queue's consumer timeout (and any version when a queue is deleted), and
// returns how many it cancelled. The broker is not told: it keeps counting
// the consumer, and what it still delivers to it waits unacknowledged on the
// channel (the client drops a delivery for a consumer it no longer has)
// until the channel closes. The client's basic.cancel-ok, which the broker
// would not expect, is dropped.
func (p *Proxy) CancelConsumers(match func(name string) bool) int {
	n := 0
	for _, c := range p.matching(match) {
		n += c.cancelConsumers()
	}
	return n
}

// cancelConsumers hands the client a basic.cancel (no-wait) for each of its
// consumers, and reports how many.
func (c *pconn) cancelConsumers() int {
	c.mu.Lock()
	queue, consumers := c.toClient, c.consumers
	c.consumers = nil
	c.mu.Unlock()
	if queue == nil {
		return 0
	}
	c.cancelled.Store(true)
	n := 0
	for tag, channel := range consumers {
		payload := binary.BigEndian.AppendUint16(nil, BasicCancel.Class)
		payload = binary.BigEndian.AppendUint16(payload, BasicCancel.ID)
		payload = append(append(append(payload, byte(len(tag))), tag...), 1)
		frame := []byte{1, byte(channel >> 8), byte(channel)}
		frame = binary.BigEndian.AppendUint32(frame, uint32(len(payload)))
		frame = append(append(frame, payload...), frameEnd)
		if c.send(queue, out{bytes: frame, due: time.Now()}) {
			n++
		}
	}
	return n
}

// noteConsumer remembers the consumer tag a broker's consume-ok names.
func (c *pconn) noteConsumer(f Frame, raw []byte) {
	if len(raw) < 12 || len(raw) < 12+int(raw[11]) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.consumers == nil {
		c.consumers = map[string]uint16{}
	}
	c.consumers[string(raw[12:12+int(raw[11])])] = f.Channel
}
