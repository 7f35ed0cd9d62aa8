package wire

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestJSONReaderScalars(t *testing.T) {
	for _, c := range []struct {
		body string
		read func(*JSONReader) (any, error)
		want any
		err  string
	}{
		{`"a\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00é"`, str, "a\"\\/\b\f\n\r\té😀é", ""},
		{` "plain" `, str, "plain", ""},
		{`"\ud83d"`, str, nil, "invalid JSON at byte 1: a lone surrogate escape is not UTF-16"},
		{`"\ud83d\u0041"`, str, nil, "invalid JSON at byte 1: a lone surrogate escape is not UTF-16"},
		{`"\ude00"`, str, nil, "invalid JSON at byte 1: a lone surrogate escape is not UTF-16"},
		{"\"\xff\"", str, nil, "invalid JSON at byte 1: invalid UTF-8 in a string"},
		{"\"\xed\xa0\x80\"", str, nil, "invalid JSON at byte 1: invalid UTF-8 in a string"}, // a surrogate in UTF-8
		{"\"a\nb\"", str, nil, `invalid JSON at byte 2: invalid character '\n' in a string`},
		{`"\x"`, str, nil, `invalid JSON at byte 2: invalid character 'x' in a string escape`},
		{`"\u12g4"`, str, nil, `invalid JSON at byte 1: invalid character 'g' in a \u escape`},
		{`"abc`, str, nil, "invalid JSON at byte 4: unexpected end of JSON input in a string"},
		{`1`, str, nil, "unexpected JSON number"},
		{`-9223372036854775808`, integer, int64(math.MinInt64), ""},
		{`9223372036854775807`, integer, int64(math.MaxInt64), ""},
		{`9223372036854775808`, integer, nil, "beyond int64"},
		{`-9223372036854775809`, integer, nil, "beyond int64"},
		{`0`, integer, int64(0), ""},
		{`-0`, integer, int64(0), ""},
		{`1.0`, integer, nil, "not an integer (a fraction or exponent)"},
		{`1e2`, integer, nil, "not an integer (a fraction or exponent)"},
		{`1e0`, integer, nil, "not an integer (a fraction or exponent)"},
		{`12345678901234567890.5`, integer, nil, "not an integer (a fraction or exponent)"},
		{`01`, integer, nil, "invalid JSON at byte 1: data after the top-level value"},
		{`-`, integer, nil, "invalid JSON at byte 1: a number without digits"},
		{`"1"`, integer, nil, "unexpected JSON string"},
		{`1.5e-3`, float, 0.0015, ""},
		{`1E+2`, float, 100.0, ""},
		{`1.`, float, nil, "invalid JSON at byte 2: a number without digits after its decimal point"},
		{`1e`, float, nil, "invalid JSON at byte 2: a number without digits in its exponent"},
		{`1e400`, float, nil, "beyond float64's range"},
		{`-1e400`, float, nil, "beyond float64's range"},
		{`1e-400`, float, 0.0, ""},
		{`true`, boolean, true, ""},
		{`false`, boolean, false, ""},
		{`tru`, boolean, nil, "invalid JSON at byte 0: invalid literal; want true"},
		{`null`, boolean, nil, "unexpected JSON null"},
		{`[]`, boolean, nil, "unexpected JSON array"},
		{`{}`, boolean, nil, "unexpected JSON object"},
		{`x`, boolean, nil, `invalid JSON at byte 0: invalid character 'x' at the start of a value`},
		{"\xef\xbb\xbftrue", boolean, nil, `invalid JSON at byte 0: invalid character '\xef' at the start of a value`},
		{``, boolean, nil, "invalid JSON at byte 0: unexpected end of JSON input"},
		{`"2026-12-02T10:00:00Z"`, tm, time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC), ""},
		{`"2026-12-02 10:00:00Z"`, tm, nil, "not an RFC 3339 time"},
		{`"AAEC"`, blob, []byte{0, 1, 2}, ""},
		{`""`, blob, []byte{}, ""},
		{`"AAE"`, blob, nil, "not base64"},
		{"\t\r\n true \n", boolean, true, ""},
		{"true\f", boolean, nil, `invalid JSON at byte 4: data after the top-level value`},
		{`true false`, boolean, nil, "invalid JSON at byte 5: data after the top-level value"},
	} {
		r := NewJSONReader([]byte(c.body))
		v, err := c.read(r)
		err = r.End(err)
		if errText(err) != prefixed(c.err) {
			t.Errorf("%q: error %q, want %q", c.body, errText(err), prefixed(c.err))
		}
		if err == nil {
			if tv, ok := v.(time.Time); ok && tv.Equal(c.want.(time.Time)) {
				continue
			}
			if !reflect.DeepEqual(v, c.want) {
				t.Errorf("%q: %#v, want %#v", c.body, v, c.want)
			}
		}
	}
}

