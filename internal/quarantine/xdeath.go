package quarantine

import (
	"encoding/binary"

	"github.com/lily-mq/lily/internal/frame"
)

// withXDeath is v, the verdict on a content header's payload, with the
// header's x-death read as the broker reads it: when the broker's
// dead-lettering cannot read it, the header is refused, and marked so,
// whether the client decodes it or not.
func withXDeath(v verdict, payload []byte) verdict {
	t, ok := headerTable(payload)
	if !ok {
		return v
	}
	why := brokenXDeath(payload[t.start+4 : t.end])
	switch {
	case why == "":
		return v
	case v.why == "":
		// check passed it: every property decodes, and the table is whole.
		return verdict{why: why, table: t, spliceable: true, xdeath: true}
	}
	v.why += "; " + why
	v.xdeath = true
	return v
}

// brokenXDeath reads the content of a header table as RabbitMQ does and
// says why its dead-lettering could not read an x-death there
// (frame.XDeathEntry: frame.CheckXDeath's verdicts and words), or returns
// "". It reads every entry named x-death, and every count in each of its
// tables: the broker reads the first of a name, the client keeps the last. A table the broker could not have parsed
// ends the reading with nothing said: no delivery carries one. Its work is
// bounded by the content's length, a step a value at the top and within
// x-death; it allocates only for a reason.
func brokenXDeath(b []byte) string {
	for len(b) > 0 {
		name, t, value, rest, ok := brokerEntry(b)
		if !ok {
			return ""
		}
		if t == 'A' && string(name) == frame.XDeath {
			if why := brokenEntries(value); why != "" {
				return why
			}
		}
		b = rest
	}
	return ""
}

// brokenEntries reads the content of an x-death array.
func brokenEntries(b []byte) string {
	for i := 0; len(b) > 0; i++ {
		t := b[0]
		value, rest, ok := brokerValue(t, b[1:])
		if !ok {
			return ""
		}
		if why := frame.XDeathEntry(i, t, 'V'); why != "" {
			return frame.XDeathUnreadable(why)
		}
		for e := value; len(e) > 0; {
			name, ct, _, next, ok := brokerEntry(e)
			if !ok {
				return ""
			}
			if string(name) == "count" {
				if why := frame.XDeathEntry(i, t, ct); why != "" {
					return frame.XDeathUnreadable(why)
				}
			}
			e = next
		}
		b = rest
	}
	return ""
}

// brokerEntry splits a table's content into its first entry (its name, type
// and value) and the rest; ok is false when the broker could not parse it.
func brokerEntry(b []byte) (name []byte, t byte, value, rest []byte, ok bool) {
	if len(b) == 0 || len(b) < 2+int(b[0]) {
		return nil, 0, nil, nil, false
	}
	n := int(b[0])
	name, t = b[1:1+n], b[1+n]
	value, rest, ok = brokerValue(t, b[2+n:])
	return name, t, value, rest, ok
}

// brokerValue splits off a value of type t, as RabbitMQ parses one (the
// client's types and 'L'): for a table, an array, a string or a byte
// array, its content after its length.
func brokerValue(t byte, b []byte) (value, rest []byte, ok bool) {
	n, fixed := width(t)
	if t == 'L' {
		n, fixed = 8, true
	}
	if fixed {
		if len(b) < n {
			return nil, nil, false
		}
		return b[:n], b[n:], true
	}
	switch t {
	case 'S', 'x', 'F', 'A':
		if len(b) < 4 {
			return nil, nil, false
		}
		l := binary.BigEndian.Uint32(b)
		if uint64(l) > uint64(len(b)-4) {
			return nil, nil, false
		}
		return b[4 : 4+l], b[4+l:], true
	}
	return nil, nil, false
}

// Decoded is what a Conn with BrokenXDeath does to a delivery whose header
// table the client decoded as headers, told from that table alone, for a
// test harness that has no socket (lilytest): an x-death RabbitMQ's
// dead-lettering cannot read (frame.CheckXDeath, in the words of the
// filter's reason) has the table replaced, and the runtime reads it as
// Quarantined leaves it, the marker alone, with the same verdict; the
// delivery's other properties are kept. Otherwise it returns headers as
// they are and no verdict. A decoded table names no entry twice, where the
// filter reads the first of a name, nor holds a field of type 'L'; and it
// shows none of the other faults the filter quarantines (tables too deep or
// too wide, a header over the frame size), which the client cannot decode:
// for every other table the verdict is the filter's
// (TestDecodedIsTheFiltersVerdict).
func Decoded(headers map[string]any) (Verdict, map[string]any) {
	err := frame.CheckXDeath(headers[frame.XDeath])
	if err == nil {
		return Verdict{}, headers
	}
	why := frame.XDeathUnreadable(err.Error())
	return Verdict{Why: why, XDeath: true}, map[string]any{Header: why}
}
