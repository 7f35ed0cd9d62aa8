package topic

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// splitAll splits each of ps into its words.
func splitAll(ps ...string) [][]string {
	var out [][]string
	for _, p := range ps {
		out = append(out, Words(p))
	}
	return out
}

// Covers says whether one topic pattern matches every key another does.
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
		// The empty key has no words: "#" and "" match it, "*" does not.
		{"*", "", false},
		{"#.*", "", false},
		{"*.#", "", false},
		{"#", "", true},
		{"", "", true},
		{"", "#", false},
		// Patterns alike in what they match, written differently.
		{"*.#", "#.*", true},
		{"#.*", "*.#", true},
		{"#", "#.#", true},
		{"*.#.*", "#.*.*", true},
		// The a of b, followed by at least one more word.
		{"#.a.*.#", "a.#.b", true},
		{"#.a.*.#", "a.#", false},
	} {
		if got := Covers(splitAll(tc.a), Words(tc.b)); got != tc.want {
			t.Errorf("Covers(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

// Covers agrees with matching every key of up to six words, from three, against
// every pair of patterns of up to three words, and of up to two words for
// two patterns bound together.
func TestCoversMatchesKeys(t *testing.T) {
	patterns, keys := sequences([]string{"x", "y", "*", "#"}, 3), sequences([]string{"x", "y", "z"}, 6)
	matched := make(map[string][]bool)
	for _, p := range patterns {
		for _, k := range keys {
			matched[p] = append(matched[p], matches(Words(p), Words(k)))
		}
	}
	for _, a := range patterns {
		for _, b := range patterns {
			want := true
			for i := range keys {
				if matched[b][i] && !matched[a][i] {
					want = false
				}
			}
			if got := Covers(splitAll(a), Words(b)); got != want {
				t.Errorf("Covers(%q, %q) = %v, want %v", a, b, got, want)
			}
		}
	}
	// Pairs of the patterns of up to two words, bound together.
	short := slices.DeleteFunc(slices.Clone(patterns), func(p string) bool { return strings.Count(p, ".") > 1 })
	for _, a1 := range short {
		for _, a2 := range short {
			for _, b := range short {
				want := true
				for i := range keys {
					if matched[b][i] && !matched[a1][i] && !matched[a2][i] {
						want = false
					}
				}
				if got := Covers(splitAll(a1, a2), Words(b)); got != want {
					t.Errorf("Covers(%q and %q, %q) = %v, want %v", a1, a2, b, got, want)
				}
			}
		}
	}
}

// Escapes agrees with matching every key of up to six words, from three,
// against every three patterns of up to two words: a, then b and c, which
// the key must match, a not.
func TestEscapesWithinMatchesKeys(t *testing.T) {
	patterns, keys := sequences([]string{"x", "y", "*", "#"}, 2), sequences([]string{"x", "y", "z"}, 6)
	matched := make(map[string][]bool)
	for _, p := range patterns {
		for _, k := range keys {
			m := matches(Words(p), Words(k))
			if got := MatchesKey(Words(p), Words(k)); got != m {
				t.Errorf("MatchesKey(%q, %q) = %v, want %v", p, k, got, m)
			}
			matched[p] = append(matched[p], m)
		}
	}
	for _, a := range patterns {
		for _, b := range patterns {
			for _, c := range patterns {
				want := false
				for i := range keys {
					if matched[b][i] && matched[c][i] && !matched[a][i] {
						want = true
					}
				}
				if got := Escapes(splitAll(a), Words(b), Words(c)); got != want {
					t.Errorf("Escapes(%q, %q within %q) = %v, want %v", a, b, c, got, want)
				}
			}
		}
	}
}

// Covers says whether topic patterns bound together match every key
// another does, where none alone does.
func TestCoversTogether(t *testing.T) {
	for _, tc := range []struct {
		as   []string
		b    string
		want bool
	}{
		{[]string{"*.#", ""}, "#", true},
		{[]string{"order.eu.#", "order.us.#"}, "order.*.#", false},
		{[]string{"order.eu", "order.us", "order.*.#"}, "order.#", false},
		{[]string{"order", "order.*", "order.*.#"}, "order.#", true},
		{nil, "#", false},
		// # matches every key, the empty one too, beside a pattern whose
		// places alone are more than Covers would follow.
		{[]string{"#", "#.x" + strings.Repeat(".*", 14)}, "*.#", true},
		{[]string{"#.#", "#.x" + strings.Repeat(".*", 14)}, "", true},
		{[]string{"#.x" + strings.Repeat(".*", 14), "order.#"}, "order.#.x.*", true},
	} {
		if got := Covers(splitAll(tc.as...), Words(tc.b)); got != tc.want {
			t.Errorf("Covers(%q, %q) = %v, want %v", tc.as, tc.b, got, tc.want)
		}
	}
}

// sequences lists every key or pattern of up to most words of alphabet,
// the empty one first.
func sequences(alphabet []string, most int) []string {
	out, level := []string{""}, []string{""}
	for range most {
		var next []string
		for _, p := range level {
			for _, w := range alphabet {
				next = append(next, strings.TrimPrefix(p+"."+w, "."))
			}
		}
		out = append(out, next...)
		level = next
	}
	return out
}

// matches reports whether pattern p matches key k, as RabbitMQ's topic
// exchange does.
func matches(p, k []string) bool {
	switch {
	case len(p) == 0:
		return len(k) == 0
	case p[0] == "#":
		return matches(p[1:], k) || len(k) > 0 && matches(p, k[1:])
	case len(k) == 0:
		return false
	}
	return (p[0] == "*" || p[0] == k[0]) && matches(p[1:], k[1:])
}

// Patterns full of # are decided, and so are those whose * make the places
// a key can reach many: an unbounded search of the second would double its
// states with each of its hundred *, and never end. How fast is the
// machine's business (about a second under -race here), so the deadline
// only tells a search that ends from one that does not.
func TestCoversEnds(t *testing.T) {
	a := strings.Split(strings.Repeat("#.", 40)+"x", ".")
	b := strings.Split(strings.Repeat("w.", 120)+"y", ".")
	if Covers([][]string{a}, b) {
		t.Error("a pattern ending in x covers one ending in y")
	}
	a = strings.Split("#.x"+strings.Repeat(".*", 100), ".")
	b = strings.Split("#.x"+strings.Repeat(".*", 100)+".y", ".")
	done := make(chan struct{})
	go func() {
		defer close(done)
		Covers([][]string{a}, b)
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("Covers did not end within a minute: its search is not bounded")
	}
	if !Covers([][]string{a}, a) {
		t.Error("a pattern does not cover itself")
	}
}