func prefixed(problem string) string {
	if problem == "" {
		return ""
	}
	return "payload: " + problem
}

func str(r *JSONReader) (any, error)     { return r.String() }
func integer(r *JSONReader) (any, error) { return r.Int() }
func float(r *JSONReader) (any, error)   { return r.Float() }
func boolean(r *JSONReader) (any, error) { return r.Bool() }
func tm(r *JSONReader) (any, error)      { return r.Time() }
func blob(r *JSONReader) (any, error)    { return r.Bytes() }

// point is what a generated readJSON would read: x is required, label
// optional, tags a map and items a list of at most 2 each, at required but
// may be null.
type point struct {
	X     int64
	Label *string
	Tags  map[string]int64
	Items []point
	AtSet bool
}

var pointFields = NewJSONFields(
	JSONField{Name: "x", Required: true},
	JSONField{Name: "label"},
	JSONField{Name: "tags"},
	JSONField{Name: "items"},
	JSONField{Name: "at", Required: true, Nullable: true},
)

func (p *point) readJSON(r *JSONReader) error {
	o := r.Object(pointFields)
	for o.Next(r) {
		var err error
		switch o.Member() {
		case 0:
			p.X, err = r.Int()
			err = at("x", err)
		case 1:
			var s string
			s, err = r.String()
			p.Label = &s
			err = at("label", err)
		case 2:
			p.Tags, err = JSONMap(r, 2, func(v *int64) (err error) {
				*v, err = r.Int()
				return err
			})
			err = at("tags", err)
		case 3:
			p.Items, err = JSONList(r, 2, func(item *point) error { return item.readJSON(r) })
			err = at("items", err)
		case 4:
			p.AtSet, err = r.Bool()
			err = at("at", err)
		}
		if err != nil {
			return err
		}
	}
	return o.End()
}

func at(path string, err error) error {
	if err == nil {
		return nil
	}
	return At(path, err)
}

