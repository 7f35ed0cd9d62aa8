package quarantine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"reflect"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
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
// stream, the filter hands on the same bytes, with BrokenXDeath (as the
// runtime's consumers ask) and without it (as cmd/lilydlq reads). Every frame
// but the header passes byte for byte; the header passes byte for byte
// exactly when it is not refused (by check, by its size, and when asked by
// its x-death); a refused one is replaced by a header the client decodes, of
// the same channel, class and body size, its table swapped for the marker,
// with the reason, the seal and, where asked and broken, the x-death mark;
// its other properties kept as they were, or dropped with the table's flag
// alone left.
func FuzzFilter(f *testing.F) {
	seeds(f)
	// A header over the frame size: read whole for its x-death when asked.
	f.Add(props(padded(testFrameMax+100, entry("x-death", array(str("x"))))), uint16(1000))
	f.Fuzz(func(t *testing.T, properties []byte, chunk uint16) {
		header := contentHeader(1, 7, properties)
		in := [][]byte{
			method(0, 10, 30, u16(0), u32(testFrameMax), u16(60)),
			deliver(1, consumerTag, 1),
			header,
			body(1, []byte("payload")),
			wireFrame(frameHeartbeat, 0, nil),
		}
		in = append(in, message(2, props(table(entry("x-lily-version", []byte{'b', 1}))), []byte(`{"ok":true}`))...)
		const at = 2 // the fuzzed header's place in the stream
		stream := concat(in)
		for _, xdeath := range []bool{false, true} {
			whole := filteredBy(t, stream, 0, 1<<20, xdeath)
			split := filteredBy(t, stream, int(chunk%512), int(chunk%97)+1, xdeath)
			if !bytes.Equal(whole, split) {
				t.Fatalf("x-death %v: split reads (chunks of %d) hand on other bytes", xdeath, chunk)
			}
			frames, err := splitFrames(whole)
			if err != nil {
				t.Fatalf("x-death %v: %v", xdeath, err)
			}
			if len(frames) != len(in) {
				t.Fatalf("x-death %v: %d frames handed on, %d sent", xdeath, len(frames), len(in))
			}
			for i, fr := range frames {
				if i != at && !bytes.Equal(fr, in[i]) {
					t.Fatalf("x-death %v: frame %d changed:\n got %x\nwant %x", xdeath, i, fr, in[i])
				}
			}
			why, mark, refused := expectedVerdict(payloadOf(header), xdeath)
			out := frames[at]
			if !refused {
				if !bytes.Equal(out, header) {
					t.Fatalf("x-death %v: a header that passed changed:\n got %x\nwant %x", xdeath, out, header)
				}
				continue
			}
			if err := isReplacement(out, header, why, mark); err != nil {
				t.Fatalf("x-death %v: refused (%q, mark %v), handed on %x: %v", xdeath, why, mark, out, err)
			}
		}
	})
}

// expectedVerdict is what a filter reading x-death or not must do with a
// content header's payload, on a stream tuned to testFrameMax: whether it
// refuses it, the reason its replacement carries, and whether that is marked
// for its x-death.
func expectedVerdict(payload []byte, xdeath bool) (why string, mark, refused bool) {
	v := check(payload)
	if xdeath {
		v = withXDeath(v, payload)
	}
	if len(payload)+frameOverhead <= testFrameMax {
		return v.why, v.xdeath, v.why != ""
	}
	over := "a content header of " + itoa(len(payload)) + " bytes, over the negotiated frame size of " + itoa(testFrameMax)
	if !xdeath || len(payload)+frameOverhead > oversizedFrames*testFrameMax {
		return over, false, true // replaced unread
	}
	if v.why != "" {
		over += "; " + v.why
	}
	return over, v.xdeath, true
}

