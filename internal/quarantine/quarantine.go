// Package quarantine keeps one delivery the AMQP client cannot decode from
// stopping a queue. RabbitMQ accepts and delivers content headers that
// amqp091-go refuses to decode (tables nested deeper than 32, a table or array
// of more than 8,192 entries, a field of type 'L', a header larger than the
// negotiated frame size once the broker has added x-death to it); the client
// then closes its whole connection, and every reconnect meets the same
// message.
//
// Conn stands between the consumer connection's socket and the client. It
// reads only frame boundaries: a body frame passes untouched, straight into
// the client's buffer when it is large. It checks each content header with a
// bounded walk that mirrors the client's decoder. A header the client would
// refuse is replaced by one it decodes: the same class, body size and
// properties, its header table swapped for two entries: Header, holding the
// reason, and the connection's seal, a random value that never leaves the
// process. Conn.Quarantined tells the runtime (and only the runtime: a
// producer can send the marker, not the seal) to settle such a delivery by a
// non-requeueing NACK, which dead-letters the original, intact, to the
// queue's DLQ.
//
// Conn never breaks a stream the client would read: bytes it does not
// recognise as AMQP frames pass through unchanged, and the client fails on
// them as it would have. It is stricter than the client in one corner: the
// client reads a field array loosely, ending it silently where a value, or a
// table's key or value within it at any depth, is cut short at its first
// byte, or where the array's length runs past the table
// or array around it, and Conn refuses such arrays (RabbitMQ refuses them in
// a publish); the delivery is then dead-lettered, intact, not lost.
//
// cmd/lilydlq reads DLQs through a Conn too, since the runtime dead-letters
// such deliveries intact: a DLQ is where they end up. It alone also asks
// (RepeatedNames) for a content header whose tables name an entry twice to be
// quarantined: the client decodes one value of the name, and lilydlq must
// not export or re-drive such a copy as if it were whole. The runtime's
// consumers take such a delivery as the client decodes it.
//
// The runtime alone asks (BrokenXDeath) for the x-death of every content
// header to be checked as RabbitMQ reads it when it dead-letters the
// message: one its dead-lettering cannot read crashes the queue, so such a
// delivery must never be NACKed without requeue, and the verdict says so.
// The client's view of the header cannot tell: a table that names x-death
// twice, or an entry that names its count twice, shows the client the last
// value and the broker the first.
package quarantine

import (
	"crypto/rand"
	"encoding/binary"
	"io"
	"math"
	"net"

	"github.com/lily-mq/lily/internal/frame"
)

// Header names the entry of a replaced header table that says why the client
// could not decode the original.
const Header = "x-lily-quarantined"

// sealHeader names the entry of a replaced header table that holds its
// connection's seal.
const sealHeader = "x-lily-quarantine-seal"

// xdeathHeader names the entry of a replaced header table, present only
// when the original's x-death is one the broker's dead-lettering cannot
// read; only its presence counts.
const xdeathHeader = "x-lily-quarantine-x-death"

// Conn is a consumer connection's socket as the AMQP client reads it. Only
// the client's reader goroutine calls Read; Quarantined may be called from
// any.
type Conn struct {
	net.Conn
	f filter
}

// New wraps socket. clientFrameMax is the frame size the client asks for
// (amqp.Config.FrameSize): with the broker's, it gives the negotiated one.
// A clientFrameMax of 0 is taken as amqp091-go's DialConfig takes a
// FrameSize of 0, for its default (frame.Size), never for no limit: the
// filter reads the frames it judges whole, and a frame's size field alone
// must not size its buffer.
func New(socket net.Conn, clientFrameMax uint32) *Conn {
	if clientFrameMax == 0 {
		clientFrameMax = frame.Size
	}
	c := &Conn{Conn: socket}
	c.f = filter{src: socket, clientMax: clientFrameMax, buf: make([]byte, initialBuffer), seal: rand.Text()}
	return c
}

// BrokenXDeath makes c read the x-death of every content header as RabbitMQ
// reads it when it dead-letters the message (frame.CheckXDeath, on the
// wire's bytes: every entry named x-death in the header table, and every
// count in each of its tables, since the broker reads the first of a name
// and the client keeps the last), and quarantine too a header whose x-death
// fails, though the client decodes it. The verdict of such a header, and of
// one refused for another reason whose x-death fails too, says so
// (Verdict.XDeath): NACKed without requeue, the delivery would crash its
// queue. It costs a step over each entry of every header table. Call it
// before the client's first Read.
func (c *Conn) BrokenXDeath() { c.f.xdeath = true }

// RepeatedNames makes c quarantine too a content header that the client
// decodes but not whole: one whose header table, or a table within it, names
// an entry twice (RabbitMQ stores and delivers it; the client keeps the last
// value). It costs a set of each table's names per content header. Call it
// before the client's first Read.
func (c *Conn) RepeatedNames() { c.f.repeats = true }

