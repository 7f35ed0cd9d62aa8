package wire

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"
	"unicode/utf8"
)

// The scanner under JSONReader: strings and their escapes, numbers, member
// names, and the skipping of values the schema does not know. Each records
// the first syntax error and reports whether it read what it should.

// text reads the string at r.pos (its opening quote) and returns its text,
// unescaped: a slice of the body, or of r.buf when it had escapes, valid
// until the next string is read.
func (r *JSONReader) text() ([]byte, bool) {
	r.pos++
	start := r.pos // the first byte not yet copied to r.buf, when escaped
	escaped := false
	for {
		for r.pos+8 <= len(r.data) && plain8(binary.LittleEndian.Uint64(r.data[r.pos:])) {
			r.pos += 8
		}
		for r.pos < len(r.data) && plain(r.data[r.pos]) {
			r.pos++
		}
		if r.pos == len(r.data) {
			r.fail("unexpected end of JSON input in a string")
			return nil, false
		}
		switch c := r.data[r.pos]; {
		case c == '"':
			r.pos++
			if !escaped {
				return r.data[start : r.pos-1], true
			}
			r.buf = append(r.buf, r.data[start:r.pos-1]...)
			return r.buf, true
		case c == '\\':
			if !escaped {
				r.buf, escaped = r.buf[:0], true
			}
			r.buf = append(r.buf, r.data[start:r.pos]...)
			if !r.escape() {
				return nil, false
			}
			start = r.pos
		case c < 0x20:
			r.fail(invalidChar(c, "in a string"))
			return nil, false
		default:
			if _, size := utf8.DecodeRune(r.data[r.pos:]); size > 1 {
				r.pos += size
				continue
			}
			r.fail("invalid UTF-8 in a string")
			return nil, false
		}
	}
}

// plain is true for a byte that stands for itself in a string: printable
// ASCII other than the quote and the backslash.
func plain(c byte) bool { return c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf }

// plain8 is plain for the eight bytes of x at once, so that long strings are
// scanned a word at a time. A word it refuses goes to the byte loop, which
// decides: borrows may flag a plain byte next to one that is not, never miss
// one that is not.
func plain8(x uint64) bool {
	const ones = 0x0101010101010101
	control := (x - 0x20*ones) &^ x // the high bit of a byte below 0x20
	return (control|zeroByte(x^'"'*ones)|zeroByte(x^'\\'*ones)|x)&(0x80*ones) == 0
}

// zeroByte has the high bit of a byte of v that is zero set.
func zeroByte(v uint64) uint64 { return (v - 0x0101010101010101) &^ v }

// escape appends the character of the escape at r.pos to r.buf.
func (r *JSONReader) escape() bool {
	if r.pos+1 >= len(r.data) {
		r.pos = len(r.data)
		r.fail("unexpected end of JSON input in a string")
		return false
	}
	c := r.data[r.pos+1]
	if s := unescape(c); s != 0 {
		r.buf = append(r.buf, s)
		r.pos += 2
		return true
	}
	if c != 'u' {
		r.pos++
		r.fail(invalidChar(c, "in a string escape"))
		return false
	}
	u, ok := r.hex4()
	if !ok {
		return false
	}
	switch {
	case u >= 0xDC00 && u <= 0xDFFF:
		r.pos -= 6
		r.fail("a lone surrogate escape is not UTF-16")
		return false
	case u >= 0xD800 && u <= 0xDBFF:
		if r.pos+1 >= len(r.data) || r.data[r.pos] != '\\' || r.data[r.pos+1] != 'u' {
			r.pos -= 6
			r.fail("a lone surrogate escape is not UTF-16")
			return false
		}
		lo, ok := r.hex4()
		if !ok {
			return false
		}
		if lo < 0xDC00 || lo > 0xDFFF {
			r.pos -= 12
			r.fail("a lone surrogate escape is not UTF-16")
			return false
		}
		u = 0x10000 + (u-0xD800)<<10 + (lo - 0xDC00)
	}
	r.buf = utf8.AppendRune(r.buf, u)
	return true
}

// unescape is the character of the one-letter escape \c, or 0.
func unescape(c byte) byte {
	switch c {
	case '"', '\\', '/':
		return c
	case 'b':
		return '\b'
	case 'f':
		return '\f'
	case 'n':
		return '\n'
	case 'r':
		return '\r'
	case 't':
		return '\t'
	}
	return 0
}

// hex4 reads \uXXXX at r.pos.
func (r *JSONReader) hex4() (rune, bool) {
	if len(r.data)-r.pos < 6 {
		r.pos = len(r.data)
		r.fail("unexpected end of JSON input in a string")
		return 0, false
	}
	var u rune
	for _, c := range r.data[r.pos+2 : r.pos+6] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			r.fail(invalidChar(c, "in a \\u escape"))
			return 0, false
		}
		u = u<<4 | rune(c)
	}
	r.pos += 6
	return u, true
}

// number reads the number at r.pos and returns its text, and whether it is
// an integer (no fraction, no exponent).
func (r *JSONReader) number() (span []byte, integer, ok bool) {
	start := r.pos
	digits := func() int {
		n := 0
		for r.pos < len(r.data) && r.data[r.pos] >= '0' && r.data[r.pos] <= '9' {
			r.pos++
			n++
		}
		return n
	}
	at := func(c byte) bool {
		if r.pos < len(r.data) && r.data[r.pos] == c {
			r.pos++
			return true
		}
		return false
	}
	at('-')
	switch {
	case at('0'):
	case digits() == 0:
		r.fail("a number without digits")
		return nil, false, false
	}
	integer = true
	if at('.') {
		integer = false
		if digits() == 0 {
			r.fail("a number without digits after its decimal point")
			return nil, false, false
		}
	}
	if at('e') || at('E') {
		integer = false
		if !at('+') {
			at('-')
		}
		if digits() == 0 {
			r.fail("a number without digits in its exponent")
			return nil, false, false
		}
	}
	return r.data[start:r.pos], integer, true
}

