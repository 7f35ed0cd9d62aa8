package main

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// replay is the broker of the broker-free benchmark: it speaks just enough
// AMQP 0-9-1 over loopback TCP for amqp091-go to open connections, channels
// and consumers, answers every synchronous method with its -ok at once, and
// replays one recorded delivery n times to its consumers, each with a tag
// and a message id of its own, never more than a channel's prefetch
// unacknowledged. ACKs go to a counter, publishes are confirmed as soon as
// their body has arrived. It runs in a process of its own (TestMain), so
// that the CPU time and the allocations the benchmark reports are the
// consumer's alone.
type replay struct {
	ln    net.Listener
	props []byte // the recorded delivery's content header properties
	body  []byte
	n     int
	// idAt is where the message id's sequence digits are in props.
	idAt int

	// rate paces the deliveries, per second over all consumers (0: as
	// fast as the windows allow); none goes before released is closed.
	rate     float64
	released chan struct{}
	began    time.Time // when released was closed

	next atomic.Int64 // deliveries handed to a consumer's feed so far
	// Open connections, channels and consumers, reported as they change.
	conns, chans, consumers    atomic.Int64
	changed                    chan struct{}
	acked, rejected, published atomic.Int64
	ackFrames                  atomic.Int64 // basic.ack frames, each settling one delivery or (multiple) several
	unserved                   atomic.Value // the first method it could not answer
	// misacked counts the ACKs, NACKs and rejects of a tag not sent, or
	// already settled, on which RabbitMQ would close the channel (406);
	// misack describes the first.
	misacked atomic.Int64
	misack   atomic.Value
}

const (
	replayFrameMax = 131072
	replaySeqWidth = 10
	// replayEnv, set to "n" or "n,rate" in a test binary's environment,
	// makes it a replay of n deliveries (at rate per second) instead of a
	// test run. With a rate it holds them until told to go.
	replayEnv = "LILY_BENCH_REPLAY"
)

// listenReplay listens on a loopback port for a replay of msg n times.
func listenReplay(msg amqp.Publishing, n int, rate float64) (*replay, error) {
	// A message id of fixed width, so that each delivery's is its
	// sequence number written over the template's digits.
	prefix := "o-"
	msg.MessageId = prefix + strings.Repeat("0", replaySeqWidth) + "-" + strconv.FormatInt(time.Now().UnixNano(), 10)
	props, idAt, err := properties(msg)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &replay{ln: ln, body: msg.Body, n: n, props: props, idAt: idAt + len(prefix), rate: rate, released: make(chan struct{}), changed: make(chan struct{}, 1)}
	if rate == 0 {
		r.start()
	}
	return r, nil
}

// start lets the deliveries go.
func (r *replay) start() {
	select {
	case <-r.released:
	default:
		r.began = time.Now()
		close(r.released)
	}
}

// count adds d to one of the open counts and reports the change.
func (r *replay) count(n *atomic.Int64, d int64) {
	n.Add(d)
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// serveAll serves every connection made to the replay.
func (r *replay) serveAll() {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		go r.serve(c)
	}
}

// replayConn is the broker's end of one client connection.
type replayConn struct {
	r        *replay
	conn     net.Conn
	mu       sync.Mutex // serialises writes, and guards channels
	channels map[uint16]*replayChannel
}

// replayChannel is one channel's state: its prefetch, the deliveries it has
// outstanding, and its publisher confirms.
type replayChannel struct {
	id       uint16
	mu       sync.Mutex
	room     *sync.Cond // signalled when an ACK frees the window or the channel ends
	prefetch int
	sent     uint64 // deliveries sent; tags are 1..sent
	out      int    // of those, not settled
	settled  []bool // by tag - 1: ACKed or rejected
	low      uint64 // every tag up to low is settled
	open     bool
	// consuming: a consumer is open on it (counted until the channel ends).
	consuming bool
	// Publisher confirms: the last publish's sequence number, and the body
	// bytes still due of the publish in progress.
	confirming  bool
	seq         uint64
	publishing  bool
	bodyPending uint64
}