// Read hands the client the socket's bytes, with every content header it
// would refuse replaced.
func (c *Conn) Read(p []byte) (int, error) { return c.f.Read(p) }

// Verdict is why Conn replaced the header table of a delivery.
type Verdict struct {
	// Why the client could not decode the original's header table, or the
	// broker's dead-lettering could not read its x-death, or both.
	Why string
	// XDeath: the original's x-death is one RabbitMQ's dead-lettering
	// cannot read (BrokenXDeath): a NACK without requeue would crash the
	// queue, so the delivery must reach the DLQ by a copy.
	XDeath bool
}

// Quarantined reports whether Conn replaced the header table of the delivery
// that arrived with headers, and why. Such headers carry the seal of this
// connection, which Quarantined removes with the x-death mark, leaving the
// marker alone; a producer's marker, without the seal, is only a header.
// Call it once for a delivery, before its headers go anywhere else: a
// second call finds no seal and reports false (keeping a trace of the
// first would be one a producer could forge, and the seal must not leave
// the process).
func (c *Conn) Quarantined(headers map[string]any) (Verdict, bool) {
	why, marked := headers[Header].(string)
	if !marked {
		return Verdict{}, false // every delivery asks: one lookup for those without
	}
	if seal, _ := headers[sealHeader].(string); seal != c.f.seal {
		return Verdict{}, false
	}
	_, xdeath := headers[xdeathHeader]
	delete(headers, sealHeader)
	delete(headers, xdeathHeader)
	return Verdict{Why: why, XDeath: xdeath}, true
}

// AMQP 0-9-1 frame types and the end octet every frame closes with.
const (
	frameMethod    = 1
	frameHeader    = 2
	frameBody      = 3
	frameHeartbeat = 8
	frameEnd       = 0xCE
	// frameOverhead is a frame's header and end octet.
	frameOverhead = 8
	// minFrameMax is the least frame size AMQP allows and amqp091 negotiates.
	minFrameMax = 4096
	// maxTuneFrame bounds a connection.tune frame: its class and method,
	// channel-max, frame-max and heartbeat, with room to spare.
	maxTuneFrame  = 64
	initialBuffer = 16 << 10
	// oversizedFrames frame sizes bound a content header over the frame
	// size that is read whole for its x-death. A producer's header is at
	// most the broker's frame size, RabbitMQ's default and Lily's alike,
	// and dead-lettering adds an x-death entry of some hundred bytes for
	// each distinct queue and reason: a second frame size holds hundreds,
	// and a header from a broker whose frame size is up to twice Lily's.
	oversizedFrames = 2
)

// filter is Conn's reading side.
type filter struct {
	src io.Reader
	// buf[r:w] was read from src and not yet handed on; of it, the first
	// checked bytes may be handed on as they are.
	buf       []byte
	r, w      int
	checked   int
	pass      int    // bytes of the frame being passed on that follow buf[r:r+checked]
	skip      int    // bytes of a replaced frame still to drop
	repl      []byte // the replacement, handed on before anything after it
	off       bool   // not a stream of AMQP frames as known: hand everything on
	clientMax uint32 // never 0
	tuned     bool   // the broker's connection.tune has passed
	frameMax  uint32 // negotiated then
	seal      string // what every replacement carries, to tell it from a forgery
	repeats   bool   // a table that names an entry twice is quarantined too
	xdeath    bool   // so is an x-death the broker's dead-lettering cannot read
}

// Read hands on checked bytes first, then a replacement, then what passes
// unchecked; only with none of these left does it look at the next frame.
func (f *filter) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		switch {
		case f.checked > 0:
			n := copy(p, f.buf[f.r:f.r+f.checked])
			f.r += n
			f.checked -= n
			return n, nil
		case len(f.repl) > 0:
			n := copy(p, f.repl)
			f.repl = f.repl[n:]
			return n, nil
		case f.skip > 0:
			if err := f.drop(); err != nil {
				return 0, err
			}
		case f.pass > 0:
			if buffered := f.w - f.r; buffered > 0 {
				f.checked = min(buffered, f.pass)
				f.pass -= f.checked
				continue
			}
			n, err := f.src.Read(p[:min(len(p), f.pass)])
			f.pass -= n
			return n, err
		case f.off:
			if f.w > f.r {
				f.checked = f.w - f.r
				continue
			}
			return f.src.Read(p)
		default:
			if err := f.scan(len(p)); err != nil {
				return 0, err
			}
		}
	}
}