// name reads a member's name and the colon after it; the name is valid until
// the next string is read.
func (r *JSONReader) name() ([]byte, bool) {
	if c := r.peek(); c != '"' {
		if c != 0 {
			r.fail(invalidChar(c, "where a member name should be"))
		}
		return nil, false
	}
	name, ok := r.text()
	if !ok {
		return nil, false
	}
	if c := r.peek(); c != ':' {
		if c != 0 {
			r.fail(invalidChar(c, "after a member name"))
		}
		return nil, false
	}
	r.pos++
	return name, true
}

// more moves to the next member or element of the innermost object or array
// (closed by end), reporting false when it ends.
func (r *JSONReader) more(end byte) bool {
	c := r.peek()
	if r.first {
		r.first = false
		if c == end {
			r.pos++
			return false
		}
		return c != 0
	}
	switch c {
	case end:
		r.pos++
		return false
	case ',':
		r.pos++
		return true
	case 0:
		return false
	}
	r.fail(invalidChar(c, fmt.Sprintf("after a value; want ',' or %q", end)))
	return false
}

// nameMark is where an object's names start in its reader's nameSet.
type nameMark struct{ spans, text int }

func (r *JSONReader) markNames() nameMark {
	if r.names == nil {
		return nameMark{}
	}
	return nameMark{len(r.names.spans), len(r.names.text)}
}

// addName keeps name, of the member at offset at, for its object's check.
// Both slices double as they grow (append grows a large one by a quarter),
// so that a body of many names allocates about twice what they hold.
func (r *JSONReader) addName(at int, name []byte) {
	if r.names == nil {
		r.names = &nameSet{}
	}
	n := r.names
	if len(n.text)+len(name) > cap(n.text) {
		n.text = slices.Grow(n.text, max(len(n.text), len(name)))
	}
	if len(n.spans) == cap(n.spans) {
		n.spans = slices.Grow(n.spans, max(len(n.spans), 8))
	}
	start := len(n.text)
	n.text = append(n.text, name...)
	n.spans = append(n.spans, memberName{int32(start), int32(len(n.text)), int32(at)})
}

// closeNames checks the names kept since m, those of an object that ends
// here, and forgets them. It reports false, with the syntax error of the
// first repeat in the body's order, when a name is there twice.
func (r *JSONReader) closeNames(m nameMark) bool {
	n := r.names
	if n == nil {
		return true
	}
	names := n.spans[m.spans:]
	text := func(s memberName) []byte { return n.text[s.start:s.end] }
	repeat := -1
	if len(names) <= smallObject {
		for i := 1; i < len(names) && repeat < 0; i++ {
			for j := range i {
				if bytes.Equal(text(names[i]), text(names[j])) {
					repeat = i
					break
				}
			}
		}
	} else {
		slices.SortFunc(names, func(a, b memberName) int {
			if c := bytes.Compare(text(a), text(b)); c != 0 {
				return c
			}
			return cmp.Compare(a.at, b.at)
		})
		for i := 1; i < len(names); i++ {
			if bytes.Equal(text(names[i-1]), text(names[i])) && (repeat < 0 || names[i].at < names[repeat].at) {
				repeat = i
			}
		}
	}
	if repeat >= 0 {
		r.repeated(int(names[repeat].at), text(names[repeat]))
	}
	n.spans, n.text = n.spans[:m.spans], n.text[:m.text]
	return repeat < 0
}

// smallObject is the most names an object's check compares pair by pair;
// a wider object's are sorted.
const smallObject = 16

// skip passes over the value at r.pos, checking its syntax and, when names,
// that no object in it repeats a name. It is iterative, with a bound on
// nesting that counts the objects and arrays open around the value.
func (r *JSONReader) skip(names bool) {
	var local [16]container
	open := local[:0]
	for {
		// A value.
		switch c := r.peek(); c {
		case 0:
			return
		case '{', '[':
			if r.depth+len(open) == maxJSONDepth {
				r.fail(tooDeep)
				return
			}
			k, end := container{}, byte(']')
			if c == '{' {
				k, end = container{object: true, names: r.markNames()}, '}'
			}
			r.pos++
			r.first = true
			open = append(open, k)
			if r.more(end) {
				if k.object && !r.member(names) {
					return
				}
				continue
			}
			open = open[:len(open)-1]
			if k.object && names && !r.closeNames(k.names) {
				return
			}
		case '"':
			if _, ok := r.text(); !ok {
				return
			}
		case 't':
			r.literal("true")
		case 'f':
			r.literal("false")
		case 'n':
			r.literal("null")
		default:
			if c != '-' && (c < '0' || c > '9') {
				r.fail(invalidChar(c, "at the start of a value"))
				return
			}
			r.number()
		}
		// After a value: close what ends here, then go on to the next one.
		for {
			if r.err != nil || len(open) == 0 {
				return
			}
			k := open[len(open)-1]
			end := byte(']')
			if k.object {
				end = '}'
			}
			if !r.more(end) {
				open = open[:len(open)-1]
				if k.object && names && !r.closeNames(k.names) {
					return
				}
				continue
			}
			if k.object && !r.member(names) {
				return
			}
			break
		}
	}
}

// container is an array or object open in skip.
type container struct {
	object bool
	names  nameMark // where an object's names start
}

// member reads the name of a member of a skipped object, and keeps it when
// names.
func (r *JSONReader) member(names bool) bool {
	at := r.space()
	name, ok := r.name()
	if !ok {
		return false
	}
	if names {
		r.addName(at, name)
	}
	return true
}
