package wire

import (
	"encoding/base64"
	"strconv"
	"time"

	"github.com/lily-mq/lily/internal/membername"
)

// JSONReader reads one JSON value (RFC 8259) from a message body, for
// generated extractors: they read objects member by member (JSONObject) and
// values by type, with no reflection and no intermediate tree. It follows the
// defaults of Go's encoding/json/v2 rather than v1's: invalid UTF-8 and lone
// surrogate escapes are errors, a name repeated in one object is an error, and
// only integers within int64 are integers.
//
// Errors come in two kinds. A syntax error (which includes invalid UTF-8, a
// repeated name in a member the schema does not know, and arrays and objects
// nested deeper than 1,000, counted from the body's root, which is 1 deep)
// stops the reader and is reported by End with its byte offset,
// before any other problem; but a repeated unknown name is found only as its
// object closes, so a problem of a known member of that object comes first.
// A value of the wrong JSON type, or a problem at a known member, is a
// *FieldError with a path relative to the value being read.
type JSONReader struct {
	data []byte
	pos  int
	// depth is how many objects and arrays the reads have opened and not yet
	// closed (Object, JSONList, JSONMap), so that a skipped value's nesting
	// counts from the body's root.
	depth int
	// first is true while the object or array just opened has had no member
	// or element read yet: reads are strictly nested, so one flag serves all.
	first bool
	err   *jsonSyntaxError
	// buf holds the unescaped text of the last string that had escapes.
	buf []byte
	// names are the names met so far in each open object whose repeated
	// names are looked for (its members the schema does not know, or every
	// member of a skipped one); nil until the first. An object's follow its
	// parent's, and go when it closes: at most a copy of the names open at
	// once, not of every name in the body.
	names *nameSet
}

// nameSet holds names: their text, unescaped, and a span of it each.
type nameSet struct {
	spans []memberName
	text  []byte
}

// memberName is a name met in an open object: text[start:end] of its
// nameSet, of the member at offset at.
type memberName struct{ start, end, at int32 }

// maxJSONDepth bounds the nesting of arrays and objects in a body, counted
// from its root (the root object is 1 deep), so that a hostile body cannot
// exhaust memory or stack. The schema bounds the nesting of what generated
// code reads (32 levels); a skipped value nests within what is left.
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
// reported as such; a name repeated in an object the read did not finish is
// not looked for then), then err, then data after the value.
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
	// Reading stops: at the end of the body, peek's inlined test fails
	// without looking at the error.
	r.pos = len(r.data)
	return r.err
}

// repeated records the syntax error of a repeated name that starts at offset.
func (r *JSONReader) repeated(offset int, name []byte) error {
	return r.failAt(offset, "repeated member name "+membername.Quote(name))
}

// space skips whitespace and returns the offset of the next byte. Its first
// test, inlined, is all that a body without whitespace needs.
func (r *JSONReader) space() int {
	if r.pos < len(r.data) && r.data[r.pos] > ' ' {
		return r.pos
	}
	return r.spaces()
}

func (r *JSONReader) spaces() int {
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
// (also at the end of the body). Inlined, its first test answers for a token
// that starts at once with a byte above the space (a syntax error has moved
// the reader to the end).
func (r *JSONReader) peek() (c byte) {
	// Written to stay within the inliner's budget.
	if r.pos < len(r.data) {
		c = r.data[r.pos]
	}
	if c > ' ' {
		return
	}
	return r.peekSpace()
}

func (r *JSONReader) peekSpace() byte {
	if r.err != nil {
		return 0
	}
	if r.space() == len(r.data) {
		r.fail("unexpected end of JSON input")
		return 0
	}
	c := r.data[r.pos]
	if c == 0 {
		// 0 says "stop" to every caller: a NUL byte must be the error it is.
		r.fail(invalidChar(c, "in JSON"))
	}
	return c
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

// invalidChar names the byte c that JSON does not allow where it is. A byte
// past ASCII is named as itself, '\xef', not as the rune of its value, which
// would be written back as two other bytes.
func invalidChar(c byte, where string) string {
	quoted := strconv.QuoteRune(rune(c))
	if c >= 0x80 {
		quoted = `'\x` + strconv.FormatUint(uint64(c), 16) + `'`
	}
	return "invalid character " + quoted + " " + where
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
		return 0, &FieldError{Problem: "not an integer (a fraction or exponent)"}
	}
	neg := span[0] == '-'
	if neg {
		span = span[1:]
	}
	var n uint64
	if len(span) <= 18 {
		// Eighteen digits are below 10^18: no int64 overflows.
		for _, d := range span {
			n = n*10 + uint64(d-'0')
		}
		if neg {
			return -int64(n), nil
		}
		return int64(n), nil
	}
	limit := uint64(1<<63 - 1)
	if neg {
		limit++
	}
	for _, d := range span {
		if n > (limit-uint64(d-'0'))/10 {
			return 0, &FieldError{Problem: "beyond int64"}
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
// is refused, as it would be an infinity.
func (r *JSONReader) Float() (float64, error) {
	span, _, err := r.numberText()
	if err != nil {
		return 0, err
	}
	f, err := strconv.ParseFloat(string(span), 64)
	if err != nil {
		return 0, &FieldError{Problem: "beyond float64's range"}
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

// Raw reads any value and returns it as written, not a copy: its syntax is
// checked, and no object in it may repeat a name.
func (r *JSONReader) Raw() ([]byte, error) {
	start := r.space()
	r.skip(true)
	if r.err != nil {
		return nil, r.err
	}
	return r.data[start:r.pos], nil
}
