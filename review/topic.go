package review

import (
	"slices"
	"strings"
)

// words splits a topic key or pattern into its words. RabbitMQ reads the
// empty key as no words at all, which "#" matches and "*" does not, where
// strings.Split would give one empty word.
func words(key string) []string {
	if key == "" {
		return nil
	}
	return strings.Split(key, ".")
}

// maxCoverStates bounds covers' search: patterns such as #.x.*.*.* make a
// track which of the last words were x, a set of places that doubles with
// each *. Past the bound covers answers no, so the change is reported
// rather than passed unseen.
const maxCoverStates = 1 << 14

// end closes each pattern when covers walks several as one: no word
// matches it, since none holds a dot.
const end = "."

// covers reports whether topic patterns as, bound alike, together match
// every key pattern b does: # matching any words, * one, others
// themselves. It looks for a key that b matches and none of as does,
// walking b's words beside the set of places in as the same words can
// reach. Only the literal words of as tell words apart for them, so where
// b takes any word it tries each of those and one word that is none of
// them: "*", since every * of as is a wildcard.
func covers(as [][]string, b []string) bool {
	if slices.ContainsFunc(as, func(a []string) bool { return slices.Equal(a, b) }) {
		return true // an unchanged binding, however many places it keeps
	}
	type state struct {
		j  int    // the place in b
		at string // the places in a, one byte each: 1 if reachable
	}
	var a []string
	var start []byte
	for _, p := range as {
		start = append(append(start, 1), make([]byte, len(p))...)
		a = append(append(a, p...), end)
	}
	others := []string{"*"}
	for _, w := range a {
		if w != "*" && w != "#" && w != end && !slices.Contains(others, w) {
			others = append(others, w)
		}
	}
	queue := []state{{0, closeOver(a, start)}}
	seen := map[state]bool{queue[0]: true}
	push := func(s state) {
		if !seen[s] {
			seen[s] = true
			queue = append(queue, s)
		}
	}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		if len(seen) > maxCoverStates {
			return false
		}
		if s.j == len(b) {
			if !ended(a, s.at) {
				return false
			}
			continue
		}
		switch b[s.j] {
		case "#":
			push(state{s.j + 1, s.at})
			for _, w := range others {
				push(state{s.j, step(a, s.at, w)})
			}
		case "*":
			for _, w := range others {
				push(state{s.j + 1, step(a, s.at, w)})
			}
		default:
			push(state{s.j + 1, step(a, s.at, b[s.j])})
		}
	}
	return true
}

// ended reports whether at reaches the end of one of the patterns in a.
func ended(a []string, at string) bool {
	for i, tok := range a {
		if tok == end && at[i] == 1 {
			return true
		}
	}
	return false
}

// step is the set of places in patterns a reachable from those of at by
// one more word w.
func step(a []string, at, w string) string {
	next := make([]byte, len(a))
	for i, tok := range a {
		switch {
		case at[i] == 0 || tok == end:
		case tok == "#":
			next[i] = 1
		case tok == "*" || tok == w:
			next[i+1] = 1
		}
	}
	return closeOver(a, next)
}

// closeOver adds to at the places past each # it reaches, which match no
// word, and returns it as a string.
func closeOver(a []string, at []byte) string {
	for i, tok := range a {
		if at[i] == 1 && tok == "#" {
			at[i+1] = 1
		}
	}
	return string(at)
}
