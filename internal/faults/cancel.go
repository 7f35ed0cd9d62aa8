package faults

import (
	"encoding/binary"
	"time"
)

// CancelConsumers sends every consumer on the connections whose announced
// name satisfies match a basic.cancel, as RabbitMQ 4.3 does at a quorum
// queue's consumer timeout (and any version when a queue is deleted), and
// returns how many it cancelled. A consumer the client cancelled, or whose
// channel closed, is gone and not counted. The broker is not told: it keeps
// counting the consumer, and what it still delivers to it waits
// unacknowledged on the channel (the client drops a delivery for a consumer
// it no longer has) until the channel closes. The client's basic.cancel-ok
// answering such a cancel, which the broker would not expect, is dropped.
func (p *Proxy) CancelConsumers(match func(name string) bool) int {
	n := 0
	for _, c := range p.matching(match) {
		n += c.cancelConsumers()
	}
	return n
}

// consumer is a consumer tag and its channel: a tag names a consumer on its
// channel only.
type consumer struct {
	channel uint16
	tag     string
}

// cancelConsumers hands the client a basic.cancel (no-wait) for each of its
// consumers, and reports how many. It holds c.mu while it queues them, so
// that a channel.close the broker sends meanwhile either is tracked first
// (and its consumers are not cancelled) or reaches the client after them.
func (c *pconn) cancelConsumers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.toClient == nil {
		return 0
	}
	n := 0
	for k := range c.consumers {
		delete(c.consumers, k)
		if !c.send(c.toClient, out{bytes: CancelFrame(k.channel, k.tag), due: time.Now()}) {
			break
		}
		c.cancelled[k] = struct{}{}
		n++
	}
	return n
}

// track follows the consumers through f: a broker's consume-ok adds one, a
// basic.cancel or cancel-ok either way removes it, and a channel.close or
// close-ok either way removes its channel's. It reports whether f is the
// client's cancel-ok answering the proxy's own cancel, which the broker must
// not see.
func (c *pconn) track(f Frame, raw []byte) (drop bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case f.Dir == ToClient && f.Is(BasicConsumeOk):
		if k, ok := consumerOf(f, raw); ok {
			c.consumers[k] = struct{}{}
		}
	case f.Is(BasicCancel), f.Is(BasicCancelOk):
		k, ok := consumerOf(f, raw)
		if !ok {
			return false
		}
		delete(c.consumers, k)
		if _, ours := c.cancelled[k]; ours && f.Dir == ToBroker && f.Is(BasicCancelOk) {
			delete(c.cancelled, k)
			return true
		}
	case f.Is(ChannelClose), f.Is(ChannelCloseOk):
		for _, m := range []map[consumer]struct{}{c.consumers, c.cancelled} {
			for k := range m {
				if k.channel == f.Channel {
					delete(m, k)
				}
			}
		}
	}
	return false
}

// consumerOf reads the consumer tag that opens the arguments of a
// consume-ok, a cancel or a cancel-ok.
func consumerOf(f Frame, raw []byte) (consumer, bool) {
	tag, ok := ConsumerTag(raw)
	return consumer{f.Channel, tag}, ok
}

// CancelFrame is a basic.cancel (no-wait) of the consumer tag on channel, as
// the broker sends it: for a Rewriter to hand the client one it chooses. A
// tag is a short string: one longer than 255 bytes is cut there.
func CancelFrame(channel uint16, tag string) []byte {
	tag = tag[:min(len(tag), 255)]
	payload := binary.BigEndian.AppendUint16(nil, BasicCancel.Class)
	payload = binary.BigEndian.AppendUint16(payload, BasicCancel.ID)
	payload = append(append(append(payload, byte(len(tag))), tag...), 1)
	frame := []byte{1, byte(channel >> 8), byte(channel)}
	frame = binary.BigEndian.AppendUint32(frame, uint32(len(payload)))
	return append(append(frame, payload...), frameEnd)
}

// ConsumerTag reads the consumer tag that opens the arguments of raw, the
// frame of a consume-ok, a cancel or a cancel-ok; false when raw is too
// short to hold one.
func ConsumerTag(raw []byte) (string, bool) {
	if len(raw) < 12 || len(raw) < 12+int(raw[11]) {
		return "", false
	}
	return string(raw[12 : 12+int(raw[11])]), true
}