func TestJSONObject(t *testing.T) {
	for _, c := range []struct{ body, want string }{
		{`{"x":1,"at":null}`, `{X:1 Label:<nil> Tags:map[] Items:[] AtSet:false}`},
		{`null`, `field x: required`},
		{`{"x":1}`, `field at: required`},
		{`{"at":true}`, `field x: required`},
		{`{"x":null,"at":true}`, `field x: required`},
		{`{"X":1,"at":true}`, `field x: required`},
		{`{"x":1,"at":true,"x":2}`, `field x: repeated`},
		{`{"x":1,"x":null,"at":true}`, `field x: repeated`},
		{`{"x":1,"at":true,"u":1,"v":{"u":1},"u":2}`, `payload: invalid JSON at byte 35: repeated member name "u"`},
		{`{"x":1,"at":true,"u":[{"a":1,"b":[],"a":2}]}`, `payload: invalid JSON at byte 36: repeated member name "a"`},
		{`{"x":1,"at":true,"u":[{"a":1},{"a":2}],"v":{"a":{"a":1}}}`, `{X:1 Label:<nil> Tags:map[] Items:[] AtSet:true}`},
		{`{"x":"1","at":true}`, `field x: unexpected JSON string`},
		{`{"x":1,"at":true,"tags":{"a":1,"b":2}}`, `{X:1 Label:<nil> Tags:map[a:1 b:2] Items:[] AtSet:true}`},
		{`{"x":1,"at":true,"tags":{"a":1,"a":2}}`, `field tags["a"]: repeated`},
		{`{"x":1,"at":true,"tags":{"a\n":null}}`, `field tags["a\n"]: required`},
		{`{"x":1,"at":true,"tags":{"a":"1"}}`, `field tags["a"]: unexpected JSON string`},
		// A member name is the producer's, of any length: the path bounds it.
		{`{"x":1,"at":true,"tags":{"` + strings.Repeat("k", 100) + `":"1"}}`, `field tags["` + strings.Repeat("k", 64) + `"…]: unexpected JSON string`},
		{`{"x":1,"at":true,"tags":[]}`, `field tags: unexpected JSON array`},
		{`{"x":1,"at":true,"items":[{"x":2,"at":null},{"x":3,"at":false,"items":[{"at":null}]}]}`, `field items[1].items[0].x: required`},
		{`{"x":1,"at":true,"items":[null]}`, `field items[0]: required`},
		{`{"x":1,"at":true,"items":[1]}`, `field items[0]: unexpected JSON number`},
		{`{"x":1,"at":true,"items":[]}`, `{X:1 Label:<nil> Tags:map[] Items:[] AtSet:true}`},
		{`{"x":1,"at":true,"tags":{"a":1,"b":2,"c":"not read"}}`, `field tags: more than 2 items`},
		{`{"x":1,"at":true,"items":[{"x":1,"at":null},{"x":2,"at":null},{"not":"read"}]}`, `field items: more than 2 items`},
		{`{"x":1,"at":true,"items":[{"x":1,"at":null},{"at":null},{"x":3,"at":null}]}`, `field items[1].x: required`},
		{`{"x":1,"at":true,"items":[{"x":1,"at":null},{"x":2,"at":null},{},]}`, `payload: invalid JSON at byte 65: invalid character ']' at the start of a value`},
		{`{"x":"bad","at":true} ]`, `payload: invalid JSON at byte 22: data after the top-level value`},
		{`{"x":"bad","at":tru}`, `payload: invalid JSON at byte 16: invalid literal; want true`},
		{`{"x":1,"at":true,}`, `payload: invalid JSON at byte 17: invalid character '}' where a member name should be`},
		{`{"x":1 "at":true}`, `payload: invalid JSON at byte 7: invalid character '"' after a value; want ',' or '}'`},
		{`{"x" 1}`, `payload: invalid JSON at byte 5: invalid character '1' after a member name`},
		{`{"x":1,"at":true,"items":[{"x":1,"at":null},]}`, `payload: invalid JSON at byte 44: invalid character ']' at the start of a value`},
		{`{"x":1,"at":true,"items":[{"x":1,"at":null}`, `payload: invalid JSON at byte 43: unexpected end of JSON input`},
		{`[]`, `payload: unexpected JSON array`},
	} {
		var p point
		r := NewJSONReader([]byte(c.body))
		got := errText(r.End(p.readJSON(r)))
		if got == "" {
			if p.Tags == nil {
				p.Tags = map[string]int64{}
			}
			if p.Items == nil {
				p.Items = []point{}
			}
			got = strings.ReplaceAll(fmt.Sprintf("%+v", p), "Label:0x", "Label:")
		}
		if got != c.want {
			t.Errorf("%s: %s, want %s", c.body, got, c.want)
		}
	}
}

// A reader read through as generated code reads (objects, and a list whose
// element reader uses the caller's reader) stays on the stack: reading a
// body without strings allocates the list's array and nothing else.
func TestReaderStaysOnStack(t *testing.T) {
	body := []byte(`{"x":1,"at":true,"items":[{"x":2,"at":null},{"x":3,"at":false}]}`)
	allocs := testing.AllocsPerRun(100, func() {
		var p point
		r := NewJSONReader(body)
		if err := r.End(p.readJSON(r)); err != nil || len(p.Items) != 2 {
			t.Fatal(err, p)
		}
	})
	if allocs != 1 {
		t.Errorf("%v allocations, want 1: the list's", allocs)
	}
}

