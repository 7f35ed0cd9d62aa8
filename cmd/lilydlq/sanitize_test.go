package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/lily-mq/lily/internal/sanitize"
)

func TestText(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		max  int
		want string
	}{
		{"order.placed", 128, "order.placed"},
		{"a\x1b[31mb", 128, `a\x1b[31mb`},
		{"caf\xc3\xa9", 128, `caf\xc3\xa9`},
		{"bad\xff", 128, `bad\xff`},
		{"tab\there\n", 128, `tab\x09here\x0a`},
		{"abcdefghij", 10, "abcdefghij"},
		{"abcdefghijk", 10, "abcdefg..."},
		{"ab\x01cdefghij", 10, `ab\x01c...`},
		{"", 10, ""},
	} {
		if got := sanitize.Text(c.in, c.max); got != c.want {
			t.Errorf("sanitize.Text(%q, %d) = %q, want %q", c.in, c.max, got, c.want)
		}
		if got := sanitize.Text(c.in, c.max); len(got) > c.max {
			t.Errorf("sanitize.Text(%q, %d) is %d bytes", c.in, c.max, len(got))
		}
	}
	huge := strings.Repeat("\x1b", 20<<20)
	if got := sanitize.Text(huge, 200); len(got) > 200 || !strings.HasSuffix(got, "...") {
		t.Errorf("text of 20 MiB: %d bytes, %q", len(got), got[len(got)-8:])
	}
}

func TestBody(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in      string
		max     int
		want    string
		wantCut bool
	}{
		{"{\"a\": \"café\"}\n", 100, "{\"a\": \"café\"}\n", false},
		{"\x1b[2J", 100, "00000000  1b 5b 32 4a                                       |.[2J|\n", false},
		{"right\u202eleft", 100, "00000000  72 69 67 68 74 e2 80 ae  6c 65 66 74              |right...left|\n", false},
		{"caf\xc3\xa9!", 4, "caf", true},
	} {
		got, cut := body([]byte(c.in), c.max)
		if got != c.want || cut != c.wantCut {
			t.Errorf("body(%q, %d) = %q, %t; want %q, %t", c.in, c.max, got, cut, c.want, c.wantCut)
		}
	}
}

// TestJSONEncoderEscapesWhatATerminalActsOn: C1 controls, DEL, bidi
// overrides and other format characters leave as \u escapes (one beyond the
// BMP as its surrogate pair), printable text as it is, and the JSON reads
// back as the same string.
func TestJSONEncoderEscapesWhatATerminalActsOn(t *testing.T) {
	t.Parallel()
	in := "a\u009b31m\u202eb\x7f\u200bcafé \U000e0041 ok"
	var out strings.Builder
	if err := jsonEncoder(&out).Encode(map[string]string{"id": in}); err != nil {
		t.Fatal(err)
	}
	want := `{"id":"a\u009b31m\u202eb\u007f\u200bcafé \udb40\udc41 ok"}` + "\n"
	if out.String() != want {
		t.Errorf("wrote %s, want %s", out.String(), want)
	}
	var back map[string]string
	if err := json.Unmarshal([]byte(out.String()), &back); err != nil || back["id"] != in {
		t.Errorf("read back %q (%v), want %q", back["id"], err, in)
	}
}
