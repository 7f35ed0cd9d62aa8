package review

import (
	"strings"
	"testing"

	"github.com/lily-mq/lily/schema"
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

// headersCover says whether one headers binding matches every message
// another does, for each pair of x-match.
func TestHeadersCover(t *testing.T) {
	eu, euTier, euUS := map[string]any{"region": "eu"}, map[string]any{"region": "eu", "tier": 1}, map[string]any{"region": "eu", "zone": "us"}
	for _, tc := range []struct {
		name           string
		nMatch, oMatch string
		n, o           map[string]any
		want           bool
	}{
		{"all, fewer pairs", "all", "all", eu, euTier, true},
		{"all, more pairs", "all", "all", euTier, eu, false},
		{"any of a pair the old all held", "any", "all", eu, euTier, true},
		{"any of no pair the old all held", "any", "all", map[string]any{"region": "us"}, euTier, false},
		{"any, more pairs", "any", "any", euUS, eu, true},
		{"any, fewer pairs", "any", "any", eu, euUS, false},
		{"all of the old any's one pair", "all", "any", eu, eu, true},
		{"all of one of the old any's pairs", "all", "any", eu, euUS, false},
	} {
		n := &schema.Binding{Match: tc.nMatch, Headers: tc.n}
		o := &schema.Binding{Match: tc.oMatch, Headers: tc.o}
		if got := headersCover(n, o); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