// One item is "1 item", as the schema's checker says it.
func TestJSONListOfOne(t *testing.T) {
	r := NewJSONReader([]byte(`[1,2]`))
	_, err := JSONList(r, 1, func(v *int64) (err error) { *v, err = r.Int(); return err })
	if fe, ok := err.(*FieldError); !ok || fe.Problem != "more than 1 item" {
		t.Errorf("%v", err)
	}
}

// TestJSONObjectManyFields covers objects found by a map (more than
// scanFields members) and those with members past 64.
func TestJSONObjectManyFields(t *testing.T) {
	for _, n := range []int{scanFields + 1, 64, 65, 130} {
		fields := make([]JSONField, n)
		for i := range fields {
			fields[i] = JSONField{Name: fmt.Sprintf("f%d", i), Required: i%2 == 1}
		}
		f := NewJSONFields(fields...)
		var b strings.Builder
		b.WriteString("{")
		for i := n - 1; i >= 0; i-- {
			if i != n-2 {
				fmt.Fprintf(&b, `"f%d":%d,`, i, i)
			}
		}
		fmt.Fprintf(&b, `"f%d":0}`, n-1)
		r := NewJSONReader([]byte(b.String()))
		o := r.Object(f)
		for o.Next(r) {
			v, err := r.Int()
			if err != nil || int(v) != o.Member() {
				t.Fatalf("%d fields: member %d read %d, %v", n, o.Member(), v, err)
			}
		}
		want := fmt.Sprintf("field f%d: repeated", n-1)
		if err := o.End(); errText(err) != want {
			t.Errorf("%d fields: %v, want %s", n, err, want)
		}
		// Without the repeat, the missing required member is reported.
		r = NewJSONReader([]byte(strings.Replace(b.String(), fmt.Sprintf(`,"f%d":0}`, n-1), "}", 1)))
		o = r.Object(f)
		for o.Next(r) {
			if _, err := r.Int(); err != nil {
				t.Fatal(err)
			}
		}
		want = ""
		if (n-2)%2 == 1 {
			want = fmt.Sprintf("field f%d: required", n-2)
		}
		if err := r.End(o.End()); errText(err) != want {
			t.Errorf("%d fields, f%d missing: %v, want %q", n, n-2, err, want)
		}
	}
}

func TestJSONDepth(t *testing.T) {
	for _, c := range []struct {
		depth int
		err   string
	}{
		{maxJSONDepth, ""},
		{maxJSONDepth + 1, "payload: invalid JSON at byte 1000: nested deeper than 1000"},
		{100000, "payload: invalid JSON at byte 1000: nested deeper than 1000"},
	} {
		body := strings.Repeat("[", c.depth) + strings.Repeat("]", c.depth)
		_, err := ParseJSON([]byte(body))
		if errText(err) != c.err {
			t.Errorf("ParseJSON, depth %d: %v, want %q", c.depth, err, c.err)
		}
		// As an unknown member, an array one less deep is skipped with the
		// same bound: the object around it is the first level.
		inner := strings.Repeat("[", c.depth-1) + strings.Repeat("]", c.depth-1)
		r := NewJSONReader([]byte(`{"u":` + inner + `}`))
		o := r.Object(NewJSONFields())
		for o.Next(r) {
		}
		want := strings.Replace(c.err, "byte 1000", "byte 1004", 1)
		if err := r.End(o.End()); errText(err) != want {
			t.Errorf("skip, depth %d: %v, want %q", c.depth, err, want)
		}
	}
}

