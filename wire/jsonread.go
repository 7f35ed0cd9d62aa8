package wire

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"
)

// JSONReader reads one JSON value (RFC 8259) from a message body, for
// generated extractors: they read objects member by member (JSONObject) and
// values by type, with no reflection and no intermediate tree. It follows the
// defaults of Go's encoding/json/v2 rather than v1's: invalid UTF-8 and lone
// surrogate escapes are errors, a name repeated in one object is an error, and
// only integers within int64 are integers.
//
// Errors come in two kinds. A syntax error (which includes invalid UTF-8, a
// repeated name in a member the schema does not know, and nesting deeper than
// maxJSONDepth) stops the reader and is reported by End with its byte offset.
// A value of the wrong JSON type, or a problem at a known member, is a
// *FieldError with a path relative to the value being read.
type JSONReader struct {
	data []byte
	pos  int
	// first is true while the object or array just opened has had no member
	// or element read yet: reads are strictly nested, so one flag serves all.
	first bool
	err   *jsonSyntaxError
	// buf holds the unescaped text of the last string that had escapes.
	buf []byte
	// unknown holds the names of members the schema does not know, by the
	// offset of their object, so that a repeated one is found.
	unknown map[memberKey]struct{}
}

type memberKey struct {
	object int
	name   string
}

// maxJSONDepth bounds the nesting of arrays and objects that are skipped or
// parsed generically, so that a hostile body cannot exhaust memory or stack.
// The schema bounds the nesting of what generated code reads.
const maxJSONDepth = 1000

var tooDeep = "nested deeper than " + strconv.Itoa(maxJSONDepth)

type jsonSyntaxError struct {
	offset int
	what   string
}

func (e *jsonSyntaxError) Error() string {
	return "invalid JSON at byte " + strconv.Itoa(e.offset) + ": " + e.what
}

// NewJSONReader returns a reader of body, which must hold one JSON value.
func NewJSONReader(body []byte) *JSONReader { return &JSONReader{data: body} }

// End finishes reading the body; err is what reading its value returned. It
// returns, as a *FieldError: a syntax error anywhere in the body first (also
// after a value that failed its check, so that a malformed body is always
// reported as such), then err, then data after the value.
func (r *JSONReader) End(err error) error {
	if r.err == nil && err != nil {
		v := JSONReader{data: r.data}
		v.skip(false)
		v.end()
		r.err = v.err
	}
	if r.err == nil && err == nil {
		r.end()
	}
	if r.err != nil {
		return &FieldError{Problem: r.err.Error()}
	}
	return err
}

// end checks that only whitespace follows the value.
func (r *JSONReader) end() {
	if r.err == nil && r.space() < len(r.data) {
		r.fail("data after the top-level value")
	}
}

// fail records the first syntax error, at the current offset, and returns it.
func (r *JSONReader) fail(what string) error { return r.failAt(r.pos, what) }

func (r *JSONReader) failAt(offset int, what string) error {
	if r.err == nil {
		r.err = &jsonSyntaxError{offset: offset, what: what}
	}
	return r.err
}

// repeated records the syntax error of a repeated name that starts at offset.
func (r *JSONReader) repeated(offset int, name []byte) error {
	return r.failAt(offset, "repeated member name "+quoteBounded(name))
}

// space skips whitespace and returns the offset of the next byte.
func (r *JSONReader) space() int {
	for r.pos < len(r.data) {
		switch r.data[r.pos] {
		case ' ', '\t', '\n', '\r':
			r.pos++
		default:
			return r.pos
		}
	}
	return r.pos
}

// peek returns the first byte of the next token, or 0 after a syntax error
// (also at the end of the body).
func (r *JSONReader) peek() byte {
	if r.err != nil {
		return 0
	}
	if r.space() == len(r.data) {
		r.fail("unexpected end of JSON input")
		return 0
	}
	return r.data[r.pos]
}

// kindError is the error of a value of the wrong type that starts with c: a
// *FieldError naming its JSON kind, or a syntax error if no value starts so.
func (r *JSONReader) kindError(c byte) error {
	kind := ""
	switch {
	case c == 0:
		return r.err
	case c == '"':
		kind = "string"
	case c == '{':
		kind = "object"
	case c == '[':
		kind = "array"
	case c == 't' || c == 'f':
		kind = "bool"
	case c == 'n':
		kind = "null"
	case c == '-' || c >= '0' && c <= '9':
		kind = "number"
	default:
		return r.fail(invalidChar(c, "at the start of a value"))
	}
	return &FieldError{Problem: "unexpected JSON " + kind}
}

func invalidChar(c byte, where string) string {
	return "invalid character " + strconv.QuoteRune(rune(c)) + " " + where
}

// literal consumes word (true, false or null), which must come next.
func (r *JSONReader) literal(word string) bool {
	if len(r.data)-r.pos >= len(word) && string(r.data[r.pos:r.pos+len(word)]) == word {
		r.pos += len(word)
		return true
	}
	r.fail("invalid literal; want " + word)
	return false
}

// null consumes a null if one comes next.
func (r *JSONReader) null() bool {
	return r.peek() == 'n' && r.literal("null")
}

// String reads a string.
func (r *JSONReader) String() (string, error) {
	t, err := r.stringText()
	return string(t), err
}