func (r *replay) serve(conn net.Conn) {
	defer conn.Close()
	r.count(&r.conns, 1)
	defer r.count(&r.conns, -1)
	c := &replayConn{r: r, conn: conn, channels: map[uint16]*replayChannel{}}
	defer c.endAll()
	in := bufio.NewReaderSize(conn, 64<<10)
	if _, err := io.ReadFull(in, make([]byte, 8)); err != nil {
		return
	}
	c.write(method(0, 10, 10, []byte{0, 9}, longstr(nil), longstr([]byte("PLAIN")), longstr([]byte("en_US"))))
	head := make([]byte, 7)
	var payload []byte
	for {
		if _, err := io.ReadFull(in, head); err != nil {
			return
		}
		size := int(binary.BigEndian.Uint32(head[3:7])) + 1
		if cap(payload) < size {
			payload = make([]byte, size)
		}
		payload = payload[:size]
		if _, err := io.ReadFull(in, payload); err != nil {
			return
		}
		ch := binary.BigEndian.Uint16(head[1:3])
		payload = payload[:size-1]
		switch head[0] {
		case 1:
			if len(payload) < 4 {
				return
			}
			if !c.method(ch, binary.BigEndian.Uint16(payload), binary.BigEndian.Uint16(payload[2:]), payload[4:]) {
				return
			}
		case 2:
			if len(payload) >= 12 {
				c.contentHeader(ch, binary.BigEndian.Uint64(payload[4:12]))
			}
		case 3:
			c.bodyFrame(ch, uint64(len(payload)))
		}
	}
}

// method answers the client's method class.id with args on channel ch, and
// reports whether the connection goes on.
func (c *replayConn) method(ch, class, id uint16, args []byte) bool {
	switch op(class, id) {
	case op(10, 11): // start-ok
		c.write(method(0, 10, 30, u16(0), u32(replayFrameMax), u16(0)))
	case op(10, 31): // tune-ok
	case op(10, 40): // open
		c.write(method(0, 10, 41, shortstr("")))
	case op(10, 50): // close
		c.write(method(0, 10, 51))
		return false
	case op(20, 10): // channel.open
		c.mu.Lock()
		rc := &replayChannel{id: ch, open: true}
		rc.room = sync.NewCond(&rc.mu)
		c.channels[ch] = rc
		c.mu.Unlock()
		c.r.count(&c.r.chans, 1)
		c.write(method(ch, 20, 11, longstr(nil)))
	case op(20, 40): // channel.close
		c.end(ch, true)
		c.write(method(ch, 20, 41))
	case op(40, 10), op(40, 20): // exchange.declare, delete
		c.write(method(ch, 40, id+1))
	case op(50, 10): // queue.declare: its name, no messages, the consumers open on the replay
		c.write(method(ch, 50, 11, shortstr(shortstrAt(args, 2)), u32(0), u32(uint32(c.r.consumers.Load()))))
	case op(50, 20), op(50, 50): // queue.bind, unbind
		c.write(method(ch, 50, id+1))
	case op(50, 40): // queue.delete
		c.write(method(ch, 50, 41, u32(0)))
	case op(60, 10): // basic.qos
		if rc := c.channel(ch); rc != nil && len(args) >= 6 {
			rc.mu.Lock()
			rc.prefetch = int(binary.BigEndian.Uint16(args[4:6]))
			rc.mu.Unlock()
		}
		c.write(method(ch, 60, 11))
	case op(60, 20): // basic.consume: the consumers share the n deliveries
		queue := shortstrAt(args, 2)
		tag := shortstrAt(args, 3+len(queue))
		if tag == "" {
			tag = "amq.ctag-replay-" + strconv.Itoa(int(ch))
		}
		c.write(method(ch, 60, 21, shortstr(tag)))
		if rc := c.channel(ch); rc != nil {
			rc.mu.Lock()
			rc.consuming = true
			rc.mu.Unlock()
			c.r.count(&c.r.consumers, 1)
			go c.feed(rc, tag, queue)
		}
	case op(60, 30): // basic.cancel
		c.end(ch, false)
		c.write(method(ch, 60, 31, shortstr(shortstrAt(args, 0))))
	case op(60, 40): // basic.publish: its content follows
		if rc := c.channel(ch); rc != nil {
			rc.mu.Lock()
			rc.publishing = true
			rc.mu.Unlock()
		}
	case op(60, 80), op(60, 120), op(60, 90): // basic.ack, nack, reject
		if len(args) < 9 {
			return false
		}
		rc := c.channel(ch)
		if rc == nil {
			return false
		}
		tag, multiple := binary.BigEndian.Uint64(args), id != 90 && args[8]&1 != 0
		n, ok := rc.settle(tag, multiple)
		if !ok {
			c.r.misacked.Add(1)
			c.r.misack.CompareAndSwap(nil, fmt.Sprintf("basic.%s of tag %d (multiple %t) on channel %d", map[uint16]string{80: "ack", 120: "nack", 90: "reject"}[id], tag, multiple, ch))
			break
		}
		if id == 80 {
			c.r.ackFrames.Add(1)
			c.r.acked.Add(n)
		} else {
			c.r.rejected.Add(n)
		}
	case op(85, 10): // confirm.select
		if rc := c.channel(ch); rc != nil {
			rc.mu.Lock()
			rc.confirming = true
			rc.mu.Unlock()
		}
		c.write(method(ch, 85, 11))
	default:
		c.r.unserved.CompareAndSwap(nil, fmt.Sprintf("method %d.%d", class, id))
		return false
	}
	return true
}

