package quarantine

import (
	"encoding/binary"
	"strings"
)

// Test helpers that write AMQP 0-9-1 by hand, as no client library would
// (amqp091-go's writer is unexported and refuses nothing anyway).

func wireFrame(typ byte, channel uint16, payload []byte) []byte {
	b := []byte{typ, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint16(b[1:3], channel)
	binary.BigEndian.PutUint32(b[3:7], uint32(len(payload)))
	return append(append(b, payload...), frameEnd)
}

func method(channel uint16, class, id uint16, args ...[]byte) []byte {
	p := binary.BigEndian.AppendUint16(nil, class)
	p = binary.BigEndian.AppendUint16(p, id)
	for _, a := range args {
		p = append(p, a...)
	}
	return wireFrame(frameMethod, channel, p)
}

func shortstr(s string) []byte { return append([]byte{byte(len(s))}, s...) }

func longstr(b []byte) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...)
}

func u64(n uint64) []byte { return binary.BigEndian.AppendUint64(nil, n) }

func u32(n uint32) []byte { return binary.BigEndian.AppendUint32(nil, n) }

func u16(n uint16) []byte { return binary.BigEndian.AppendUint16(nil, n) }

// entry is one key and typed value of a field table.
func entry(key string, value []byte) []byte { return append(shortstr(key), value...) }

// table is a field table's value: 'F' and the entries as a long string.
func table(entries ...[]byte) []byte { return append([]byte{'F'}, longstr(concat(entries))...) }

// array is a field array's value: 'A' and its values as a long string.
func array(values ...[]byte) []byte { return append([]byte{'A'}, longstr(concat(values))...) }

func str(s string) []byte { return append([]byte{'S'}, longstr([]byte(s))...) }

func concat(parts [][]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// props are a basic content header's properties: a message id, a type and
// a header table (the table value's long string, without its 'F'), with the
// flags that say so.
func props(headers []byte) []byte {
	b := u16(0x8000 | flagHeaders | 0x0080 | 0x0020) // content-type, headers, message-id, type
	b = append(b, shortstr("application/json")...)
	b = append(b, headers[1:]...)
	b = append(b, shortstr("id-1")...)
	return append(b, shortstr("OrderPlaced")...)
}

// contentHeader is a basic content header frame for a body of bodySize.
func contentHeader(channel uint16, bodySize int, properties []byte) []byte {
	p := append(u16(60), u16(0)...)
	p = append(p, u64(uint64(bodySize))...)
	return wireFrame(frameHeader, channel, append(p, properties...))
}

// payloadOf is a frame's payload: without its header and end octet.
func payloadOf(frame []byte) []byte { return frame[7 : len(frame)-1] }

func deliver(channel uint16, consumerTag string, tag uint64) []byte {
	return method(channel, 60, 60, shortstr(consumerTag), u64(tag), []byte{0}, shortstr(""), shortstr("orders"))
}

func body(channel uint16, b []byte) []byte { return wireFrame(frameBody, channel, b) }

// nested is a value of n tables (or arrays) inside each other around leaf.
func nested(n int, arrays bool, leaf []byte) []byte {
	v := leaf
	for range n {
		if arrays {
			v = array(v)
		} else {
			v = table(entry("n", v))
		}
	}
	return v
}

// wide is a table (or array) of n short entries.
func wide(n int, arrays bool) []byte {
	parts := make([][]byte, n)
	for i := range parts {
		if arrays {
			parts[i] = []byte{'b', 1}
		} else {
			parts[i] = entry("k"+strings.Repeat("x", i%3)+itoa(i), []byte{'b', 1})
		}
	}
	if arrays {
		return array(parts...)
	}
	return table(parts...)
}

// repeating is a table of distinct keys, then repeats more entries of its
// first key.
func repeating(distinct, repeats int) []byte {
	parts := make([][]byte, 0, distinct+repeats)
	for i := range distinct {
		parts = append(parts, entry("k"+itoa(i), []byte{'V'}))
	}
	for range repeats {
		parts = append(parts, entry("k0", []byte{'V'}))
	}
	return table(parts...)
}
