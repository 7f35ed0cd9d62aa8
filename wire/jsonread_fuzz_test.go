package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"testing"
	"unicode/utf8"
)

// FuzzJSONReader holds the reader to encoding/json (v1): a body is valid for
// one exactly when it is for the other, unless one of the stricter rules the
// reader follows refuses it (invalid UTF-8, a lone surrogate escape, a
// repeated name, nesting past maxJSONDepth), each found here independently;
// and the values agree, as a whole (ParseJSON) and read by type.
func FuzzJSONReader(f *testing.F) {
	for _, seed := range []string{
		`{"a":[1,-2.5e3,"s\u00e9\ud83d\ude00",true,false,null,{}],"b":{"c":[]}}`,
		`{"a":1,"a":2}`, `{"a":{"b":1},"c":{"b":2}}`, `{"a":1,"A":2}`,
		`"\ud800"`, `"\udc00\ud800"`, "\"\xff\"", "\"\xed\xa0\x80\"", `"\u0000\/"`,
		`9223372036854775807`, `-9223372036854775809`, `1.0`, `1e400`, `-0`, `01`, `1.`, `.5`,
		`[1,]`, `{"a" 1}`, " \t\n\r[ ] ", "[]\f", `true false`, `nul`, ``,
		`[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]`,
		`{"a\u0062":"c\u0064","q\u0072":{"s\u0074":1}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, err := ParseJSON(body)
		var fe *FieldError
		if err != nil && (!errors.As(err, &fe) || fe.Path != "") {
			t.Fatalf("%q: %v is not a *FieldError without a path", body, err)
		}
		strict := !utf8.Valid(body) || loneSurrogate(body) || repeatedName(body) || depth(body) > maxJSONDepth
		valid := json.Valid(body)
		switch {
		case err == nil && (!valid || strict):
			t.Fatalf("%q: accepted as %#v, but valid %v and breaks a strict rule %v", body, got, valid, strict)
		case err != nil && valid && !strict:
			t.Fatalf("%q: refused (%v), but encoding/json accepts it", body, err)
		case err != nil:
			return
		}
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber()
		var want any
		if err := dec.Decode(&want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: %#v, want %#v", body, got, want)
		}
		// Each typed read agrees with encoding/json decoding into the type.
		typed(t, body, func(r *JSONReader) (any, error) { return r.String() }, new(string))
		typed(t, body, func(r *JSONReader) (any, error) { return r.Int() }, new(int64))
		typed(t, body, func(r *JSONReader) (any, error) { return r.Float() }, new(float64))
		typed(t, body, func(r *JSONReader) (any, error) { return r.Bool() }, new(bool))
		// Skipping the body as an unknown member accepts it, unless the
		// object around it takes it past the bound on nesting.
		wrapped := append(append([]byte(`{"u":`), body...), '}')
		r := NewJSONReader(wrapped)
		o := r.Object(NewJSONFields())
		for o.Next(r) {
		}
		if err := r.End(o.End()); (err != nil) != (depth(body) == maxJSONDepth) {
			t.Fatalf("%q skipped: %v", body, err)
		}
	})
}

// typed reads body, valid JSON, with read, and checks that it succeeds
// exactly when encoding/json decodes body into *want (a null aside, which
// encoding/json leaves alone), with the same value.
func typed[T any](t *testing.T, body []byte, read func(*JSONReader) (any, error), want *T) {
	t.Helper()
	r := NewJSONReader(body)
	got, err := read(r)
	err = r.End(err)
	jerr := json.Unmarshal(body, want)
	if bytes.Equal(bytes.TrimSpace(body), []byte("null")) {
		jerr = errors.New("null")
	}
	switch {
	case (err == nil) != (jerr == nil):
		t.Fatalf("%q as %T: reader %v, encoding/json %v", body, *want, err, jerr)
	case err == nil && !reflect.DeepEqual(got, any(*want)):
		t.Fatalf("%q as %T: reader %#v, encoding/json %#v", body, *want, got, *want)
	}
}

// loneSurrogate reports whether a string of body, valid JSON, has a \u
// escape of half a surrogate pair without its other half.
func loneSurrogate(body []byte) bool {
	inString := false
	high := false // the last escape read was a high surrogate
	for i := 0; i < len(body); i++ {
		c := body[i]
		switch {
		case !inString:
			inString = c == '"'
		case c == '"':
			if high {
				return true
			}
			inString = false
		case c == '\\' && i+1 < len(body) && body[i+1] == 'u' && i+5 < len(body):
			var u uint64
			for _, h := range body[i+2 : i+6] {
				u = u<<4 | uint64(bytes.IndexByte([]byte("0123456789abcdef"), h|0x20))
			}
			// A low half needs a high one before it; a high one, a low one after it.
			if low := u >= 0xDC00 && u <= 0xDFFF; high != low {
				return true
			}
			high = u >= 0xD800 && u <= 0xDBFF
			i += 5
		case high:
			return true
		case c == '\\':
			i++
		}
	}
	return high
}

// repeatedName reports whether an object in body, valid JSON, has a name
// twice, by encoding/json's tokens.
func repeatedName(body []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(body))
	var names []map[string]bool // per open container: an object's names, or nil
	expectName := func() bool { return len(names) > 0 && names[len(names)-1] != nil }
	for {
		// In an object, tokens alternate: name, value; a value may open a
		// container, whose end makes the next token a name again.
		if expectName() && dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return false
			}
			name, _ := tok.(string)
			if names[len(names)-1][name] {
				return true
			}
			names[len(names)-1][name] = true
		}
		tok, err := dec.Token()
		if err == io.EOF || err != nil {
			return false
		}
		switch tok {
		case json.Delim('{'):
			names = append(names, map[string]bool{})
		case json.Delim('['):
			names = append(names, nil)
		case json.Delim('}'), json.Delim(']'):
			names = names[:len(names)-1]
		}
	}
}

// depth is the deepest nesting of arrays and objects in body, valid JSON.
func depth(body []byte) int {
	dec := json.NewDecoder(bytes.NewReader(body))
	n, deepest := 0, 0
	for {
		tok, err := dec.Token()
		if err != nil {
			return deepest
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			n++
			deepest = max(deepest, n)
		case json.Delim('}'), json.Delim(']'):
			n--
		}
	}
}
