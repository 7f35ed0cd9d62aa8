package lilyotel

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// An id a publish names reaches its span valid, printable and bounded,
// whatever the message carried; an ordinary id, unchanged.
func TestIDText(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"order-42", "order-42"},
		{"a b", "a b"},
		{"sipariş-7", "sipariş-7"},
		{"\xff\xfe\x1b[2J\u202eevil", "???[2J?evil"},
		{"tab\there\u0085", "tab?here?"},
		{strings.Repeat("x", 200), strings.Repeat("x", maxIDText)},
		{strings.Repeat("é", 100), strings.Repeat("é", maxIDText/2)},
	} {
		got := idText(tc.in)
		if got != tc.want || !utf8.ValidString(got) || len(got) > maxIDText {
			t.Errorf("idText(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = idText("01J9ZK3M4XQ7-order-42") }); n != 0 {
		t.Errorf("%v allocations for an ordinary id", n)
	}
}
