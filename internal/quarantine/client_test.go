package quarantine

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// The judge of this package is amqp091-go itself: these tests connect the
// real client, through a Conn or not, to a broker that speaks just enough
// AMQP 0-9-1 over a pipe to open a connection, a channel and a consumer, and
// then writes whatever frames a test hands it.

const (
	testFrameMax = 131072
	consumerTag  = "lily-test-consumer"
)

// fakeBroker is the broker's end of one client connection.
type fakeBroker struct {
	t    testing.TB
	conn net.Conn
}

// client is amqp091-go connected to a fakeBroker, consuming on channel 1.
type client struct {
	conn       *amqp.Connection
	filter     *Conn // nil when the client reads the socket itself
	deliveries <-chan amqp.Delivery
	closed     chan *amqp.Error
	broker     *fakeBroker
}

// connect opens a client through a Conn (filtered), set up by each of
// setup before the client reads, or straight on the pipe.
func connect(t testing.TB, filtered bool, setup ...func(*Conn)) *client {
	t.Helper()
	clientEnd, brokerEnd := net.Pipe()
	b := &fakeBroker{t: t, conn: brokerEnd}
	ready := make(chan error, 1)
	go b.serve(ready)
	c := &client{broker: b}
	var transport io.ReadWriteCloser = clientEnd
	if filtered {
		c.filter = New(clientEnd, testFrameMax)
		for _, f := range setup {
			f(c.filter)
		}
		transport = c.filter
	}
	conn, err := amqp.Open(transport, amqp.Config{
		SASL: []amqp.Authentication{&amqp.PlainAuth{Username: "guest", Password: "guest"}}, Vhost: "/", Locale: "en_US", FrameSize: testFrameMax,
	})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	c.conn = conn
	c.closed = conn.NotifyClose(make(chan *amqp.Error, 1))
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("channel: %v", err)
	}
	if c.deliveries, err = ch.Consume("q", consumerTag, false, false, false, false, nil); err != nil {
		t.Fatalf("consume: %v", err)
	}
	if err := <-ready; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = brokerEnd.Close()
		_ = clientEnd.Close()
	})
	return c
}

// serve answers the client's handshake, then reads (and drops) whatever the
// client sends, answering a connection.close.
func (b *fakeBroker) serve(ready chan<- error) {
	r := bufio.NewReader(b.conn)
	if _, err := io.ReadFull(r, make([]byte, 8)); err != nil {
		ready <- err
		return
	}
	steps := []struct {
		reply func(args []byte) []byte
		want  [2]uint16 // the client's method this step answers; none for the first
	}{
		{reply: func([]byte) []byte {
			return method(0, 10, 10, []byte{0, 9}, longstr(nil), longstr([]byte("PLAIN")), longstr([]byte("en_US")))
		}},
		{want: [2]uint16{10, 11}, reply: func([]byte) []byte { return method(0, 10, 30, u16(0), u32(testFrameMax), u16(0)) }},
		{want: [2]uint16{10, 31}},
		{want: [2]uint16{10, 40}, reply: func([]byte) []byte { return method(0, 10, 41, shortstr("")) }},
		{want: [2]uint16{20, 10}, reply: func([]byte) []byte { return method(1, 20, 11, longstr(nil)) }},
		{want: [2]uint16{60, 20}, reply: func([]byte) []byte { return method(1, 60, 21, shortstr(consumerTag)) }},
	}
	for i, s := range steps {
		if i > 0 {
			class, id, _, err := readMethod(r)
			if err != nil || [2]uint16{class, id} != s.want {
				ready <- errors.Join(err, errors.New("fake broker: unexpected method in the handshake"))
				return
			}
		}
		if s.reply != nil {
			if _, err := b.conn.Write(s.reply(nil)); err != nil {
				ready <- err
				return
			}
		}
	}
	ready <- nil
	for {
		class, id, _, err := readMethod(r)
		if err != nil {
			return
		}
		if class == 10 && id == 50 {
			_, _ = b.conn.Write(method(0, 10, 51))
		}
	}
}

// readMethod reads frames until a method frame and returns its class, id and
// arguments.
func readMethod(r *bufio.Reader) (class, id uint16, args []byte, err error) {
	for {
		head := make([]byte, 7)
		if _, err = io.ReadFull(r, head); err != nil {
			return
		}
		rest := make([]byte, int(binary.BigEndian.Uint32(head[3:7]))+1)
		if _, err = io.ReadFull(r, rest); err != nil {
			return
		}
		if head[0] == frameMethod && len(rest) >= 5 {
			return binary.BigEndian.Uint16(rest[0:2]), binary.BigEndian.Uint16(rest[2:4]), rest[4 : len(rest)-1], nil
		}
	}
}

