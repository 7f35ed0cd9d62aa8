// Package topic matches RabbitMQ topic patterns: a pattern against a
// routing key, and patterns against patterns. The schema checker, which
// follows a publish's key to the bindings it matches, and the review
// package, which compares bindings across two schemas and imports schema,
// share it.
package topic

import (
	"encoding/binary"
	"slices"
	"sort"
	"strings"
)

// Words splits a topic key or pattern into its words. RabbitMQ reads the
// empty key as no words at all, which "#" matches and "*" does not, where
// strings.Split would give one empty word.
func Words(key string) []string {
	if key == "" {
		return nil
	}
	return strings.Split(key, ".")
}

// maxCoverStates bounds Covers' search: patterns such as #.x.*.*.* make a
// track which of the last words were x, a set of places that doubles with
// each *. Past the bound Covers answers no, so that a review reports the
// change rather than passing it unseen.
const maxCoverStates = 1 << 14

// What stands at a place of patterns walked as one, other than a literal
// word's number.
const (
	anyWord  = -1 // *
	anyWords = -2 // #
	closed   = -3 // the end of a pattern: no word matches it
)

// walk is topic patterns walked side by side: the places of each, end to
// end, each pattern closed by a place of its own.
type walk struct {
	place  []int          // the number of a literal word, or anyWord, anyWords or closed
	number map[string]int // each literal word's number
	// open marks a place from which the rest of its pattern is only #:
	// it matches whatever words follow, none too.
	open   []bool
	starts []int
	owner  []int // the pattern of each place, by its index
	// mark and round keep a step from adding a place, or a set of places
	// from trying a word, twice, without a map each time.
	mark  []int
	round int
}

func newWalk(patterns [][]string) *walk {
	w := &walk{number: map[string]int{}}
	for i, p := range patterns {
		w.starts = append(w.starts, len(w.place))
		for range len(p) + 1 {
			w.owner = append(w.owner, i)
		}
		for _, word := range p {
			switch word {
			case "*":
				w.place = append(w.place, anyWord)
			case "#":
				w.place = append(w.place, anyWords)
			default:
				n, ok := w.number[word]
				if !ok {
					n = len(w.number)
					w.number[word] = n
				}
				w.place = append(w.place, n)
			}
		}
		w.place = append(w.place, closed)
	}
	w.open = make([]bool, len(w.place))
	for i := len(w.place) - 2; i >= 0; i-- {
		w.open[i] = w.place[i] == anyWords && (w.place[i+1] == closed || w.open[i+1])
	}
	w.mark = make([]int, max(len(w.place), len(w.number)))
	return w
}

// begin is the set of places before any word.
func (w *walk) begin() []int {
	round := w.next()
	for _, p := range w.starts {
		w.mark[p] = round
	}
	return w.closeOver(slices.Clone(w.starts), round)
}

// next starts a round of mark: what it marked before is forgotten.
func (w *walk) next() int {
	w.round++
	return w.round
}

// closeOver adds to places those past each # they reach, which match no
// word, and sorts them, so that a set has one spelling.
func (w *walk) closeOver(places []int, round int) []int {
	for i := 0; i < len(places); i++ {
		if p := places[i]; w.place[p] == anyWords && w.mark[p+1] != round {
			w.mark[p+1] = round
			places = append(places, p+1)
		}
	}
	slices.Sort(places)
	return places
}

// step is the set of places reachable from those of at by one more word,
// literal word number word or, for a word no pattern names, anyWord.
func (w *walk) step(at []int, word int) []int {
	round := w.next()
	var next []int
	add := func(p int) {
		if w.mark[p] != round {
			w.mark[p] = round
			next = append(next, p)
		}
	}
	for _, p := range at {
		switch tok := w.place[p]; {
		case tok == closed:
		case tok == anyWords:
			add(p)
		case tok == anyWord || tok == word:
			add(p + 1)
		}
	}
	return w.closeOver(next, round)
}

