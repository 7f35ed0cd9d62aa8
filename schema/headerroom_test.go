package schema

import (
	"fmt"
	"strings"
	"testing"
)

// A version may have as many typed headers as fit beside the envelope's own
// within the guard's 64: 58. One more is refused where the headers begin.
func TestHeaderRoomCountsTheHeaders(t *testing.T) {
	for _, c := range []struct {
		n    int
		want string // "" for none
	}{
		{58, ""},
		{59, "schema.lily.yaml:7:9: MV1 has 59 typed headers: at most 58, beside the envelope's own, within the 64 a consumer's guard accepts [OUT-OF-RANGE]"},
	} {
		var b strings.Builder
		b.WriteString("version: 1\npackage: p\nmessages:\n  M:\n    versions:\n      1:\n        headers:\n")
		for i := range c.n {
			fmt.Fprintf(&b, "          x-h%d: {type: integer}\n", i)
		}
		_, err := Parse("schema.lily.yaml", []byte(b.String()))
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != c.want {
			t.Errorf("%d headers: %q, want %q", c.n, got, c.want)
		}
	}
}

// A schema that breaks only the headers' room, a limit set after lilygen
// accepted such schemas, is read whole: Parse returns it beside the error,
// examples judged, for an older revision to be compared. Another problem
// beside it returns none.
func TestHeaderRoomLeavesTheSchemaWhole(t *testing.T) {
	src := "version: 1\npackage: p\nmessages:\n  M:\n    versions:\n      1:\n        headers:\n" +
		"          x-a: {type: string}\n          x-b: {type: string}\n          x-c: {type: string}\n          x-d: {type: string}\n" +
		"        examples:\n          - {body: {}, headers: {x-a: 7}}\n"
	f, err := Parse("schema.lily.yaml", []byte(src))
	if want := "schema.lily.yaml:7:9: MV1's typed headers at their bounds take 16396 bytes"; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("Parse: %v, want %s…", err, want)
	}
	if want := "schema.lily.yaml:13:39: example 1 of MV1 breaks the schema: field headers.x-a: not a string [BAD-EXAMPLE]"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Parse: %v, want also %s", err, want)
	}
	if f != nil {
		t.Errorf("Parse returned a file beside a broken example")
	}
	f, err = Parse("schema.lily.yaml", []byte(strings.Replace(src, "x-a: 7", "x-a: seven", 1)))
	if err == nil || f == nil || len(f.Messages) != 1 || len(f.Messages[0].Versions[0].Headers) != 4 || len(f.Messages[0].Versions[0].Examples) != 1 {
		t.Errorf("Parse of a schema beyond the headers' room alone: %+v, %v", f, err)
	}
}

// A string header's min_length counts characters, and a character takes
// at least one byte, so one above the 4096 bytes a consumer's guard takes
// in a header value leaves no value that could travel: it is refused at
// the min_length, and the schema is read whole (a limit set after lilygen
// accepted such schemas). Required headers whose minimums pass the room of
// the headers together are refused already, since their bounds do.
func TestHeaderMinLengthWithinTheGuardsBound(t *testing.T) {
	src := "version: 1\npackage: p\nmessages:\n  M:\n    versions:\n      1:\n        headers:\n" +
		"          x-fits: {type: string, required: true, min_length: 4096}\n" +
		"          x-huge: {type: string, required: true, min_length: 4097, max_length: 70001}\n"
	f, err := Parse("schema.lily.yaml", []byte(src))
	want := "schema.lily.yaml:9:62: min_length 4097 of header x-huge asks for at least 4097 bytes (a character takes one or more): at most 4096, the longest header value a consumer's guard accepts (lower min_length to 4096 or less, or carry the value in the body) [OUT-OF-RANGE]"
	if err == nil || err.Error() != want {
		t.Errorf("Parse: %v\nwant %s", err, want)
	}
	if f == nil || len(f.Messages) != 1 || len(f.Messages[0].Versions[0].Headers) != 2 {
		t.Errorf("Parse of a schema beyond a header's min_length alone: %+v", f)
	}
	var b strings.Builder
	b.WriteString("version: 1\npackage: p\nmessages:\n  M:\n    versions:\n      1:\n        headers:\n")
	for i := range 4 {
		fmt.Fprintf(&b, "          x-h%d: {type: string, required: true, min_length: 4000}\n", i)
	}
	if _, err := Parse("schema.lily.yaml", []byte(b.String())); err == nil || !strings.Contains(err.Error(), "MV1's typed headers at their bounds take") {
		t.Errorf("Parse of headers whose minimums pass the room together: %v", err)
	}
}