// The nesting of a skipped value counts from the body's root, through the
// objects, lists and maps a read is in, as ParseJSON counts it: the reader
// accepts a body exactly when ParseJSON does.
func TestJSONDepthFromTheRoot(t *testing.T) {
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	readPoint := func(r *JSONReader) error {
		var p point
		return p.readJSON(r)
	}
	// A map of objects, each read as one without members.
	readMap := func(r *JSONReader) error {
		_, err := JSONMap(r, Unbounded, func(*struct{}) error {
			o := r.Object(NewJSONFields())
			for o.Next(r) {
			}
			return o.End()
		})
		return err
	}
	for _, c := range []struct {
		name string
		body func(n int) string
		read func(*JSONReader) error
		open int // objects and arrays around the skipped value
	}{
		{"root", func(n int) string { return `{"x":1,"at":true,"u":` + deep(n) + `}` }, readPoint, 1},
		{"list element", func(n int) string { return `{"x":1,"at":true,"items":[{"x":2,"at":null,"u":` + deep(n) + `}]}` }, readPoint, 3},
		{"nested list element", func(n int) string {
			return `{"x":1,"at":true,"items":[{"x":2,"at":null,"items":[{"x":3,"at":null,"u":` + deep(n) + `}]}]}`
		}, readPoint, 5},
		{"map value", func(n int) string { return `{"a":{},"b":{"u":` + deep(n) + `}}` }, readMap, 2},
	} {
		for _, n := range []int{maxJSONDepth - c.open, maxJSONDepth - c.open + 1} {
			body := []byte(c.body(n))
			_, perr := ParseJSON(body)
			r := NewJSONReader(body)
			err := r.End(c.read(r))
			if errText(err) != errText(perr) {
				t.Errorf("%s, %d deep inside: reader %v, ParseJSON %v", c.name, n, err, perr)
			}
			if tooDeep := n+c.open > maxJSONDepth; tooDeep != (err != nil) {
				t.Errorf("%s, %d deep inside %d: %v", c.name, n, c.open, err)
			}
		}
	}
}

func TestParseJSON(t *testing.T) {
	v, err := ParseJSON([]byte(` {"a":[1,-2.5e3,"s",true,false,null,{}],"b":{"c":[]}} `))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"a": []any{json.Number("1"), json.Number("-2.5e3"), "s", true, false, nil, map[string]any{}}, "b": map[string]any{"c": []any{}}}
	if !reflect.DeepEqual(v, want) {
		t.Errorf("%#v, want %#v", v, want)
	}
	// Escaped names keep their own text beside escaped values and names.
	v, err = ParseJSON([]byte(`{"a\u0062":"c\u0064","q\u0072":{"s\u0074":1},"x\n":["y\n"]}`))
	want = map[string]any{"ab": "cd", "qr": map[string]any{"st": json.Number("1")}, "x\n": []any{"y\n"}}
	if err != nil || !reflect.DeepEqual(v, want) {
		t.Errorf("escaped names: %#v, %v; want %#v", v, err, want)
	}
	for body, want := range map[string]string{
		`{"a":1,"b":{"a":1},"a":2}`: `payload: invalid JSON at byte 19: repeated member name "a"`,
		`[1,]`:                      `payload: invalid JSON at byte 3: invalid character ']' at the start of a value`,
		`{"a"}`:                     `payload: invalid JSON at byte 4: invalid character '}' after a member name`,
		`[1 2]`:                     `payload: invalid JSON at byte 3: invalid character '2' after a value; want ',' or ']'`,
		`{"` + strings.Repeat("n", 100) + `":1,"` + strings.Repeat("n", 100) + `":2}`: `payload: invalid JSON at byte 106: repeated member name "` + strings.Repeat("n", 64) + `"…`,
	} {
		if _, err := ParseJSON([]byte(body)); errText(err) != want {
			t.Errorf("%s: %v, want %s", body, err, want)
		}
	}
}

func TestAt(t *testing.T) {
	plain := fmt.Errorf("plain")
	for _, c := range []struct {
		prefix string
		err    error
		want   string
	}{
		{"a", &FieldError{Problem: "p"}, "field a: p"},
		{"a", &FieldError{Path: "b", Problem: "p"}, "field a.b: p"},
		{"a", &FieldError{Path: `["k"].b`, Problem: "p"}, `field a["k"].b: p`},
		{"a", plain, "plain"},
	} {
		if got := At(c.prefix, c.err).Error(); got != c.want {
			t.Errorf("At(%q, %v) = %q, want %q", c.prefix, c.err, got, c.want)
		}
	}
}