// contentHeader and bodyFrame follow a publish's content; once all of its
// body has arrived it is confirmed, when its channel is in confirm mode.
func (c *replayConn) contentHeader(ch uint16, size uint64) {
	if rc := c.channel(ch); rc != nil {
		rc.mu.Lock()
		rc.bodyPending = size
		rc.mu.Unlock()
		c.bodyFrame(ch, 0)
	}
}

func (c *replayConn) bodyFrame(ch uint16, n uint64) {
	rc := c.channel(ch)
	if rc == nil {
		return
	}
	rc.mu.Lock()
	rc.bodyPending -= min(n, rc.bodyPending)
	done := rc.publishing && rc.bodyPending == 0
	var seq uint64
	if done {
		rc.publishing = false
		c.r.published.Add(1)
		if rc.confirming {
			rc.seq++
			seq = rc.seq
		}
	}
	rc.mu.Unlock()
	if seq > 0 {
		c.write(method(ch, 60, 80, u64(seq), []byte{0}))
	}
}

// settle marks tag settled (and every tag below it, when multiple) and
// returns how many deliveries that settled. As RabbitMQ does, it reads tag 0
// with multiple as every delivery outstanding, and refuses (ok false,
// nothing settled) tag 0 alone, a tag not sent yet and a tag already
// settled, each of which RabbitMQ answers by closing the channel (406).
func (rc *replayChannel) settle(tag uint64, multiple bool) (n int64, ok bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	to := tag
	switch {
	case tag == 0 && multiple:
		to = rc.sent
	case tag == 0 || tag > rc.sent || rc.settled[tag-1]:
		return 0, false
	}
	from := to
	if multiple {
		from = rc.low + 1
	}
	for t := from; t <= to; t++ {
		if !rc.settled[t-1] {
			rc.settled[t-1] = true
			n++
		}
	}
	for rc.low < rc.sent && rc.settled[rc.low] {
		rc.low++
	}
	rc.out -= int(n)
	rc.room.Signal()
	return n, true
}

// feed sends deliveries on rc, in batches as its window allows, until the
// replay's n are all sent (by this consumer or another).
func (c *replayConn) feed(rc *replayChannel, tag, queue string) {
	deliver := method(rc.id, 60, 60, shortstr(tag), u64(0), []byte{0}, shortstr(""), shortstr(queue))
	tagAt := 7 + 4 + 1 + len(tag)
	header := frame(2, rc.id, append(append(u16(60), u16(0)...), append(u64(uint64(len(c.r.body))), c.r.props...)...))
	idAt := len(deliver) + 7 + 12 + c.r.idAt
	one := concat([][]byte{deliver, header, frame(3, rc.id, c.r.body)})
	<-c.r.released
	var batch []byte
	for {
		rc.mu.Lock()
		for rc.open && rc.consuming && rc.prefetch > 0 && rc.out >= rc.prefetch {
			rc.room.Wait()
		}
		room := 32
		if c.r.rate > 0 {
			room = 1
		}
		if rc.prefetch > 0 {
			room = min(room, rc.prefetch-rc.out)
		}
		if !rc.open || !rc.consuming {
			rc.mu.Unlock()
			return
		}
		first := int(c.r.next.Add(int64(room))) - room
		room = min(room, c.r.n-first)
		if room <= 0 {
			rc.mu.Unlock()
			return
		}
		if c.r.rate > 0 {
			// Paced: the first's turn comes first/rate seconds after go.
			rc.mu.Unlock()
			time.Sleep(time.Until(c.r.began.Add(time.Duration(float64(first) / c.r.rate * float64(time.Second)))))
			rc.mu.Lock()
			if !rc.open || !rc.consuming {
				rc.mu.Unlock()
				return
			}
		}
		tag := rc.sent + 1
		rc.sent += uint64(room)
		rc.out += room
		rc.settled = append(rc.settled, make([]bool, room)...)
		rc.mu.Unlock()
		batch = batch[:0]
		for i := range room {
			at := len(batch)
			batch = append(batch, one...)
			binary.BigEndian.PutUint64(batch[at+tagAt:], tag+uint64(i))
			seq := strconv.AppendInt(nil, int64(first+i+1), 10)
			digits := batch[at+idAt : at+idAt+replaySeqWidth]
			for k := range digits {
				digits[k] = '0'
			}
			copy(digits[replaySeqWidth-len(seq):], seq)
		}
		if !c.write(batch) {
			return
		}
	}
}

