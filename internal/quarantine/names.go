package quarantine

import (
	"encoding/binary"
	"strings"
)

// maxShownName bounds the bytes of a repeated name a reason shows.
const maxShownName = 24

// repeated reads a content header's payload that check passed and says why
// it is quarantined when a table in it names an entry twice: the header
// table, or a table within it or within an array. The client decodes such a
// table into a map, keeping the last value of the name: what it hands on is
// not the message. Its work is bounded by the payload's length, every table
// walked once; it allocates a set of each table's names.
func repeated(payload []byte) verdict {
	t, ok := headerTable(payload)
	if !ok {
		return verdict{}
	}
	name, found := repeatedIn(payload[t.start+4:t.end], 'F')
	if !found {
		return verdict{}
	}
	return verdict{why: "a header table that names " + shown(name) + " twice (the client keeps one value)", table: t, spliceable: true}
}

// headerTable is where the header table of a content header's payload lies,
// when it has one whole: whatever check said of the payload.
func headerTable(payload []byte) (span, bool) {
	if len(payload) < prefix+2 {
		return span{}, false
	}
	flags := binary.BigEndian.Uint16(payload[prefix:])
	if flags&flagHeaders == 0 {
		return span{}, false
	}
	at := prefix + 2
	// Only content type and content encoding, short strings, come first.
	for _, bit := range [...]uint16{0x8000, 0x4000} {
		if flags&bit != 0 {
			if at >= len(payload) {
				return span{}, false
			}
			at += 1 + int(payload[at])
		}
	}
	if at+4 > len(payload) {
		return span{}, false
	}
	n := binary.BigEndian.Uint32(payload[at:])
	if uint64(n) > uint64(len(payload)-at-4) {
		return span{}, false
	}
	return span{at, at + 4 + int(n)}, true
}

// repeatedIn walks the content b of a table (kind 'F') or an array ('A')
// that check passed, and returns the first name a table in it holds twice.
func repeatedIn(b []byte, kind byte) ([]byte, bool) {
	var names map[string]struct{}
	for len(b) > 0 {
		if kind == 'F' {
			l := int(b[0])
			name := b[1 : 1+l]
			if _, twice := names[string(name)]; twice {
				return name, true
			}
			if names == nil {
				names = make(map[string]struct{})
			}
			names[string(name)] = struct{}{}
			b = b[1+l:]
		}
		t := b[0]
		if t == 'F' || t == 'A' {
			n := int(binary.BigEndian.Uint32(b[1:]))
			if name, found := repeatedIn(b[5:5+n], t); found {
				return name, true
			}
		}
		b = skipField(b)
	}
	return nil, false
}

// shown is a name for a reason: quoted, printable ASCII, at most
// maxShownName bytes of it.
func shown(name []byte) string {
	var s strings.Builder
	s.WriteByte('"')
	for i, c := range name {
		if i == maxShownName {
			s.WriteString("...")
			break
		}
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			s.WriteString(`\x`)
			s.WriteByte("0123456789abcdef"[c>>4])
			s.WriteByte("0123456789abcdef"[c&0xf])
			continue
		}
		s.WriteByte(c)
	}
	s.WriteByte('"')
	return s.String()
}
