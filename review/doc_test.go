package review

import "testing"

// A name in the review page stays whole in its table cell: a pipe is
// escaped, and a backtick gets a longer fence, padded when it is at an end.
func TestCodeSpanHoldsAnyName(t *testing.T) {
	for name, want := range map[string]string{
		"orders":        "`orders`",
		"a|b":           "`a\\|b`",
		"a`b":           "``a`b``",
		"`edge":         "`` `edge ``",
		"two``ticks`":   "``` two``ticks` ```",
		"line\nbreaker": "`line breaker`",
	} {
		if got := code(name); got != want {
			t.Errorf("code(%q) = %s, want %s", name, got, want)
		}
	}
}