// A NUL byte where a value or token should be is a syntax error that each
// read returns as an error that can be printed, not a nil one in disguise.
func TestJSONReaderNULByte(t *testing.T) {
	for _, body := range []string{"\x00", `{"a":` + "\x00}", `[1,` + "\x00]"} {
		r := NewJSONReader([]byte(body))
		_, err := r.Raw()
		if err == nil || !strings.Contains(err.Error(), `invalid character '\x00'`) {
			t.Errorf("Raw of %q: %v", body, err)
		}
		r = NewJSONReader([]byte(body))
		if _, err := r.String(); err == nil || err.Error() == "" {
			t.Errorf("String of %q: %v", body, err)
		}
	}
}

func TestJSONReaderRaw(t *testing.T) {
	r := NewJSONReader([]byte(` {"a": [1, {"b": null}], "c": "d"} `))
	raw, err := r.Raw()
	if err != nil || string(raw) != `{"a": [1, {"b": null}], "c": "d"}` {
		t.Fatalf("Raw = %q, %v", raw, err)
	}
	if err := r.End(nil); err != nil {
		t.Fatal(err)
	}
	if _, err := NewJSONReader([]byte(`{"a":1,"a":2}`)).Raw(); err == nil || !strings.Contains(err.Error(), "repeated") {
		t.Fatalf("Raw of a repeated name: %v", err)
	}
}

// A body of a mebibyte holding one object of a hundred thousand names the
// schema does not know is checked for repeats without an allocation per
// name (before, each name was a map entry of its own: 106,000 allocations,
// 11 MB), and a repeat among them is still found, at its offset.
func TestManyUnknownNamesCostNoAllocationEach(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"x":1,"at":true,"wide":{`)
	n := 0
	for ; b.Len() < 1<<20; n++ {
		if n > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"` + strconv.Itoa(n) + `":0`)
	}
	b.WriteString(`}}`)
	body := []byte(b.String())
	read := func(body []byte) error {
		var p point
		r := NewJSONReader(body)
		return r.End(p.readJSON(r))
	}
	if allocs := testing.AllocsPerRun(1, func() {
		if err := read(body); err != nil {
			t.Fatal(err)
		}
	}); allocs > 100 {
		t.Errorf("%v allocations for %d names", allocs, n)
	}
	// Of two names repeated in an object wider than smallObject, the one
	// repeated first in the body is named, wherever it sorts.
	wide := `{"x":1,"at":true,"w":{"z":1,"b":1,`
	for i := range smallObject {
		wide += `"n` + strconv.Itoa(i) + `":1,`
	}
	first := len(wide)
	wide += `"z":2,"b":2}}`
	if err := read([]byte(wide)); err == nil || !strings.Contains(err.Error(), "at byte "+strconv.Itoa(first)+`: repeated member name "z"`) {
		t.Errorf("two names repeated: %v, want z's repeat at byte %d", err, first)
	}
	repeated := append(body[:len(body)-2:len(body)-2], `,"7":1}}`...)
	want := "invalid JSON at byte " + strconv.Itoa(len(body)-1) + `: repeated member name "7"`
	if err := read(repeated); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("a repeat among them: %v, want %q", err, want)
	}
}

// plain8 agrees with plain on every word: each byte value in each position,
// among plain bytes and beside every other value.
func TestPlain8(t *testing.T) {
	for pos := range 8 {
		for c := range 256 {
			for _, fill := range []byte{'a', 0x1f, '"', 0x80, 0xff, ' '} {
				var word [8]byte
				for i := range word {
					word[i] = fill
				}
				word[pos] = byte(c)
				want := true
				for _, b := range word {
					want = want && plain(b)
				}
				if got := plain8(binary.LittleEndian.Uint64(word[:])); got != want {
					t.Fatalf("plain8(%q) = %v, want %v", word, got, want)
				}
			}
		}
	}
}
