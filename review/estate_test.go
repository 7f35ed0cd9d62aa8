package review

import (
	"strings"
	"testing"
)

// covers says whether one topic pattern matches every key another does.
func TestCovers(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"order.placed", "order.placed", true},
		{"order.*", "order.placed", true},
		{"order.placed", "order.*", false},
		{"order.#", "order.*.eu", true},
		{"order.#", "order", true},
		{"order.*", "order", false},
		{"#", "anything.at.all", true},
		{"#", "#", true},
		{"order.*.eu", "order.#", false},
		{"*.placed.#", "order.placed", true},
		{"*.placed.#", "order.#", false},
		{"order.#.eu", "order.a.b.eu", true},
		{"order.#.eu", "order.*.#.eu", true},
		{"order.*.eu", "order.#.eu", false},
	} {
		if got := covers(strings.Split(tc.a, "."), strings.Split(tc.b, ".")); got != tc.want {
			t.Errorf("covers(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

// Patterns full of # are decided in polynomial time.
func TestCoversIsQuick(t *testing.T) {
	a := strings.Split(strings.Repeat("#.", 40)+"x", ".")
	b := strings.Split(strings.Repeat("w.", 120)+"y", ".")
	if covers(a, b) {
		t.Error("a pattern ending in x covers one ending in y")
	}
}
