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
