// Package printable shows text from a schema as it is written, in a
// terminal or a log: a name holding a newline or an ANSI escape sequence
// must not start a line that looks like another error, nor colour or
// clear the screen.
package printable

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// String returns s with each character that is not printable written as its
// Go escape: controls such as \n and \x1b, format characters such as the
// bidi override \u202e, and spaces other than U+0020; and each byte that is
// not UTF-8 as \xNN. Printable text, non-ASCII included, stays as it is, and
// is returned without a copy. A backslash stays as it is: the escapes are
// for reading, not for decoding.
func String(s string) string {
	if !strings.ContainsFunc(s, func(r rune) bool { return r == utf8.RuneError || !unicode.IsPrint(r) }) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unicode.IsPrint(r):
			b.WriteString(s[i : i+size])
		default:
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		}
		i += size
	}
	return b.String()
}