// scan looks at the frames after the checked bytes, adding to checked every
// frame it may hand on as it is, until there is room for no more, or a frame
// needs something else. It reads from src only while nothing is checked: the
// client gets what is ready before scan waits for more.
func (f *filter) scan(room int) error {
	for f.checked < room && f.pass == 0 && f.skip == 0 && len(f.repl) == 0 && !f.off {
		more, err := f.step()
		if err != nil || !more {
			return err
		}
	}
	return nil
}

// step looks at the frame after the checked bytes. It reports false when it
// stopped short: it would have to read from src with bytes already checked,
// or a frame must be replaced after them.
func (f *filter) step() (bool, error) {
	if ok, err := f.need(7); !ok {
		return false, err
	}
	h := f.buf[f.r+f.checked:]
	typ, channel, size := h[0], binary.BigEndian.Uint16(h[1:3]), binary.BigEndian.Uint32(h[3:7])
	if uint64(size) > uint64(math.MaxInt-frameOverhead) {
		// Only where int is 32 bits: no frame that large is read whole.
		f.off = true
		return false, nil
	}
	total := frameOverhead + int(size)
	switch typ {
	case frameBody, frameHeartbeat:
		f.passOn(total)
		return true, nil
	case frameMethod:
		return f.method(channel, size, total)
	case frameHeader:
		return f.header(channel, size, total)
	}
	f.off = true
	return false, nil
}

// method looks at a method frame: connection.tune gives the frame size;
// everything else passes.
func (f *filter) method(channel uint16, size uint32, total int) (bool, error) {
	if size < 4 {
		f.off = true
		return false, nil
	}
	if ok, err := f.need(11); !ok {
		return false, err
	}
	h := f.buf[f.r+f.checked:]
	class, id := binary.BigEndian.Uint16(h[7:9]), binary.BigEndian.Uint16(h[9:11])
	if class != 10 || id != 30 || channel != 0 {
		f.passOn(total)
		return true, nil
	}
	if total > maxTuneFrame {
		f.off = true
		return false, nil
	}
	frame, err := f.whole(total)
	if frame == nil {
		return false, err
	}
	f.tune(frame[11 : total-1])
	f.checked += total
	return true, nil
}

// tune learns the broker's frame size from connection.tune (channel-max,
// frame-max, heartbeat) and negotiates as the client does: the smaller of
// two limits, the client's when the broker has none (0), never under 4096.
func (f *filter) tune(args []byte) {
	if len(args) < 6 {
		return
	}
	n := f.clientMax
	if broker := binary.BigEndian.Uint32(args[2:6]); broker > 0 {
		n = min(n, broker)
	}
	f.frameMax, f.tuned = max(n, minFrameMax), true
}

// header checks a content header frame and hands it on, or its replacement.
func (f *filter) header(channel uint16, size uint32, total int) (bool, error) {
	if !f.tuned {
		// Before the tune no content can come; let the client judge.
		f.passOn(total)
		return true, nil
	}
	if size > f.frameMax-frameOverhead {
		return f.oversized(channel, size, total)
	}
	frame, err := f.whole(total)
	if frame == nil {
		return false, err
	}
	v := f.judge(frame[7 : total-1])
	if v.why == "" {
		f.checked += total
		return true, nil
	}
	if f.checked > 0 {
		return false, nil // hand on what precedes it first
	}
	if total-1-7 < prefix {
		f.off = true // no body size to keep: nothing the client could pair with the body
		return false, nil
	}
	f.replace(channel, frame[7:total-1], v)
	f.skip = total
	return false, nil
}

// oversized hands on the replacement of a content header the client refuses
// by its size alone. Such a header has grown past the frame size by the
// broker's own dead-lettering into the queue, which reads only the x-death
// entry of the queue and reason it dead-letters for: another entry, broken,
// crashes the next. So with BrokenXDeath it is read whole, up to
// oversizedFrames frame sizes, and judged as any header; larger, or
// unasked, only its prefix (the body size) is kept, and the rest dropped.
func (f *filter) oversized(channel uint16, size uint32, total int) (bool, error) {
	if f.checked > 0 {
		return false, nil
	}
	over := "a content header of " + itoa(int(size)) + " bytes, over the negotiated frame size of " + itoa(int(f.frameMax))
	if !f.xdeath || total > f.most() {
		if ok, err := f.need(7 + prefix); !ok {
			return false, err
		}
		f.replace(channel, f.buf[f.r+7:f.r+7+prefix], verdict{why: over})
		f.skip = total
		return false, nil
	}
	frame, err := f.whole(total)
	if frame == nil {
		return false, err
	}
	payload := frame[7 : total-1]
	v := f.judge(payload)
	if v.why == "" {
		// Only its size is refused: the marker takes the place of its
		// table, which made it large, and the other properties are kept.
		v.table, v.spliceable = headerTable(payload)
		v.why = over
	} else {
		v.why = over + "; " + v.why
	}
	f.replace(channel, payload, v)
	f.skip = total
	return false, nil
}

