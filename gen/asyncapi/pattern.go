package asyncapi

import "strings"

// Lily checks patterns as RE2 does; JSON Schema means ECMA 262 patterns,
// which Ajv and other tools compile in unicode mode. Most patterns read the
// same in both. ecmaPattern takes only those whose every part it knows to:
// anything else, such as RE2's flags, \A, \z, \p{…}, \Q…\E, \x{…}, POSIX
// classes, \s, octal escapes, escapes ECMA refuses (\-, \@, \_, \#), a -
// beside \d or \w in a class, and braces RE2 takes as themselves, goes to
// x-lily-pattern instead, which those tools leave alone.

// ecmaPattern reports whether RE2 pattern p, which the schema has checked,
// reads the same as an ECMA 262 pattern in unicode mode, the dots aside
// (ecmaDots).
func ecmaPattern(p string) bool {
	// assertion: the item before is ^, $, \b or \B, which RE2 repeats and
	// ECMA does not.
	assertion := false
	for i := 0; i < len(p); {
		n, ok, after := 1, true, false
		switch p[i] {
		case '\\':
			n, ok = ecmaEscape(p[i:], false)
			after = ok && (p[i+1] == 'b' || p[i+1] == 'B')
		case '[':
			n, ok = ecmaClass(p[i:])
		case '(':
			n, ok = ecmaGroup(p[i:])
		case '^', '$':
			after = true
		case '*', '+', '?':
			ok = !assertion
		case '{':
			// RE2 takes a brace that starts no repetition as itself, ECMA
			// refuses it.
			n = repetition(p[i:])
			ok = n > 0 && !assertion
		case '}', ']':
			ok = false
		}
		if !ok {
			return false
		}
		i, assertion = i+n, after
	}
	return true
}

// ecmaEscape reads the escape that starts s, in a character class or not:
// its length, and whether ECMA reads it as RE2 does. ECMA escapes its
// syntax characters and /, and in a class -; RE2 any punctuation.
func ecmaEscape(s string, inClass bool) (int, bool) {
	if len(s) < 2 {
		return len(s), false
	}
	switch c := s[1]; {
	case strings.IndexByte(`^$\.*+?()[]{}|/`, c) >= 0, strings.IndexByte("dDwWfnrtv", c) >= 0:
		return 2, true
	case c == '-':
		return 2, inClass
	case c == 'b' || c == 'B':
		return 2, !inClass
	case c == 'x':
		// \x{…} is RE2's alone.
		return 4, len(s) >= 4 && isHex(s[2]) && isHex(s[3])
	case c == '0':
		// NUL in both, unless a digit follows: RE2 reads \012 as octal,
		// and ECMA refuses both.
		return 2, len(s) == 2 || !isDigit(s[2])
	}
	// \a, \A, \z, \p, \P, \Q, \C, \s, \S, octal \1…\7, other punctuation.
	return 2, false
}

// ecmaClass reads the character class that starts s: its length, and
// whether ECMA reads it as RE2 does.
func ecmaClass(s string) (int, bool) {
	i := 1
	if i < len(s) && s[i] == '^' {
		i++
	}
	// A ] first is a member in RE2; in ECMA, [] is the empty class and [^]
	// any character.
	if i < len(s) && s[i] == ']' {
		return 0, false
	}
	// RE2 reads a - beside a class escape such as \w as itself; in unicode
	// mode ECMA takes it for a range to or from the escape, and refuses it.
	// dash: the member before is a - that is not the class's first.
	first, dash := i, false
	for i < len(s) {
		switch s[i] {
		case ']':
			return i + 1, true
		case '\\':
			n, ok := ecmaEscape(s[i:], true)
			if !ok {
				return 0, false
			}
			if strings.IndexByte("dDwW", s[i+1]) >= 0 && (dash || dashBefore(s[i+n:])) {
				return 0, false
			}
			i, dash = i+n, false
			continue
		case '[':
			// A POSIX class such as [:alpha:].
			if i+1 < len(s) && s[i+1] == ':' {
				return 0, false
			}
		}
		dash = s[i] == '-' && i > first
		i++
	}
	return 0, false
}

// dashBefore reports whether s, the rest of a class, starts with a - that
// another member follows.
func dashBefore(s string) bool { return len(s) > 1 && s[0] == '-' && s[1] != ']' }

// ecmaGroup reads the start of the group at s: its length, and whether ECMA
// reads it as RE2 does. RE2's flags and (?P<name> are its own, and a name
// starting with a digit, which RE2 takes, is no ECMA identifier.
func ecmaGroup(s string) (int, bool) {
	rest, special := strings.CutPrefix(s, "(?")
	switch {
	case !special:
		return 1, true
	case strings.HasPrefix(rest, ":"):
		return 3, true
	case len(rest) > 1 && rest[0] == '<' && !isDigit(rest[1]):
		return 3, true
	}
	return 0, false
}

// repetition is the length of the repetition {n}, {n,} or {n,m} that
// starts s, 0 if none does.
func repetition(s string) int {
	i := 1
	digits := func() bool {
		start := i
		for i < len(s) && isDigit(s[i]) {
			i++
		}
		return i > start
	}
	if !digits() {
		return 0
	}
	if i < len(s) && s[i] == ',' {
		i++
		digits()
	}
	if i < len(s) && s[i] == '}' {
		return i + 1
	}
	return 0
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func isHex(c byte) bool { return isDigit(c) || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

// ecmaDots writes each "." of RE2 pattern p that stands outside a character
// class as [^\n]: RE2's dot refuses only a newline, ECMA 262's also \r,
// U+2028 and U+2029, so "^.+$" would refuse "a\rb" there and not here.
func ecmaDots(p string) string {
	var b strings.Builder
	inClass := false
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '\\' && i+1 < len(p):
			b.WriteByte(c)
			i++
			c = p[i]
		case inClass && c == ']':
			inClass = false
		case !inClass && c == '[':
			inClass = true
			b.WriteByte(c)
			// A ] first in the class, after any ^, is one of its members.
			if i+1 < len(p) && p[i+1] == '^' {
				i++
				b.WriteByte('^')
			}
			if i+1 < len(p) && p[i+1] == ']' {
				i++
				b.WriteByte(']')
			}
			continue
		case !inClass && c == '.':
			b.WriteString(`[^\n]`)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}