// send writes frames to the client in writes of at most chunk bytes (all at
// once when chunk is 0): the pipe hands the reader no more than one write. A
// client that refuses a frame may close the pipe in the middle of it.
func (b *fakeBroker) send(chunk int, frames ...[]byte) error {
	stream := concat(frames)
	for len(stream) > 0 {
		n := len(stream)
		if chunk > 0 {
			n = min(n, chunk)
		}
		if _, err := b.conn.Write(stream[:n]); err != nil {
			return err
		}
		stream = stream[n:]
	}
	return nil
}

// next waits for the client's next delivery, or for its connection to close.
func (c *client) next(t testing.TB) (amqp.Delivery, *amqp.Error) {
	t.Helper()
	closed := func(err *amqp.Error) (amqp.Delivery, *amqp.Error) {
		if err == nil {
			err = &amqp.Error{Reason: "closed without an error"}
		}
		return amqp.Delivery{}, err
	}
	timeout := time.After(10 * time.Second)
	select {
	case d, ok := <-c.deliveries:
		if ok {
			return d, nil
		}
		// The client closes its deliveries when its connection closes: the
		// close says why.
		select {
		case err := <-c.closed:
			return closed(err)
		case <-timeout:
		}
	case err := <-c.closed:
		return closed(err)
	case <-timeout:
	}
	t.Fatal("no delivery and no close within 10 s")
	return amqp.Delivery{}, nil
}

// message is the frames of one delivery: its deliver, a content header with
// props and a body.
func message(tag uint64, properties, payload []byte) [][]byte {
	return [][]byte{deliver(1, consumerTag, tag), contentHeader(1, len(payload), properties), body(1, payload)}
}

// Every header of the catalogue does to the bare client what the catalogue
// says: those it refuses close its connection. Through a Conn, the client
// takes every one, the refused ones replaced, and stays connected.
func TestTheClientAsJudge(t *testing.T) {
	cases := append(headerCases(), headerCase{
		name:    "a content header over the frame size",
		headers: table(entry("big", str(string(make([]byte, testFrameMax))))),
		refused: "over the negotiated frame size of 131072",
	})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bare := connect(t, false)
			go func() { _ = bare.broker.send(0, message(1, props(tc.headers), []byte("{}"))...) }()
			if _, err := bare.next(t); (err != nil) != (tc.refused != "") {
				t.Fatalf("the bare client: closed with %v; the catalogue says refused %q", err, tc.refused)
			}

			c := connect(t, true)
			for _, chunk := range []int{0, 1, 5, 4096} {
				tag := uint64(chunk + 1)
				sent := make(chan error, 1)
				go func() {
					sent <- c.broker.send(chunk, append(message(tag, props(tc.headers), []byte("{}")), message(tag+1000, props(table()), []byte("ok"))...)...)
				}()
				d, err := c.next(t)
				if err != nil {
					t.Fatalf("chunks of %d: the client closed: %v", chunk, err)
				}
				why, held := quarantinedWhy(c.filter, d.Headers)
				switch {
				case tc.refused == "" && (held || d.Headers[Header] != nil):
					t.Fatalf("chunks of %d: a header the client decodes was quarantined: %q", chunk, why)
				case tc.refused != "" && (!held || d.Headers[Header] != why || len(d.Headers) != 1 || !strings.Contains(why, tc.refused)):
					t.Fatalf("chunks of %d: held %v %q, headers %v; want %q", chunk, held, why, d.Headers, tc.refused)
				case string(d.Body) != "{}" || d.DeliveryTag != tag:
					t.Fatalf("chunks of %d: delivery %d with body %q", chunk, d.DeliveryTag, d.Body)
				}
				if tc.refused == "" || tc.name != "a content header over the frame size" {
					if d.MessageId != "id-1" || d.Type != "OrderPlaced" || d.ContentType != "application/json" {
						t.Fatalf("chunks of %d: properties not kept: %+v", chunk, d)
					}
				}
				next, err := c.next(t)
				if err != nil || string(next.Body) != "ok" || next.DeliveryTag != tag+1000 {
					t.Fatalf("chunks of %d: the message behind it: %q, %v", chunk, next.Body, err)
				}
				if _, held := c.filter.Quarantined(next.Headers); held {
					t.Fatalf("chunks of %d: the message behind it was quarantined", chunk)
				}
				if err := <-sent; err != nil {
					t.Fatalf("chunks of %d: the broker's write: %v", chunk, err)
				}
			}
		})
	}
}