// judge is the verdict on a content header's payload.
func (f *filter) judge(payload []byte) verdict {
	v := check(payload)
	if v.why == "" && f.repeats {
		v = repeated(payload)
	}
	if f.xdeath {
		v = withXDeath(v, payload)
	}
	return v
}

// most is the largest frame the filter reads whole once the frame size is
// known, and so the most its buffer grows to.
func (f *filter) most() int {
	if f.xdeath {
		return oversizedFrames * int(f.frameMax)
	}
	return int(f.frameMax)
}

// replace builds the frame that stands in for a refused content header.
func (f *filter) replace(channel uint16, payload []byte, v verdict) {
	table := markerTable(v.why, f.seal, v.xdeath)
	out := make([]byte, 7, 7+len(payload)+len(table)+1)
	out[0] = frameHeader
	binary.BigEndian.PutUint16(out[1:3], channel)
	// The spliced header keeps the other properties, and whatever padding
	// followed them; with a table larger than the one it replaces it might
	// no longer fit the frame size, and then only the body size is kept.
	spliced := v.table.start + len(table) + len(payload) - v.table.end
	if v.spliceable && spliced <= int(f.frameMax)-frameOverhead {
		out = append(out, payload[:v.table.start]...)
		out = append(out, table...)
		out = append(out, payload[v.table.end:]...)
	} else {
		out = append(out, payload[:prefix]...)
		out = binary.BigEndian.AppendUint16(out, flagHeaders)
		out = append(out, table...)
	}
	binary.BigEndian.PutUint32(out[3:7], uint32(len(out)-7))
	f.repl = append(out, frameEnd)
}

// markerTable is a header table of long-string entries: Header, why; the
// seal; and, when xdeath is set, the x-death mark.
func markerTable(why, seal string, xdeath bool) []byte {
	entries := make([]byte, 0, 3*(1+4+1)+len(Header)+len(why)+len(sealHeader)+len(seal)+len(xdeathHeader)+1)
	entries = appendEntry(entries, Header, why)
	entries = appendEntry(entries, sealHeader, seal)
	if xdeath {
		entries = appendEntry(entries, xdeathHeader, "1")
	}
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(entries))), entries...)
}

// appendEntry appends a table entry of a long string to b.
func appendEntry(b []byte, name, value string) []byte {
	b = append(b, byte(len(name)))
	b = append(b, name...)
	b = append(b, 'S')
	b = binary.BigEndian.AppendUint32(b, uint32(len(value)))
	return append(b, value...)
}

// whole returns the frame of total bytes after the checked ones, once it is
// buffered; nil when it is not (yet), or when it lacks its end octet (then
// the filter stops looking: the client will judge the stream).
func (f *filter) whole(total int) ([]byte, error) {
	if ok, err := f.need(total); !ok {
		return nil, err
	}
	frame := f.buf[f.r+f.checked : f.r+f.checked+total]
	if frame[total-1] != frameEnd {
		f.off = true
		return nil, nil
	}
	return frame, nil
}

// passOn hands on a frame of total bytes unchecked: what of it is buffered
// now, and the rest as it comes.
func (f *filter) passOn(total int) {
	buffered := f.w - f.r - f.checked
	n := min(buffered, total)
	f.checked += n
	f.pass = total - n
}

// need reports whether n bytes after the checked ones are buffered, reading
// from src for them only when nothing is checked yet.
func (f *filter) need(n int) (bool, error) {
	if f.w-f.r-f.checked >= n {
		return true, nil
	}
	if f.checked > 0 {
		return false, nil
	}
	return f.fill(n)
}

// fill reads from src until buf holds n bytes from r on, compacting or
// growing it as needed.
func (f *filter) fill(n int) (bool, error) {
	if f.r+n > len(f.buf) {
		if n > len(f.buf) {
			grown := make([]byte, max(n, min(2*len(f.buf), f.most())))
			f.w = copy(grown, f.buf[f.r:f.w])
			f.buf, f.r = grown, 0
		} else {
			f.w = copy(f.buf, f.buf[f.r:f.w])
			f.r = 0
		}
	}
	for f.w-f.r < n {
		m, err := f.src.Read(f.buf[f.w:])
		f.w += m
		if err != nil && f.w-f.r < n {
			return false, err
		}
	}
	return true, nil
}

// drop discards the bytes of a replaced frame, from buf and then from src.
func (f *filter) drop() error {
	if buffered := f.w - f.r; buffered > 0 {
		n := min(buffered, f.skip)
		f.r += n
		f.skip -= n
		return nil
	}
	f.r, f.w = 0, 0
	m, err := f.src.Read(f.buf[:min(len(f.buf), f.skip)])
	f.skip -= m
	return err
}

// itoa formats a non-negative int without fmt.
func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}