// stringText reads a string's text, valid until the next string is read.
func (r *JSONReader) stringText() ([]byte, error) {
	if c := r.peek(); c != '"' {
		return nil, r.kindError(c)
	}
	t, ok := r.text()
	if !ok {
		return nil, r.err
	}
	return t, nil
}

// Int reads an integer: a number without fraction or exponent, within int64.
func (r *JSONReader) Int() (int64, error) {
	span, integer, err := r.numberText()
	if err != nil {
		return 0, err
	}
	if !integer {
		return 0, &FieldError{Problem: "unexpected JSON number"}
	}
	neg := span[0] == '-'
	if neg {
		span = span[1:]
	}
	limit := uint64(1<<63 - 1)
	if neg {
		limit++
	}
	var n uint64
	for _, d := range span {
		if n > (limit-uint64(d-'0'))/10 {
			return 0, &FieldError{Problem: "unexpected JSON number"}
		}
		n = n*10 + uint64(d-'0')
	}
	if neg {
		return int64(-n), nil
	}
	return int64(n), nil
}

// numberText reads a number's text, and whether it is an integer.
func (r *JSONReader) numberText() ([]byte, bool, error) {
	c := r.peek()
	if c != '-' && (c < '0' || c > '9') {
		return nil, false, r.kindError(c)
	}
	span, integer, ok := r.number()
	if !ok {
		return nil, false, r.err
	}
	return span, integer, nil
}

// Float reads a number as the nearest float64; one beyond float64's range
// is of the wrong type.
func (r *JSONReader) Float() (float64, error) {
	span, _, err := r.numberText()
	if err != nil {
		return 0, err
	}
	f, err := strconv.ParseFloat(string(span), 64)
	if err != nil {
		return 0, &FieldError{Problem: "unexpected JSON number"}
	}
	return f, nil
}

// Bool reads true or false.
func (r *JSONReader) Bool() (bool, error) {
	switch c := r.peek(); c {
	case 't':
		return true, r.check(r.literal("true"))
	case 'f':
		return false, r.check(r.literal("false"))
	default:
		return false, r.kindError(c)
	}
}

// check returns the syntax error unless ok.
func (r *JSONReader) check(ok bool) error {
	if ok {
		return nil
	}
	return r.err
}

// Time reads a string that holds an RFC 3339 time, as ParseTime reads it.
func (r *JSONReader) Time() (time.Time, error) {
	t, err := r.stringText()
	if err != nil {
		return time.Time{}, err
	}
	v, ok := ParseTime(string(t))
	if !ok {
		return time.Time{}, &FieldError{Problem: "not an RFC 3339 time"}
	}
	return v, nil
}

// Bytes reads a string that holds standard base64 (with padding), as
// encoding/json reads a []byte.
func (r *JSONReader) Bytes() ([]byte, error) {
	t, err := r.stringText()
	if err != nil {
		return nil, err
	}
	out := make([]byte, base64.StdEncoding.DecodedLen(len(t)))
	n, err := base64.StdEncoding.Decode(out, t)
	if err != nil {
		return nil, &FieldError{Problem: "not base64"}
	}
	return out[:n], nil
}

// text reads the string at r.pos (its opening quote) and returns its text,
// unescaped: a slice of the body, or of r.buf when it had escapes, valid
// until the next string is read.
func (r *JSONReader) text() ([]byte, bool) {
	r.pos++
	start := r.pos // the first byte not yet copied to r.buf, when escaped
	escaped := false
	for {
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

// seenUnknown records name, a member the schema does not know in the object
// that starts at object, and reports whether it was there already.
func (r *JSONReader) seenUnknown(object int, name []byte) bool {
	if r.unknown == nil {
		r.unknown = map[memberKey]struct{}{}
	}
	k := memberKey{object, string(name)}
	if _, ok := r.unknown[k]; ok {
		return true
	}
	r.unknown[k] = struct{}{}
	return false
}

// skip passes over the value at r.pos, checking its syntax and, when names,
// that no object in it repeats a name. It is iterative, with a bound on
// nesting.
func (r *JSONReader) skip(names bool) {
	var local [16]int
	open := local[:0] // per open container: the offset of an object, or -1 for an array
	for {
		// A value.
		switch c := r.peek(); c {
		case 0:
			return
		case '{', '[':
			if len(open) == maxJSONDepth {
				r.fail(tooDeep)
				return
			}
			kind, end := -1, byte(']')
			if c == '{' {
				kind, end = r.pos, '}'
			}
			r.pos++
			r.first = true
			open = append(open, kind)
			if r.more(end) {
				if kind >= 0 && !r.member(kind, names) {
					return
				}
				continue
			}
			open = open[:len(open)-1]
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
			kind := open[len(open)-1]
			end := byte(']')
			if kind >= 0 {
				end = '}'
			}
			if !r.more(end) {
				open = open[:len(open)-1]
				continue
			}
			if kind >= 0 && !r.member(kind, names) {
				return
			}
			break
		}
	}
}

// member reads the name of a member of the skipped object at object.
func (r *JSONReader) member(object int, names bool) bool {
	at := r.space()
	name, ok := r.name()
	if !ok {
		return false
	}
	if names && r.seenUnknown(object, name) {
		r.repeated(at, name)
		return false
	}
	return true
}

// quoteBounded quotes a name from a body for an error, shortened to 64 bytes.
func quoteBounded(name []byte) string {
	if len(name) > 64 {
		return strconv.Quote(string(name[:64])) + "…"
	}
	return strconv.Quote(string(name))
}
