package quarantine

import (
	"bytes"
	"io"
	"testing"
)

// However the socket splits the stream in two, and whether the client reads
// a byte or 4 KiB at a time, a filter hands on the same bytes: a refused
// content header replaced by its marker spliced among the other
// properties, and every other frame byte for byte: a body whose bytes are a
// whole refused header frame, heartbeats, a header of exactly the frame
// size, a good message. With and without BrokenXDeath alike. The frame size
// is the least there is, so that the stream can be split at every byte.
func TestSpliceAtEverySplit(t *testing.T) {
	const why = "a header value of type 'L' (0x4c), which the client does not decode"
	refused := contentHeader(1, 7, props(table(entry("n", append([]byte{'L'}, u64(7)...)))))
	exact := contentHeader(1, 2, props(padded(minFrameMax-frameOverhead, entry("a", str("b")))))
	if len(exact) != minFrameMax || check(payloadOf(exact)).why != "" {
		t.Fatalf("a header of %d bytes, refused for %q", len(exact), check(payloadOf(exact)).why)
	}
	heartbeat := wireFrame(frameHeartbeat, 0, nil)
	in := [][]byte{
		method(0, 10, 30, u16(0), u32(minFrameMax), u16(60)),
		deliver(1, consumerTag, 1), refused, body(1, []byte("payload")),
		heartbeat,
		deliver(1, consumerTag, 2), contentHeader(1, len(refused), props(table())), body(1, refused),
		heartbeat, heartbeat,
		deliver(1, consumerTag, 3), exact, body(1, []byte("{}")),
		heartbeat,
	}
	in = append(in, message(4, props(table(entry("x-lily-version", []byte{'b', 1}))), []byte(`{"ok":true}`))...)
	want := append([][]byte(nil), in...)
	want[2] = contentHeader(1, 7, props(append([]byte{'F'}, markerTable(why, testSeal, false)...)))
	stream, expected := concat(in), concat(want)

	rooms := []int{1, 4096}
	for _, xdeath := range []bool{false, true} {
		read := func(src io.Reader, room int) []byte {
			f := filter{src: src, clientMax: minFrameMax, buf: make([]byte, 64), seal: testSeal, xdeath: xdeath}
			return drain(t, &f, room)
		}
		if got := read(&chunked{b: stream}, 1<<20); !bytes.Equal(got, expected) {
			frames, err := splitFrames(got)
			t.Fatalf("x-death %v: handed on %d frames (%v):\n%x\nwant:\n%x", xdeath, len(frames), err, got, expected)
		}
		for _, room := range rooms {
			if testing.Short() && xdeath && room == 1 {
				continue // the slowest quarter; the x-death reading changes nothing here
			}
			for at := range len(stream) + 1 {
				got := read(io.MultiReader(bytes.NewReader(stream[:at]), bytes.NewReader(stream[at:])), room)
				if !bytes.Equal(got, expected) {
					t.Fatalf("x-death %v, reads of %d, split at %d: other bytes handed on:\n%x\nwant:\n%x", xdeath, room, at, got, expected)
				}
			}
		}
	}
}
