package faults

import (
	"bufio"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// These tests need no service: the proxy forwards to a stand-in broker, and
// each side's frames are written and read by hand.

// peer is one end of a connection through the proxy, the client's or the
// stand-in broker's.
type peer struct {
	t    *testing.T
	conn net.Conn
	r    *bufio.Reader
}

// rawProxy starts a proxy to a stand-in broker and connects a client named
// name through it; the broker has read the client's start-ok, and the client
// a heartbeat of the broker's: the proxy is passing frames both ways, as
// after a real handshake.
func rawProxy(t *testing.T, name string) (p *Proxy, client, broker *peer) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	if p, err = Listen(ln.Addr().String()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	client = &peer{t, c, bufio.NewReader(c)}
	props := binary.BigEndian.AppendUint32([]byte("\x0fconnection_nameS"), uint32(len(name)))
	client.write([]byte("AMQP\x00\x00\x09\x01"), method(0, ConnectionStartOk, append(props, name...)...))
	b, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	broker = &peer{t, b, bufio.NewReader(b)}
	if _, err := broker.r.Discard(8); err != nil {
		t.Fatal(err)
	}
	broker.expect(0, ConnectionStartOk)
	broker.write(heartbeat)
	if _, f := client.read(); f.Type != 8 {
		t.Fatalf("read %+v, want the heartbeat", f)
	}
	return p, client, broker
}

// method is a method frame of m on channel with args.
func method(channel uint16, m Method, args ...byte) []byte {
	payload := binary.BigEndian.AppendUint16(nil, m.Class)
	payload = binary.BigEndian.AppendUint16(payload, m.ID)
	frame := binary.BigEndian.AppendUint32([]byte{1, byte(channel >> 8), byte(channel)}, uint32(len(payload)+len(args)))
	return append(append(append(frame, payload...), args...), frameEnd)
}

// tag is a consumer tag as a short string.
func tag(s string) []byte { return append([]byte{byte(len(s))}, s...) }

// heartbeat is a heartbeat frame: something to send after the frames a test
// expects to be dropped.
var heartbeat = []byte{8, 0, 0, 0, 0, 0, 0, frameEnd}

// write writes frames at once, in one write.
func (p *peer) write(frames ...[]byte) {
	p.t.Helper()
	var b []byte
	for _, f := range frames {
		b = append(b, f...)
	}
	if _, err := p.conn.Write(b); err != nil {
		p.t.Fatal(err)
	}
}

// read reads the next frame, or fails the test if none comes.
func (p *peer) read() ([]byte, Frame) {
	p.t.Helper()
	_ = p.conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	raw, f, err := readFrame(p.r)
	if err != nil {
		p.t.Fatalf("reading a frame: %v", err)
	}
	return raw, f
}

// expect reads the next frame and fails the test unless it is a method
// frame of m on channel; it returns the frame whole.
func (p *peer) expect(channel uint16, m Method) []byte {
	p.t.Helper()
	raw, f := p.read()
	if !f.Is(m) || f.Channel != channel {
		p.t.Fatalf("read %+v, want %v on channel %d", f, m, channel)
	}
	return raw
}

// The proxy tracks consumers through their cancels and their channels'
// closes, either way, and drops only the client's cancel-oks answering its
// own cancels.
func TestCancelConsumersTracksConsumers(t *testing.T) {
	t.Parallel()
	p, client, broker := rawProxy(t, "fx-faults-tracks")
	for ch, tg := range []string{1: "a", 2: "b", 3: "c", 4: "d", 5: "e"} {
		if tg != "" {
			broker.write(method(uint16(ch), BasicConsumeOk, tag(tg)...))
			client.expect(uint16(ch), BasicConsumeOk)
		}
	}
	// a: cancelled by the client.
	client.write(method(1, BasicCancel, append(tag("a"), 0)...))
	broker.expect(1, BasicCancel)
	broker.write(method(1, BasicCancelOk, tag("a")...))
	client.expect(1, BasicCancelOk)
	// b: its channel closed by the client; c: by the broker.
	closing := []byte{0, 200, 0, 0, 0, 0, 0}
	client.write(method(2, ChannelClose, closing...))
	broker.expect(2, ChannelClose)
	broker.write(method(2, ChannelCloseOk))
	client.expect(2, ChannelCloseOk)
	broker.write(method(3, ChannelClose, closing...))
	client.expect(3, ChannelClose)
	client.write(method(3, ChannelCloseOk))
	broker.expect(3, ChannelCloseOk)
	// d: cancelled by the broker, and the client's answer reaches it.
	broker.write(method(4, BasicCancel, append(tag("d"), 1)...))
	client.expect(4, BasicCancel)
	client.write(method(4, BasicCancelOk, tag("d")...))
	broker.expect(4, BasicCancelOk)

	if n := p.CancelConsumers(func(string) bool { return true }); n != 1 {
		t.Fatalf("CancelConsumers = %d, want 1 (e)", n)
	}
	client.expect(5, BasicCancel)
	// The client answers the proxy's cancel, then the broker's own (its
	// queue deleted, say): the broker sees the second answer only.
	client.write(method(5, BasicCancelOk, tag("e")...))
	broker.write(method(5, BasicCancel, append(tag("e"), 1)...))
	client.expect(5, BasicCancel)
	client.write(method(5, BasicCancelOk, tag("e")...), heartbeat)
	broker.expect(5, BasicCancelOk)
	if _, f := broker.read(); f.Type != 8 {
		t.Errorf("read %+v after the answer to the broker's cancel, want the heartbeat", f)
	}
}

// closed fails the test unless the peer's connection closes before another
// frame comes.
func (p *peer) closed() {
	p.t.Helper()
	_ = p.conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	if raw, f, err := readFrame(p.r); err == nil {
		p.t.Fatalf("read %+v (% x), want the connection closed", f, raw)
	} else if errors.Is(err, os.ErrDeadlineExceeded) {
		p.t.Fatal("the connection is still open")
	}
}

// CutBefore loses the frame it is timed on and what follows, not what the
// proxy read before it: not in the same read, not held back by a delay or a
// stall.
func TestCutBeforePassesWhatCameBefore(t *testing.T) {
	t.Parallel()
	ack := func(channel uint16) []byte { return method(channel, BasicAck, make([]byte, 9)...) }
	for _, tc := range []struct {
		name  string
		fault func(*Proxy)
	}{
		{"one read", func(*Proxy) {}},
		{"delayed", func(p *Proxy) { p.Delay(200 * time.Millisecond) }},
		{"stalled", func(p *Proxy) {
			p.Stall(ToBroker)
			time.AfterFunc(200*time.Millisecond, p.Resume)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, client, broker := rawProxy(t, "fx-faults-cut-before")
			p.Intercept(func(f Frame) Action {
				if f.Dir == ToBroker && f.Is(BasicAck) && f.Channel == 2 {
					return CutBefore
				}
				return Forward
			})
			tc.fault(p)
			client.write(ack(1), ack(2), ack(3))
			broker.expect(1, BasicAck)
			broker.closed()
			client.closed()
		})
	}
}

// Held counts the frames a stall or a delay held back, and only those.
func TestHeldCountsTheFramesHeldBack(t *testing.T) {
	t.Parallel()
	p, client, broker := rawProxy(t, "fx-faults-held")
	ping := func() {
		t.Helper()
		client.write(heartbeat)
		if _, f := broker.read(); f.Type != 8 {
			t.Fatalf("read %+v, want the heartbeat", f)
		}
	}
	ping()
	p.Stall(ToClient)
	ping()
	p.Resume()
	if n := p.Held(); n != 0 {
		t.Fatalf("Held = %d after frames that flowed, want 0", n)
	}
	p.Stall(ToBroker)
	time.AfterFunc(100*time.Millisecond, p.Resume)
	ping()
	if n := p.Held(); n != 1 {
		t.Fatalf("Held = %d after a stalled frame, want 1", n)
	}
	p.Delay(50 * time.Millisecond)
	ping()
	p.Delay(0)
	ping()
	if n := p.Held(); n != 2 {
		t.Errorf("Held = %d after a delayed frame, want 2", n)
	}
}

// A Block reason longer than a short string holds is cut to 255 bytes, at a
// rune's start, and the frame stays well-formed.
func TestBlockBoundsItsReason(t *testing.T) {
	t.Parallel()
	p, client, _ := rawProxy(t, "fx-faults-block")
	reason := strings.Repeat("x", 254) + "é" + strings.Repeat("y", 45)
	if n := p.Block(func(string) bool { return true }, reason); n != 1 {
		t.Fatalf("Block told %d clients, want 1", n)
	}
	raw := client.expect(0, Method{10, 60})
	if got := string(raw[12 : len(raw)-1]); int(raw[11]) != len(got) || got != reason[:254] {
		t.Errorf("connection.blocked's reason: length %d, %d bytes; want 254, the x's alone", raw[11], len(got))
	}
}
