package quarantine

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/lily-mq/lily/internal/frame"
)

// The bounds amqp091-go decodes a field table within.
const (
	maxDepth   = frame.MaxTableDepth
	maxEntries = frame.MaxTableEntries
)

// The basic class's property flags, in the order the properties follow the
// flags word (AMQP 0-9-1, 4.2.6.1). The two low bits are not properties.
const (
	flagHeaders   = 0x2000
	flagTimestamp = 0x0040
	// Properties of one octet.
	flagDeliveryMode = 0x1000
	flagPriority     = 0x0800
)

// prefix is a content header's class, weight and body size, before its flags.
const prefix = 12

// span is where a content header's header table lies in its payload: the
// table's four length bytes and its content.
type span struct{ start, end int }

// verdict is what check found in one content header.
type verdict struct {
	// why is the reason the client would refuse the header; empty when it
	// would decode it.
	why string
	// table is the header table's place, when the trouble lies inside it
	// alone: the other properties can be kept around a replacement table.
	table span
	// spliceable: table is set, and every other property decodes.
	spliceable bool
	// xdeath: among why, the header's x-death is one the broker's
	// dead-lettering cannot read.
	xdeath bool
}

// check reads a content header's payload (class, weight, body size, flags,
// properties) as amqp091-go reads it and says whether the client would
// refuse it. It allocates only when it refuses, or to count the keys of a
// table of more than maxEntries entries; its work is bounded by the
// payload's length (twice over for such a table, whose count steps over
// its values without walking into them): every step consumes a byte, and
// tables nest at most maxDepth+1 calls deep before it stops.
func check(payload []byte) verdict {
	if len(payload) < prefix+2 {
		return verdict{why: "a content header too short to carry its flags"}
	}
	flags := binary.BigEndian.Uint16(payload[prefix:])
	b := payload[prefix+2:]
	v := verdict{spliceable: true}
	for bit := uint16(0x8000); bit >= 0x0004; bit >>= 1 {
		if flags&bit == 0 {
			continue
		}
		at := len(payload) - len(b)
		var why string
		switch bit {
		case flagHeaders:
			var content []byte
			if content, b, why = field32(b); why != "" {
				break
			}
			v.table = span{at, len(payload) - len(b)}
			if why = walkTable(content, 0); why != "" && v.why == "" {
				v.why = why // keep reading: another property may be broken too
			}
			continue
		case flagDeliveryMode, flagPriority:
			b, why = fixed(b, 1)
		case flagTimestamp:
			b, why = fixed(b, 8)
		default: // a short string
			if len(b) == 0 {
				why = "a content header cut short"
				break
			}
			b, why = fixed(b[1:], int(b[0]))
		}
		if why != "" {
			return verdict{why: why}
		}
	}
	if v.why == "" {
		return verdict{}
	}
	return v
}

// walkTable checks the content of a field table found at depth.
func walkTable(b []byte, depth int) string {
	if depth > maxDepth {
		return fmt.Sprintf("header tables or arrays nested deeper than %d", maxDepth)
	}
	content := b
	n := 0
	for ; len(b) > 0; n++ {
		var why string
		if b, why = fixed(b[1:], int(b[0])); why != "" {
			return why
		}
		if b, why = walkField(b, depth); why != "" {
			return why
		}
	}
	if n > maxEntries && keysBefore(content, n-1) >= maxEntries {
		return fmt.Sprintf("a header table of more than %d keys", maxEntries)
	}
	return ""
}

// keysBefore counts the distinct keys of the first n entries of a table's
// content that walkTable has checked, up to maxEntries. The client refuses
// a table once it holds maxEntries keys and another entry follows: a key
// repeated counts once, the last entry kept. The set grows with the keys
// found, not to maxEntries at once: a table of thousands of entries of one
// key, which the client accepts, would cost a map of 8192 for each such
// table in a header.
func keysBefore(b []byte, n int) int {
	keys := map[string]struct{}{}
	for i := 0; i < n && len(keys) < maxEntries; i++ {
		l := int(b[0])
		keys[string(b[1:1+l])] = struct{}{}
		b = skipField(b[1+l:])
	}
	return len(keys)
}

// skipField steps over one value that walkField has checked, without
// walking into a table or array again: a table's keys are counted once per
// table, not once per table above it too.
func skipField(b []byte) []byte {
	t, b := b[0], b[1:]
	if n, ok := width(t); ok {
		return b[n:]
	}
	return b[4+int(binary.BigEndian.Uint32(b)):] // 'S', 'x', 'F' or 'A'
}

// width is the size of a value of type t that has one, the types the client
// decodes but for those its four length bytes measure.
func width(t byte) (int, bool) {
	switch t {
	case 'V':
		return 0, true
	case 't', 'b', 'B':
		return 1, true
	case 's', 'u':
		return 2, true
	case 'I', 'i', 'f':
		return 4, true
	case 'D':
		return 5, true
	case 'l', 'd', 'T':
		return 8, true
	}
	return 0, false
}

// walkArray checks the content of a field array found at depth.
func walkArray(b []byte, depth int) string {
	if depth > maxDepth {
		return fmt.Sprintf("header tables or arrays nested deeper than %d", maxDepth)
	}
	for n := 0; len(b) > 0; n++ {
		if n == maxEntries {
			return fmt.Sprintf("a header array of more than %d values", maxEntries)
		}
		var why string
		if b, why = walkField(b, depth); why != "" {
			return why
		}
	}
	return ""
}

// walkField checks one typed value in a table or array at depth, and returns
// what follows it.
func walkField(b []byte, depth int) ([]byte, string) {
	if len(b) == 0 {
		return nil, "a header table cut short"
	}
	t, b := b[0], b[1:]
	if n, ok := width(t); ok {
		return fixed(b, n)
	}
	switch t {
	case 'S', 'x':
		_, rest, why := field32(b)
		return rest, why
	case 'F', 'A':
		content, rest, why := field32(b)
		if why != "" {
			return nil, why
		}
		if t == 'F' {
			why = walkTable(content, depth+1)
		} else {
			why = walkArray(content, depth+1)
		}
		return rest, why
	}
	return nil, fmt.Sprintf("a header value of type %q (0x%02x), which the client does not decode", rune(printable(t)), t)
}

// field32 splits off a value that its four length bytes measure; amqp091
// refuses a length past math.MaxInt32 (a negative byte-array length).
func field32(b []byte) (content, rest []byte, why string) {
	if len(b) < 4 {
		return nil, nil, "a header table cut short"
	}
	n := binary.BigEndian.Uint32(b)
	if n > math.MaxInt32 || uint64(len(b)-4) < uint64(n) {
		return nil, nil, "a header table cut short"
	}
	return b[4 : 4+n], b[4+n:], ""
}

// fixed skips n bytes.
func fixed(b []byte, n int) ([]byte, string) {
	if len(b) < n {
		return nil, "a content header cut short"
	}
	return b[n:], ""
}

// printable shows a type byte in a reason: itself when printable ASCII, else '?'.
func printable(c byte) byte {
	if c < 0x20 || c > 0x7e {
		return '?'
	}
	return c
}