func (c *replayConn) channel(ch uint16) *replayChannel {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.channels[ch]
}

// end stops feeding channel ch; closing says whether the channel itself
// closes, or only its consumer ends.
func (c *replayConn) end(ch uint16, closing bool) {
	rc := c.channel(ch)
	if rc == nil {
		return
	}
	rc.mu.Lock()
	wasConsuming, wasOpen := rc.consuming, rc.open
	rc.consuming = false
	if closing {
		rc.open = false
		rc.room.Broadcast()
	}
	rc.mu.Unlock()
	if wasConsuming {
		c.r.count(&c.r.consumers, -1)
	}
	if closing && wasOpen {
		c.r.count(&c.r.chans, -1)
	}
}

func (c *replayConn) endAll() {
	c.mu.Lock()
	ids := make([]uint16, 0, len(c.channels))
	for id := range c.channels {
		ids = append(ids, id)
	}
	c.mu.Unlock()
	for _, id := range ids {
		c.end(id, true)
	}
}

// write sends b whole, and reports whether it went.
func (c *replayConn) write(b []byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err := c.conn.Write(b)
	return err == nil
}

// TestReplaySettle sends the replay's channel settlements as a consumer
// might get them wrong: each that RabbitMQ would answer by closing the
// channel must be counted, and settle nothing, so that a run with a double
// or an early ACK fails however many ACKs it sent.
func TestReplaySettle(t *testing.T) {
	r := &replay{}
	rc := &replayChannel{id: 1, open: true, sent: 4, out: 4, settled: make([]bool, 4)}
	rc.room = sync.NewCond(&rc.mu)
	c := &replayConn{r: r, channels: map[uint16]*replayChannel{1: rc}}
	settle := func(id uint16, tag uint64, flags byte) {
		t.Helper()
		if !c.method(1, 60, id, append(u64(tag), flags)) {
			t.Fatalf("basic %d of tag %d ended the connection", id, tag)
		}
	}
	for _, step := range []struct {
		what              string
		id                uint16 // 80 ack, 120 nack, 90 reject
		tag               uint64
		flags             byte // multiple, for ack and nack
		acked, rejected   int64
		misacked, settled int64
	}{
		{"ack 2", 80, 2, 0, 1, 0, 0, 1},
		{"ack 2 again", 80, 2, 0, 1, 0, 1, 1},
		{"ack 0", 80, 0, 0, 1, 0, 2, 1},
		{"ack 5, not sent", 80, 5, 0, 1, 0, 3, 1},
		{"ack 5, not sent, multiple", 80, 5, 1, 1, 0, 4, 1},
		{"ack 3, multiple: 1 and 3", 80, 3, 1, 3, 0, 4, 3},
		{"ack 3 again, multiple", 80, 3, 1, 3, 0, 5, 3},
		{"reject 1, already acked", 90, 1, 0, 3, 0, 6, 3},
		{"nack 0, multiple: every one outstanding", 120, 0, 1, 3, 1, 6, 4},
		{"ack 0, multiple, none outstanding", 80, 0, 1, 3, 1, 6, 4},
	} {
		settle(step.id, step.tag, step.flags)
		got := [3]int64{r.acked.Load(), r.rejected.Load(), r.misacked.Load()}
		if want := [3]int64{step.acked, step.rejected, step.misacked}; got != want {
			t.Fatalf("after %s: acked, rejected, misacked %v, want %v", step.what, got, want)
		}
		if out := 4 - step.settled; rc.out != int(out) {
			t.Fatalf("after %s: %d outstanding, want %d", step.what, rc.out, out)
		}
	}
	if got, _ := r.misack.Load().(string); got != "basic.ack of tag 2 (multiple false) on channel 1" {
		t.Errorf("first misack %q", got)
	}
	counts := replayCounts{Acked: r.acked.Load(), Misacked: r.misacked.Load()}
	if counts.want(3, 0) == nil {
		t.Error("counts with misacks passed as 3 ACKs")
	}
}
