package membername

import (
	"strings"
	"testing"
)

func TestEntry(t *testing.T) {
	for key, want := range map[string]string{
		"team":                   `["team"]`,
		"a\"b\xff":               `["a\"b\xff"]`,
		strings.Repeat("k", 64):  `["` + strings.Repeat("k", 64) + `"]`,
		strings.Repeat("k", 100): `["` + strings.Repeat("k", 64) + `"…]`,
	} {
		if got := Entry(key); got != want {
			t.Errorf("Entry(%q) = %s, want %s", key, got, want)
		}
	}
}
