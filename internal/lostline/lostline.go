// Package lostline writes and reads the lines of runtime.Report.Lost: a
// reason that came N times in a row, "<why> (N times in a row)", and the
// last line of a list bounded past its first reasons, "and N more sessions
// or connection attempts lost, not listed", which counts the losses it
// leaves out (not the lines that would have told them). The runtime writes them, and
// reads them back to count the losses (Report.String, Serve's combined
// report); the ledger reads them to count the broker's refusals. Both use
// this package, so that the wording is changed in one place or nowhere.
package lostline

import (
	"strconv"
	"strings"
)

// The end of a line that tells a reason come N times in a row.
const timesPrefix, timesSuffix = " (", " times in a row)"

// onceSuffix ends the line of a reason that came once and reads like a count.
const onceSuffix = " (once)"

// Format is the line that tells why came n times in a row: why itself when
// n is 1 (or less), else "<why> (N times in a row)". A reason that came once
// and whose own text ends like a count (a broker's or a peer's words are
// not ours) gets " (once)" after it, so that Parse does not read its text as
// N losses.
func Format(why string, n int) string {
	if n < 2 {
		if _, looks := Parse(why); looks > 1 {
			return why + onceSuffix
		}
		return why
	}
	return why + timesPrefix + strconv.Itoa(n) + timesSuffix
}

// Parse splits a line into its reason and how many losses it tells: the N
// of a line that ends " (N times in a row)", N at least 2, or the line and
// 1. Parse(Format(why, n)) is why and n for n of 2 or more.
func Parse(line string) (why string, n int) {
	rest, ok := strings.CutSuffix(line, timesSuffix)
	if !ok {
		return line, 1
	}
	i := strings.LastIndex(rest, timesPrefix)
	if i < 0 {
		return line, 1
	}
	n, err := strconv.Atoi(rest[i+len(timesPrefix):])
	if err != nil || n < 2 {
		return line, 1
	}
	return rest[:i], n
}

// The last line of a list that left losses out.
const morePrefix, moreSuffix = "and ", " more sessions or connection attempts lost, not listed"

// More is the last line of a list that left out n losses: it counts the
// losses, not the lines that would have told them.
func More(n int) string { return morePrefix + strconv.Itoa(n) + moreSuffix }

// ParseMore reads the count of a line More wrote; ok is false for any other
// line.
func ParseMore(line string) (n int, ok bool) {
	s, prefixed := strings.CutPrefix(line, morePrefix)
	s, suffixed := strings.CutSuffix(s, moreSuffix)
	if !prefixed || !suffixed {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, false
	}
	return n, true
}