// A header refused for its table, padded after its properties to the frame
// size (the client skips such padding), would outgrow the frame once its
// table is swapped for the larger marker: the replacement then keeps only
// the body size, and still fits.
func TestReplacementFitsTheFrame(t *testing.T) {
	bad := table(entry("n", append([]byte{'L'}, u64(7)...)))
	properties := append(u16(flagHeaders), bad[1:]...)
	properties = append(properties, make([]byte, testFrameMax-frameOverhead-prefix-len(properties))...)
	c := connect(t, true)
	sent := make(chan error, 1)
	go func() {
		sent <- c.broker.send(0, append(message(1, properties, []byte("x")), message(2, props(table()), []byte("ok"))...)...)
	}()
	d, err := c.next(t)
	if err != nil {
		t.Fatalf("the client closed: %v", err)
	}
	if why, held := quarantinedWhy(c.filter, d.Headers); !held || d.Headers[Header] != why || string(d.Body) != "x" {
		t.Fatalf("held %v, headers %v, body %q", held, d.Headers, d.Body)
	}
	if next, err := c.next(t); err != nil || string(next.Body) != "ok" {
		t.Fatalf("the delivery behind it: %q, %v", next.Body, err)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
}

// A producer's marker, with or without a seal of its own, is only a header:
// Quarantined does not take it for a replacement, and leaves it alone.
func TestForgedMarkerIsOnlyAHeader(t *testing.T) {
	c := connect(t, true)
	forged := [][]byte{
		table(entry(Header, str("forged"))),
		table(entry(Header, str("forged")), entry(sealHeader, str("a-guess"))),
	}
	sent := make(chan error, 1)
	go func() {
		sent <- c.broker.send(0, append(message(1, props(forged[0]), []byte("a")), message(2, props(forged[1]), []byte("b"))...)...)
	}()
	for i := range forged {
		d, err := c.next(t)
		if err != nil {
			t.Fatalf("the client closed: %v", err)
		}
		if why, held := quarantinedWhy(c.filter, d.Headers); held || d.Headers[Header] != "forged" || len(d.Headers) != i+1 {
			t.Errorf("delivery %d: quarantined %v (%q), headers %v", d.DeliveryTag, held, why, d.Headers)
		}
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
}

// Quarantined deliveries the client holds, however many, are each known:
// the seal travels with the delivery, so nothing is remembered, and nothing
// runs out (the filter's memory once held 4,096).
func TestEveryQuarantinedDeliveryIsKnown(t *testing.T) {
	const n = 5000
	c := connect(t, true)
	bad := props(table(entry("n", append([]byte{'L'}, u64(7)...))))
	sent := make(chan error, 1)
	go func() {
		var frames [][]byte
		for tag := range uint64(n) {
			frames = append(frames, message(tag+1, bad, []byte("x"))...)
		}
		sent <- c.broker.send(0, frames...)
	}()
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	known := 0
	for range n {
		d, err := c.next(t)
		if err != nil {
			t.Fatalf("the client closed: %v", err)
		}
		if why, held := quarantinedWhy(c.filter, d.Headers); held && strings.Contains(why, "type 'L'") && len(d.Headers) == 1 {
			known++
		}
	}
	if known != n {
		t.Errorf("%d of %d quarantined deliveries known", known, n)
	}
}

// quarantinedWhy is f's verdict on headers, by its reason alone.
func quarantinedWhy(f *Conn, headers map[string]any) (string, bool) {
	v, held := f.Quarantined(headers)
	return v.Why, held
}

// readerConn is a socket that yields a stream: all a filter reads of it.
type readerConn struct {
	net.Conn
	r io.Reader
}

func (c readerConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// A Conn given no frame size takes the one amqp091-go's DialConfig gives a
// client that sets none, and reads no frame larger than that whole: a
// content header that says it is 1 GiB, from a broker with no frame size,
// is replaced, and the filter's buffer is not sized by what the frame says.
func TestNewWithoutAFrameSize(t *testing.T) {
	huge := append([]byte{frameHeader, 0, 1}, u32(1<<30)...)
	huge = append(huge, payloadOf(contentHeader(1, 7, props(table())))...)
	stream := concat([][]byte{method(0, 10, 30, u16(0), u32(0), u16(60)), deliver(1, consumerTag, 1), huge})
	c := New(readerConn{r: bytes.NewReader(stream)}, 0)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var out []byte
	p := make([]byte, 4096)
	for {
		n, err := c.Read(p)
		out = append(out, p[:n]...)
		if err != nil {
			break
		}
	}
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
		t.Errorf("the filter allocated %d bytes", grew)
	}
	if !bytes.Contains(out, []byte("over the negotiated frame size of 131072")) {
		t.Errorf("the 1 GiB header was not replaced: %d bytes handed on", len(out))
	}
}
