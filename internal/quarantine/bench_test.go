package quarantine

import (
	"bufio"
	"encoding/binary"
	"io"
	"testing"
)

// BenchmarkDelivery measures what the filter adds to each delivery as the
// client reads it: a basic.deliver, a content header as Lily's producers
// write it and a 200-byte body, read frame by frame through a 4 KiB buffer as
// amqp091-go reads its socket, straight or through the filter (reading
// x-death too, as the runtime's does).
func BenchmarkDelivery(b *testing.B) {
	headers := table(entry("x-lily-version", []byte{'b', 1}), entry("traceparent", str("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")))
	properties := concat([][]byte{
		u16(0x8000 | flagHeaders | flagDeliveryMode | 0x0080 | flagTimestamp | 0x0020),
		shortstr("application/json"), headers[1:], {2}, shortstr("3f2a8c1e-6b0d-4e57-9a31-7c4d2b9e0f18"), u64(1_764_000_000), shortstr("OrderPlaced"),
	})
	const perRound = 1000
	var stream []byte
	for i := range perRound {
		stream = append(stream, concat(message(uint64(i+1), properties, make([]byte, 200)))...)
	}
	tune := method(0, 10, 30, u16(0), u32(testFrameMax), u16(60))
	for _, tc := range []struct {
		name   string
		reader func(src io.Reader) io.Reader
	}{
		{"socket", func(src io.Reader) io.Reader { return src }},
		{"filtered", func(src io.Reader) io.Reader {
			return &filter{src: src, clientMax: testFrameMax, buf: make([]byte, initialBuffer), seal: testSeal}
		}},
		{"filtered, reading x-death", func(src io.Reader) io.Reader {
			return &filter{src: src, clientMax: testFrameMax, buf: make([]byte, initialBuffer), seal: testSeal, xdeath: true}
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			src := &rewind{tune: tune, b: stream}
			r := bufio.NewReader(tc.reader(src))
			head := make([]byte, 7)
			payload := make([]byte, testFrameMax)
			readFrame := func() {
				if _, err := io.ReadFull(r, head); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(r, payload[:binary.BigEndian.Uint32(head[3:7])+1]); err != nil {
					b.Fatal(err)
				}
			}
			readFrame() // the tune
			b.SetBytes(int64(len(stream) / perRound))
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				for range 3 {
					readFrame()
				}
			}
		})
	}
}

// rewind yields tune once, then stream over and over, at most 64 KiB a read
// as a socket would.
type rewind struct {
	tune, b []byte
	at      int
}

func (r *rewind) Read(p []byte) (int, error) {
	if len(r.tune) > 0 {
		n := copy(p, r.tune)
		r.tune = r.tune[n:]
		return n, nil
	}
	n := copy(p[:min(len(p), 64<<10)], r.b[r.at:])
	r.at = (r.at + n) % len(r.b)
	return n, nil
}
