package faults

import (
	"encoding/binary"
	"time"
	"unicode/utf8"
)

// Block tells the clients of the connections whose announced name satisfies
// match that the broker blocks their publishes (connection.blocked, as a
// resource alarm does), and returns how many it told. The broker is not
// blocked: a client that publishes anyway is still read. The reason is
// cut to the 255 bytes a short string holds, at a rune's start.
func (p *Proxy) Block(match func(name string) bool, reason string) int {
	if len(reason) > 255 {
		n := 255
		for n > 0 && !utf8.RuneStart(reason[n]) {
			n--
		}
		reason = reason[:n]
	}
	payload := binary.BigEndian.AppendUint16(nil, 10)
	payload = binary.BigEndian.AppendUint16(payload, 60)
	payload = append(append(payload, byte(len(reason))), reason...)
	return p.toClients(match, payload)
}

// Unblock ends what Block began (connection.unblocked).
func (p *Proxy) Unblock(match func(name string) bool) int {
	payload := binary.BigEndian.AppendUint16(nil, 10)
	payload = binary.BigEndian.AppendUint16(payload, 61)
	return p.toClients(match, payload)
}

// toClients hands a method frame on channel 0 to the client of each matching
// connection, after the frames already on their way.
func (p *Proxy) toClients(match func(name string) bool, payload []byte) int {
	frame := binary.BigEndian.AppendUint32([]byte{1, 0, 0}, uint32(len(payload)))
	frame = append(append(frame, payload...), frameEnd)
	n := 0
	for _, c := range p.matching(match) {
		c.mu.Lock()
		queue := c.toClient
		c.mu.Unlock()
		if queue != nil && c.send(queue, out{bytes: frame, due: time.Now()}) {
			n++
		}
	}
	return n
}