// tell lists the words that lead somewhere different from the places of
// at: the literal words there, and anyWord for every word none of them is.
func (w *walk) tell(at []int) []int {
	round := w.next()
	out := []int{anyWord}
	for _, p := range at {
		if n := w.place[p]; n >= 0 && w.mark[n] != round {
			w.mark[n] = round
			out = append(out, n)
		}
	}
	return out
}

// literal is the number of a word of a key, anyWord for one no pattern
// names.
func (w *walk) literal(word string) int {
	if n, ok := w.number[word]; ok {
		return n
	}
	return anyWord
}

// key spells a sorted set of places as a string, for a map.
func key(at []int) string {
	buf := make([]byte, 0, 2*len(at))
	for _, p := range at {
		buf = binary.AppendUvarint(buf, uint64(p))
	}
	return string(buf)
}

// Covers reports whether topic patterns as, bound alike, together match
// every key pattern b does: # matching any words, * one, others
// themselves.
func Covers(as [][]string, b []string) bool {
	if slices.ContainsFunc(as, func(a []string) bool { return slices.Equal(a, b) }) {
		return true // an unchanged binding, however many places it keeps
	}
	return !Escapes(as, b)
}

// MatchesKey reports whether topic pattern p matches key k. A * or # in a
// key is a word as any other, which only * and # match.
func MatchesKey(p, k []string) bool {
	w := newWalk([][]string{p})
	at := w.begin()
	for _, word := range k {
		at = w.step(at, w.literal(word))
	}
	return slices.ContainsFunc(at, func(p int) bool { return w.place[p] == closed })
}

// Escapes reports whether some key that pattern b matches, and each
// pattern of within too, none of patterns as matches. It walks b's words
// beside the set of places in the patterns the same words can reach. From
// a set of places only the literal words there tell words apart, so where
// b takes any word it tries each of those and one word that is none of
// them. Past maxCoverStates it answers yes.
func Escapes(as [][]string, b []string, within ...[]string) bool {
	w := newWalk(append(slices.Clip(as), within...))
	mine := len(w.place) // the first place of within
	if len(within) > 0 {
		mine = w.starts[len(as)]
	}
	// held reports whether the places of at leave within matching: a
	// place in each of its patterns or, at the end of a key, the end of
	// each.
	held := func(at []int, end bool) bool {
		held, last := 0, -1
		for _, p := range at[sort.SearchInts(at, mine):] {
			if w.owner[p] != last && (!end || w.place[p] == closed) {
				held++
				last = w.owner[p]
			}
		}
		return held == len(within)
	}
	type state struct {
		j  int   // the place in b
		at []int // the places in the patterns, sorted
	}
	var stack []state
	seen := map[struct {
		j  int
		at string
	}]bool{}
	push := func(j int, at []int) {
		k := struct {
			j  int
			at string
		}{j, key(at)}
		if !seen[k] {
			seen[k] = true
			stack = append(stack, state{j, at})
		}
	}
	push(0, w.begin())
	for len(stack) > 0 {
		s := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		ours := s.at[:sort.SearchInts(s.at, mine)] // the places in as
		switch {
		case len(seen) > maxCoverStates:
			return true
		case slices.ContainsFunc(ours, func(p int) bool { return w.open[p] }):
			continue // as match whatever words b goes on with
		case !held(s.at, false):
			continue // within match no key b goes on to
		case len(ours) == 0 && len(within) == 0:
			return true // b matches some rest of a key, and none of as does
		case s.j == len(b):
			if held(s.at, true) && !slices.ContainsFunc(ours, func(p int) bool { return w.place[p] == closed }) {
				return true
			}
			continue
		}
		switch b[s.j] {
		case "#":
			push(s.j+1, s.at)
			for _, word := range w.tell(s.at) {
				push(s.j, w.step(s.at, word))
			}
		case "*":
			for _, word := range w.tell(s.at) {
				push(s.j+1, w.step(s.at, word))
			}
		default:
			push(s.j+1, w.step(s.at, w.literal(b[s.j])))
		}
	}
	return false
}