// isReplacement says what is wrong, if anything, with out as the
// replacement of the content header frame original: a header frame of the
// same channel, class, weight and body size that the client decodes, within
// the frame size, whose header table is the marker of why, the test seal and
// (when mark) the x-death mark; the other properties either kept byte for
// byte around it, or dropped.
func isReplacement(out, original []byte, why string, mark bool) error {
	switch {
	case len(out) > testFrameMax:
		return errors.New("over the frame size")
	case out[0] != frameHeader || !bytes.Equal(out[1:3], original[1:3]):
		return errors.New("not a header frame of the same channel")
	case !bytes.Equal(payloadOf(out)[:prefix], payloadOf(original)[:prefix]):
		return errors.New("another class, weight or body size")
	}
	if why := check(payloadOf(out)).why; why != "" {
		return errors.New("the client refuses it: " + why)
	}
	payload, marker := payloadOf(original), markerTable(why, testSeal, mark)
	dropped := append(append(append([]byte(nil), payload[:prefix]...), u16(flagHeaders)...), marker...)
	if bytes.Equal(payloadOf(out), dropped) {
		return nil
	}
	if t, ok := headerTable(payload); ok {
		spliced := concat([][]byte{payload[:t.start], marker, payload[t.end:]})
		if bytes.Equal(payloadOf(out), spliced) {
			return nil
		}
	}
	return errors.New("neither the marker spliced in nor the marker alone")
}

// FuzzClient hands amqp091-go itself each content header through a Conn
// that reads x-death too, as the runtime's does: it takes the delivery and
// the one behind it, and keeps its connection. A delivery quarantined
// arrives with its body intact; one that passed arrives as the bare client,
// reading the same bytes without a Conn, decodes it.
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
		if held && (string(d.Body) != "x" || d.DeliveryTag != 1) {
			t.Fatalf("quarantined (%s): delivery %d with body %q", why, d.DeliveryTag, d.Body)
		}
		if next, err := c.next(t); err != nil || string(next.Body) != "ok" {
			t.Fatalf("the delivery behind it: %q, %v", next.Body, err)
		}
		if err := <-sent; err != nil {
			t.Fatal(err)
		}
		if held {
			return
		}
		bare := connect(t, false)
		go func() { sent <- bare.broker.send(int(chunk%4096), message(1, properties, []byte("x"))...) }()
		want, err := bare.next(t)
		if err != nil {
			t.Fatalf("passed a header the bare client refuses: %v", err)
		}
		if err := <-sent; err != nil {
			t.Fatal(err)
		}
		if !sameValue(want.Headers, d.Headers) {
			t.Fatalf("headers through the Conn %v; the bare client decodes %v", d.Headers, want.Headers)
		}
		d.Acknowledger, want.Acknowledger = nil, nil
		d.Headers, want.Headers = nil, nil
		if !reflect.DeepEqual(want, d) {
			t.Fatalf("the delivery through the Conn %+v; the bare client's %+v", d, want)
		}
	})
}

// sameValue reports whether two values amqp091-go decoded are the same: a
// float by its bits (a NaN is itself), a table or array value by value.
// Unlike go-cmp's diff, its work is linear in the values, however deep.
func sameValue(a, b any) bool {
	switch a := a.(type) {
	case amqp.Table:
		b, ok := b.(amqp.Table)
		if !ok || len(a) != len(b) {
			return false
		}
		for k, v := range a {
			w, ok := b[k]
			if !ok || !sameValue(v, w) {
				return false
			}
		}
		return true
	case []any:
		b, ok := b.([]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			if !sameValue(a[i], b[i]) {
				return false
			}
		}
		return true
	case float32:
		b, ok := b.(float32)
		return ok && math.Float32bits(a) == math.Float32bits(b)
	case float64:
		b, ok := b.(float64)
		return ok && math.Float64bits(a) == math.Float64bits(b)
	}
	return reflect.DeepEqual(a, b)
}

// testSeal is the seal of the filters the tests build themselves.
const testSeal = "test-seal-0123456789"

// filtered reads stream through a filter whose source yields at most chunk
// bytes a read (0: all), in reads of room bytes, and returns what it handed
// on.
func filtered(t *testing.T, stream []byte, chunk, room int) []byte {
	t.Helper()
	return filteredBy(t, stream, chunk, room, false)
}

// filteredBy is filtered through a filter that reads x-death or not.
func filteredBy(t *testing.T, stream []byte, chunk, room int, xdeath bool) []byte {
	t.Helper()
	f := filter{src: &chunked{b: stream, n: chunk}, clientMax: testFrameMax, buf: make([]byte, 64), seal: testSeal, xdeath: xdeath}
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
