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

// covers reports whether topic pattern a matches every key pattern b does,
// # matching any words, * one, others themselves. It looks for a key that
// b matches and a does not, walking b's words beside the set of places in
// a the same words can reach. Only a's literal words tell words apart for
// a, so where b takes any word it tries each of those and one word that is
// none of them: "*", since every * of a is a wildcard.
func covers(a, b []string) bool {
	if slices.Equal(a, b) {
		return true // an unchanged binding, however many places it keeps
	}
	type state struct {
		j  int    // the place in b
		at string // the places in a, one byte each: 1 if reachable
	}
	others := []string{"*"}
	for _, w := range a {
		if w != "*" && w != "#" && !slices.Contains(others, w) {
			others = append(others, w)
		}
	}
	start := make([]byte, len(a)+1)
	start[0] = 1
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
			if s.at[len(a)] == 0 {
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

// step is the set of places in pattern a reachable from those of at by one
// more word w.
func step(a []string, at, w string) string {
	next := make([]byte, len(a)+1)
	for i, tok := range a {
		switch {
		case at[i] == 0:
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
