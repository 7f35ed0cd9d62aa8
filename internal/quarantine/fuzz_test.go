package quarantine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"strings"
	"testing"
)

// seeds are the content headers the fuzz targets start from: the
// catalogue's, and (in testdata) ones RabbitMQ delivered.
func seeds(f *testing.F) {
	for _, tc := range headerCases() {
		f.Add(props(tc.headers), uint16(0))
		f.Add(props(tc.headers), uint16(3))
	}
	for _, tc := range xdeathCases() {
		f.Add(props(table(tc.table)), uint16(0))
	}
}

// FuzzFilter: whatever the content header, and however the socket splits the
// stream, the filter hands on the same bytes; every content header in them is
// one the client decodes; every other frame passes untouched; and a header is
// replaced exactly when check refuses it.
func FuzzFilter(f *testing.F) {
	seeds(f)
	f.Fuzz(func(t *testing.T, properties []byte, chunk uint16) {
		good := message(2, props(table(entry("x-lily-version", []byte{'b', 1}))), []byte(`{"ok":true}`))
		before := append(method(0, 10, 30, u16(0), u32(testFrameMax), u16(60)), deliver(1, consumerTag, 1)...)
		stream := concat([][]byte{
			before,
			contentHeader(1, 7, properties),
			body(1, []byte("payload")),
			wireFrame(frameHeartbeat, 0, nil),
			concat(good),
		})
		whole := filtered(t, stream, 0, 1<<20)
		split := filtered(t, stream, int(chunk%512), int(chunk%97)+1)
		if !bytes.Equal(whole, split) {
			t.Fatalf("split reads (chunks of %d) hand on other bytes", chunk)
		}
		refused := check(payloadOf(contentHeader(1, 7, properties))).why != "" || len(properties)+prefix > testFrameMax-frameOverhead
		frames, err := splitFrames(whole)
		if err != nil {
			t.Fatal(err)
		}
		sealed := 0
		for _, fr := range frames {
			if fr[0] == frameHeader {
				if why := check(payloadOf(fr)).why; why != "" || len(fr) > testFrameMax {
					t.Fatalf("handed on a header the client refuses (%d bytes): %s", len(fr), why)
				}
				if bytes.Contains(fr, []byte(testSeal)) {
					sealed++
				}
			}
		}
		if replaced := sealed == 1; replaced != refused || sealed > 1 {
			t.Fatalf("%d headers sealed, check refused %v", sealed, refused)
		}
		if !bytes.HasPrefix(whole, before) || !bytes.HasSuffix(whole, concat(good)) {
			t.Fatal("frames around the header were changed")
		}
	})
}

// FuzzClient hands amqp091-go itself each content header through a Conn
// that reads x-death too, as the runtime's does: it takes the delivery and
// the one behind it, and keeps its connection.
func FuzzClient(f *testing.F) {
	seeds(f)
	// A header over the frame size, read whole for its x-death.
	f.Add(props(padded(testFrameMax+100, entry("x-death", array(str("x"))))), uint16(1000))
	f.Fuzz(func(t *testing.T, properties []byte, chunk uint16) {
		c := connect(t, true, (*Conn).BrokenXDeath)
		sent := make(chan error, 1)
		go func() {
			sent <- c.broker.send(int(chunk%4096), append(message(1, properties, []byte("x")), message(2, props(table()), []byte("ok"))...)...)
		}()
		d, err := c.next(t)
		if err != nil {
			t.Fatalf("the client closed: %v", err)
		}
		why, held := quarantinedWhy(c.filter, d.Headers)
		if held && (d.Headers[Header] != why || len(d.Headers) != 1) {
			t.Fatalf("quarantined (%s) with headers %v", why, d.Headers)
		}
		if next, err := c.next(t); err != nil || string(next.Body) != "ok" {
			t.Fatalf("the delivery behind it: %q, %v", next.Body, err)
		}
		if err := <-sent; err != nil {
			t.Fatal(err)
		}
	})
}

// testSeal is the seal of the filters the tests build themselves.
const testSeal = "test-seal-0123456789"

// filtered reads stream through a filter whose source yields at most chunk
// bytes a read (0: all), in reads of room bytes, and returns what it handed
// on.
func filtered(t *testing.T, stream []byte, chunk, room int) []byte {
	t.Helper()
	f := filter{src: &chunked{b: stream, n: chunk}, clientMax: testFrameMax, buf: make([]byte, 64), seal: testSeal}
	return drain(t, &f, room)
}

// drain reads f to its end in reads of room bytes and returns what it
// handed on.
func drain(t *testing.T, f *filter, room int) []byte {
	t.Helper()
	var out []byte
	p := make([]byte, room)
	for {
		n, err := f.Read(p)
		out = append(out, p[:n]...)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// chunked is a reader that yields at most n bytes a read.
type chunked struct {
	b []byte
	n int
}

func (c *chunked) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	if c.n > 0 && len(p) > c.n {
		p = p[:c.n]
	}
	n := copy(p, c.b)
	c.b = c.b[n:]
	return n, nil
}

// splitFrames cuts a stream into its frames.
func splitFrames(b []byte) ([][]byte, error) {
	var frames [][]byte
	for len(b) > 0 {
		if len(b) < 7 {
			return nil, errors.New("a frame header cut short")
		}
		n := frameOverhead + int(binary.BigEndian.Uint32(b[3:7]))
		if len(b) < n || b[n-1] != frameEnd {
			return nil, errors.New("a frame cut short or without its end")
		}
		frames = append(frames, b[:n])
		b = b[n:]
	}
	return frames, nil
}

// A frame that declares the largest size a frame can have passes through as
// it is, wherever int is 32 bits too: the filter reads no such frame whole,
// nor takes its size for a small one.
func TestLargestFrameSizePasses(t *testing.T) {
	huge := append([]byte{frameBody, 0, 1}, u32(math.MaxUint32)...)
	inner := contentHeader(1, 7, props(table(entry("n", append([]byte{'L'}, u64(7)...)))))
	stream := concat([][]byte{method(0, 10, 30, u16(0), u32(testFrameMax), u16(60)), huge, inner})
	if got := filtered(t, stream, 0, 1<<20); !bytes.Equal(got, stream) {
		t.Errorf("the stream changed:\n got %x\nwant %x", got, stream)
	}
}

// FuzzBrokenXDeath: whatever a header table's content, brokenXDeath reads it
// without fault, and a reason it gives names x-death and is short.
func FuzzBrokenXDeath(f *testing.F) {
	for _, tc := range xdeathCases() {
		f.Add(tc.table)
	}
	f.Fuzz(func(t *testing.T, content []byte) {
		if why := brokenXDeath(content); why != "" && (!strings.HasPrefix(why, "header x-death: ") || len(why) > 120) {
			t.Fatalf("reason %q", why)
		}
	})
}
