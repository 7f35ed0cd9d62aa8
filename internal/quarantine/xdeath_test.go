package quarantine

import (
	"bytes"
	"encoding/hex"
	"io"
	"os"
	"reflect"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/internal/frame"
)

// brokerXDeathPayload is a content header RabbitMQ 3.10.8 delivered: a
// message published with a per-message TTL and a CC header, rejected from
// a queue into a retry bucket and expired back twice, then returned to a
// quorum queue with a delivery limit of 1 until it dead-lettered it
// (testdata/broker-x-death.hex, captured from the test broker).
func brokerXDeathPayload(t *testing.T) []byte {
	t.Helper()
	h, err := os.ReadFile("testdata/broker-x-death.hex")
	if err != nil {
		t.Fatal(err)
	}
	b, err := hex.DecodeString(strings.TrimSpace(string(h)))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// xdeathEntry is an x-death entry of a queue, a reason and a count.
func xdeathEntry(count []byte) []byte {
	return table(entry("queue", str("q")), entry("reason", str("rejected")), entry("count", count))
}

// xdeathCase is a header table's content and what brokenXDeath says of it.
type xdeathCase struct {
	name  string
	table []byte // the header table's content
	want  string // a part of the reason; "" for accepted
}

// xdeathCases are x-deaths on the wire: those the broker writes and reads
// without harm, and those its dead-lettering crashes on.
func xdeathCases() []xdeathCase {
	long := append([]byte{'l'}, u64(1)...)
	good := entry("x-death", array(xdeathEntry(long)))
	return []xdeathCase{
		{"no x-death", concat([][]byte{entry("a", str("b"))}), ""},
		{"the broker's own", concat([][]byte{good, entry("x-first-death-queue", str("q"))}), ""},
		{"a string", entry("x-death", str("x")), ""},
		{"an empty array", entry("x-death", array()), ""},
		{"an entry without a count", entry("x-death", array(table(entry("queue", str("q"))))), ""},
		{"an empty entry", entry("x-death", array(xdeathEntry(long), table())), ""},
		{"a void count", entry("x-death", array(xdeathEntry([]byte{'V'}))), ""},
		{"an L count", entry("x-death", array(xdeathEntry(append([]byte{'L'}, u64(1)...)))), ""},
		{"a timestamp count", entry("x-death", array(xdeathEntry(append([]byte{'T'}, u64(5)...)))), ""},
		{"a short count", entry("x-death", array(xdeathEntry(append([]byte{'u'}, u16(5)...)))), ""},
		{"an x-death below the top", entry("t", table(entry("x-death", array(str("x"))))), ""},
		{"after an L field", concat([][]byte{entry("n", append([]byte{'L'}, u64(7)...)), good}), ""},

		{"an entry that is a string", entry("x-death", array(str("x"))), "header x-death: entry 0 is a string, not a table"},
		{"a table, then an array", entry("x-death", array(xdeathEntry(long), array())), "entry 1 is an array, not a table"},
		{"an entry that is void", entry("x-death", array([]byte{'V'})), "entry 0 is void, not a table"},
		{"an entry that is an integer", entry("x-death", array(long)), "entry 0 is an integer, not a table"},
		{"a string count", entry("x-death", array(xdeathEntry(str("many")))), "the count of entry 0 is a string, not an integer"},
		{"a boolean count", entry("x-death", array(xdeathEntry([]byte{'t', 1}))), "the count of entry 0 is a boolean"},
		{"a float count", entry("x-death", array(xdeathEntry(append([]byte{'d'}, u64(7)...)))), "the count of entry 0 is a float"},
		{"a float32 count", entry("x-death", array(xdeathEntry(append([]byte{'f'}, u32(7)...)))), "the count of entry 0 is a float"},
		{"a decimal count", entry("x-death", array(xdeathEntry([]byte{'D', 1, 0, 0, 0, 10}))), "the count of entry 0 is a decimal"},
		{"a table count", entry("x-death", array(xdeathEntry(table()))), "the count of entry 0 is a table"},
		{"a byte-array count", entry("x-death", array(xdeathEntry(append([]byte{'x'}, longstr([]byte("1"))...)))), "the count of entry 0 is a byte array"},
		{"after an L field, broken", concat([][]byte{entry("n", append([]byte{'L'}, u64(7)...)), entry("x-death", array(str("x")))}), "entry 0 is a string"},
		// The client keeps the last of a name, the broker reads the first.
		{"broken, then the broker's", concat([][]byte{entry("x-death", array(str("x"))), good}), "entry 0 is a string"},
		{"the broker's, then broken", concat([][]byte{good, entry("x-death", array(str("x")))}), "entry 0 is a string"},
		{"a count named twice", entry("x-death", array(table(entry("queue", str("q")), entry("count", str("many")), entry("count", long)))), "the count of entry 0 is a string"},
		// Cut short: the broker parses no such table, and nothing is said.
		{"a table cut short", entry("x-death", array(str("x")))[:12], ""},
	}
}

// brokenXDeath reads an x-death on the wire as the broker does: it takes
// what the broker writes and what it reads without harm, and refuses the
// shapes its dead-lettering crashes on (frame.CheckXDeath), wherever the
// client's view would hide them: an x-death named twice, a count named
// twice (the broker reads the first, the client keeps the last).
func TestBrokenXDeath(t *testing.T) {
	for _, c := range xdeathCases() {
		t.Run(c.name, func(t *testing.T) {
			got := brokenXDeath(c.table)
			switch {
			case c.want == "" && got != "":
				t.Errorf("refused: %s", got)
			case c.want != "" && !strings.Contains(got, c.want):
				t.Errorf("reason %q, want %q", got, c.want)
			}
		})
	}
	payload := brokerXDeathPayload(t)
	tbl, ok := headerTable(payload)
	if !ok {
		t.Fatal("the captured header has no table")
	}
	if why := brokenXDeath(payload[tbl.start+4 : tbl.end]); why != "" || check(payload).why != "" {
		t.Errorf("the broker's own x-death: %q, check %q", why, check(payload).why)
	}
	if !strings.Contains(string(payload), "delivery_limit") || !strings.Contains(string(payload), "original-expiration") {
		t.Error("the captured header is not the one described")
	}
}

// Through a Conn asked for it (BrokenXDeath), amqp091-go receives a
// delivery whose x-death the broker cannot read quarantined and marked,
// though it decodes it, its other properties kept; one the client cannot
// decode is marked too when its x-death is broken, and only then; the
// broker's own passes. Unasked, the filter reads no x-death.
func TestBrokenXDeathQuarantined(t *testing.T) {
	good := entry("x-death", array(xdeathEntry(append([]byte{'l'}, u64(1)...))))
	broken := entry("x-death", array(str("x")))
	deep := entry("deep", nested(33, false, str("x")))
	for _, c := range []struct {
		name    string
		table   []byte
		asked   bool
		held    bool
		xdeath  bool
		reasons []string
	}{
		{"the broker's own", table(good), true, false, false, nil},
		{"broken", table(broken), true, true, true, []string{"header x-death: entry 0 is a string, not a table"}},
		{"broken behind the broker's", table(broken, good), true, true, true, []string{"entry 0 is a string"}},
		{"too deep, broken", table(deep, broken), true, true, true, []string{"nested deeper than 32", "; header x-death: entry 0 is a string"}},
		{"too deep, the broker's", table(deep, good), true, true, false, []string{"nested deeper than 32"}},
		{"broken, unasked", table(broken), false, false, false, nil},
		{"too deep, broken, unasked", table(deep, broken), false, true, false, []string{"nested deeper than 32"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var setup []func(*Conn)
			if c.asked {
				setup = append(setup, (*Conn).BrokenXDeath)
			}
			cl := connect(t, true, setup...)
			sent := make(chan error, 1)
			go func() {
				sent <- cl.broker.send(0, append(message(1, props(c.table), []byte("x")), message(2, props(table(good)), []byte("ok"))...)...)
			}()
			d, err := cl.next(t)
			if err != nil {
				t.Fatalf("the client closed: %v", err)
			}
			v, held := cl.filter.Quarantined(d.Headers)
			if held != c.held || v.XDeath != c.xdeath {
				t.Fatalf("held %v, verdict %+v; want held %v, x-death %v", held, v, c.held, c.xdeath)
			}
			for _, r := range c.reasons {
				if !strings.Contains(v.Why, r) {
					t.Errorf("reason %q, want %q in it", v.Why, r)
				}
			}
			if held && (len(d.Headers) != 1 || d.Headers[Header] != v.Why || d.MessageId != "id-1" || d.Type != "OrderPlaced") {
				t.Errorf("quarantined delivery %+v", d)
			}
			next, err := cl.next(t)
			if err != nil || string(next.Body) != "ok" {
				t.Fatalf("the delivery behind it: %q, %v", next.Body, err)
			}
			if v, held := cl.filter.Quarantined(next.Headers); held || v.XDeath {
				t.Errorf("the broker's own x-death quarantined: %+v", v)
			}
			if err := <-sent; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// seenOtherwise names the x-death cases the client decodes otherwise than
// the broker reads them.
var seenOtherwise = map[string]bool{
	"an L count": true, "after an L field": true, "after an L field, broken": true,
	"broken, then the broker's": true, "the broker's, then broken": true, "a count named twice": true,
	"a table cut short": true,
}

// deliverCase sends case i's table to c's client, as delivery i+1, and
// returns the delivery the client decoded.
func deliverCase(t *testing.T, c *client, i int, tc xdeathCase) amqp.Delivery {
	t.Helper()
	sent := make(chan error, 1)
	go func() {
		sent <- c.broker.send(0, message(uint64(i+1), props(table(tc.table)), []byte("x"))...)
	}()
	d, err := c.next(t)
	if err != nil {
		t.Fatalf("%s: the client closed: %v", tc.name, err)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	return d
}

// Where the client sees the x-death the broker reads (no name twice, no
// 'L', nothing cut short), brokenXDeath on the wire and frame.CheckXDeath
// on what amqp091-go decodes agree: one rule, read twice.
func TestBrokenXDeathAgreesWithTheDecodedCheck(t *testing.T) {
	c := connect(t, false)
	for i, tc := range xdeathCases() {
		if seenOtherwise[tc.name] {
			continue
		}
		d := deliverCase(t, c, i, tc)
		decoded := frame.CheckXDeath(d.Headers[frame.XDeath])
		raw := brokenXDeath(tc.table)
		if (decoded == nil) != (raw == "") || decoded != nil && !strings.Contains(raw, "header x-death: "+decoded.Error()+": ") {
			t.Errorf("%s: on the wire %q, decoded %v", tc.name, raw, decoded)
		}
	}
}

// Where the client sees the x-death the broker reads, Decoded, told the
// headers an unfiltered client decodes, gives the verdict a Conn with
// BrokenXDeath gives on the wire, and the headers its client reads once
// Quarantined has taken the seal and the mark away.
func TestDecodedIsTheFiltersVerdict(t *testing.T) {
	bare, filtered := connect(t, false), connect(t, true, (*Conn).BrokenXDeath)
	for i, tc := range xdeathCases() {
		if seenOtherwise[tc.name] {
			continue
		}
		got := [2]amqp.Delivery{deliverCase(t, bare, i, tc), deliverCase(t, filtered, i, tc)}
		want, _ := filtered.filter.Quarantined(got[1].Headers)
		v, headers := Decoded(got[0].Headers)
		if v != want || !reflect.DeepEqual(map[string]any(got[1].Headers), headers) {
			t.Errorf("%s: decoded %+v, %v; on the wire %+v, %v", tc.name, v, headers, want, got[1].Headers)
		}
	}
}

// padded is a header table of entries and of padding that makes a content
// header of props(padded) size bytes long as a frame's payload.
func padded(size int, entries ...[]byte) []byte {
	short := props(table(entries...))
	return table(append(entries, entry("pad", str(string(make([]byte, size-len(short)-prefix-len(entry("pad", str(""))))))))...)
}

// A content header over the frame size is refused by the client whatever it
// holds, and was NACKed unread; its x-death, though, grows there by the
// broker's own dead-lettering into the queue, and an entry of this queue
// that dead-lettering did not touch can crash the next. Through a Conn that
// reads x-death, such a header up to twice the frame size is read whole:
// quarantined, its other properties kept, and marked when its x-death is
// broken. Above that, or unasked, it is replaced unread, as before.
func TestOversizedBrokenXDeath(t *testing.T) {
	broken := entry("x-death", array(table(entry("count", str("x")), entry("queue", str("q")), entry("reason", str("rejected")))))
	good := entry("x-death", array(xdeathEntry(append([]byte{'l'}, u64(1)...))))
	const over = "over the negotiated frame size of 131072"
	for _, c := range []struct {
		name   string
		table  []byte
		asked  bool
		xdeath bool
		kept   bool // the other properties are kept
	}{
		{"broken", padded(testFrameMax+100, broken), true, true, true},
		{"broken, at the cap", padded(2*testFrameMax-frameOverhead, broken), true, true, true},
		{"the broker's own", padded(testFrameMax+100, good), true, false, true},
		{"broken, over the cap", padded(2*testFrameMax-frameOverhead+1, broken), true, false, false},
		{"broken, unasked", padded(testFrameMax+100, broken), false, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var setup []func(*Conn)
			if c.asked {
				setup = append(setup, (*Conn).BrokenXDeath)
			}
			cl := connect(t, true, setup...)
			for _, chunk := range []int{0, 1, 5, 4096} {
				tag := uint64(chunk + 1)
				sent := make(chan error, 1)
				go func() {
					sent <- cl.broker.send(chunk, append(message(tag, props(c.table), []byte("x")), message(tag+1000, props(table(good)), []byte("ok"))...)...)
				}()
				d, err := cl.next(t)
				if err != nil {
					t.Fatalf("chunks of %d: the client closed: %v", chunk, err)
				}
				v, held := cl.filter.Quarantined(d.Headers)
				if !held || v.XDeath != c.xdeath || !strings.Contains(v.Why, over) || c.xdeath && !strings.Contains(v.Why, "; header x-death: the count of entry 0 is a string") {
					t.Fatalf("chunks of %d: held %v, verdict %+v; want x-death %v", chunk, held, v, c.xdeath)
				}
				if len(d.Headers) != 1 || string(d.Body) != "x" || d.DeliveryTag != tag || (d.MessageId == "id-1" && d.Type == "OrderPlaced") != c.kept {
					t.Fatalf("chunks of %d: quarantined delivery %d, body %q, headers %v, message id %q; want properties kept %v", chunk, d.DeliveryTag, d.Body, d.Headers, d.MessageId, c.kept)
				}
				next, err := cl.next(t)
				if err != nil || string(next.Body) != "ok" || next.DeliveryTag != tag+1000 {
					t.Fatalf("chunks of %d: the delivery behind it: %q, %v", chunk, next.Body, err)
				}
				if err := <-sent; err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// However the socket splits the stream, and however little the client reads
// at a time, a filter reading x-death hands on the same bytes around a
// content header over the frame size that it reads whole: the header
// replaced and marked, the frames around it untouched. The frame size is
// the least there is, so that the stream can be split in two at every byte.
func TestOversizedBrokenXDeathAtEverySplit(t *testing.T) {
	broken := entry("x-death", array(table(entry("count", str("x")), entry("queue", str("q")), entry("reason", str("rejected")))))
	good := concat(message(2, props(table(entry("x-lily-version", []byte{'b', 1}))), []byte(`{"ok":true}`)))
	before := append(method(0, 10, 30, u16(0), u32(minFrameMax), u16(60)), deliver(1, consumerTag, 1)...)
	hostile := contentHeader(1, 7, props(padded(minFrameMax+100, broken)))
	stream := concat([][]byte{before, hostile, body(1, []byte("payload")), wireFrame(frameHeartbeat, 0, nil), good})
	read := func(src io.Reader, room int) []byte {
		f := filter{src: src, clientMax: minFrameMax, buf: make([]byte, 64), seal: testSeal, xdeath: true}
		return drain(t, &f, room)
	}
	whole := read(&chunked{b: stream}, 1<<20)
	frames, err := splitFrames(whole)
	if err != nil {
		t.Fatal(err)
	}
	replaced := frames[2]
	if replaced[0] != frameHeader || len(replaced) > minFrameMax || !bytes.Contains(replaced, []byte(testSeal)) || !bytes.Contains(replaced, []byte(xdeathHeader)) || !bytes.Contains(replaced, []byte("id-1")) {
		t.Fatalf("the header handed on: %q", replaced)
	}
	if !bytes.HasPrefix(whole, before) || !bytes.HasSuffix(whole, good) {
		t.Fatal("frames around the header were changed")
	}
	for at := range len(stream) + 1 {
		if got := read(io.MultiReader(bytes.NewReader(stream[:at]), bytes.NewReader(stream[at:])), 4096); !bytes.Equal(got, whole) {
			t.Fatalf("split at %d: other bytes handed on", at)
		}
	}
	for chunk := 1; chunk <= 97; chunk++ {
		for _, room := range []int{1, 7, 100, 4096} {
			if got := read(&chunked{b: stream, n: chunk}, room); !bytes.Equal(got, whole) {
				t.Fatalf("chunks of %d, reads of %d: other bytes handed on", chunk, room)
			}
		}
	}
}
