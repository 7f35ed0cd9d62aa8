package schema

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestSyntaxErrors checks the positions of real yaml.v3 syntax errors: its
// parser names the line before the one it means, its reader names none, and
// it reports only the first error of a file.
func TestSyntaxErrors(t *testing.T) {
	const stops = " (YAML parsing stops at the first syntax error: the file's other problems show once it is fixed) [YAML-SYNTAX]"
	for _, tc := range []struct {
		name, src, want string
	}{
		{"parser: an unclosed {, at its line",
			"version: 1\npackage: x\nmessages:\n  A: {versions: {1: {}}\nqueues: {}\n",
			"4:3: YAML syntax error: did not find expected ',' or '}'"},
		{"parser: an unclosed [, at its line",
			"version: 1\nqueues:\n  q:\n    consumes: [{message: A}\n  r: {}\n",
			"4:5: YAML syntax error: did not find expected ',' or ']'"},
		{"parser: a key out of line, at its line",
			"version: 1\npackage: x\nmessages:\n  A: {}\n B: {}\n",
			"5:2: YAML syntax error: did not find expected key"},
		{"parser: a key out of line after a list, at its line",
			"version: 1\nmessages:\n  - A\n  - B\n C: {}\n",
			"5:2: YAML syntax error: did not find expected key"},
		{"parser: a key out of line in a nested mapping, at that mapping",
			"version: 1\nmessages:\n  A:\n    versions: {}\n   B: {}\n",
			"3:3: YAML syntax error: did not find expected key"},
		{"parser: with CRLF line ends",
			"version: 1\r\npackage: x\r\nmessages:\r\n  A: {versions: {1: {}}\r\nqueues: {}\r\n",
			"4:3: YAML syntax error: did not find expected ',' or '}'"},
		{"parser: an unclosed [ on the first line, found at the end",
			"version: [1\n",
			"2:1: YAML syntax error: did not find expected ',' or ']'"},
		{"scanner: at its line",
			"version: 1\n  package: [x\n",
			"2:3: YAML syntax error: mapping values are not allowed in this context"},
		{"scanner: an unclosed quote, at its start",
			"version: 1\npackage: \"x\nmessages: {}\n",
			"2:1: YAML syntax error: found unexpected end of stream"},
		{"reader: a control character, at it",
			"version: 1\npackage: x\x01y\n",
			"2:11: YAML syntax error: control characters are not allowed: U+0001"},
		{"reader: a byte that is not UTF-8, its column in characters",
			"version: 1\npackage: é\xff\n",
			"2:11: YAML syntax error: invalid leading UTF-8 octet: byte 0xff"},
		{"reader: after a byte order mark",
			"\ufeffversion: 1\x7f\n",
			"1:11: YAML syntax error: control characters are not allowed: U+007F"},
		{"scanner: a tab that indents, at it",
			"version: 1\npackage: x\nmessages:\n\tA: {}\n",
			"4:1: YAML syntax error: found character that cannot start any token"},
		{"scanner: a tab after spaces, at it",
			"version: 1\npackage: x\nmessages:\n  A:\n  \t versions: {}\n",
			"5:3: YAML syntax error: found character that cannot start any token"},
		{"scanner: a tab before a key, at it",
			"version: 1\n\tpackage: x\n",
			"2:1: YAML syntax error: found a tab character that violates indentation"},
		{"only the first error",
			"version: 1\npackage: [x\nmessages: {A: \"\n",
			"2:1: YAML syntax error: did not find expected ',' or ']'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff([]string{tc.want + stops}, errorsOf(t, tc.src)); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}

// An alias without an anchor before it, which yaml.v3 reports naming no
// line, is found again, and reported as the alias it is.
func TestAliasWithoutAnchor(t *testing.T) {
	wantErrors(t, "version: 1\npackage: x\nmessages:\n  A: {x: a*nope, y: \"*nopeish\", z: *nope}\n", []string{
		"4:36: alias *nope refers to no anchor before it: YAML aliases are not supported" +
			" (YAML parsing stops at the first syntax error: the file's other problems show once it is fixed) [YAML-ALIAS]",
	})
}

// A line break YAML counts and git does not (NEL, U+2028, U+2029, a
// carriage return alone) is refused where the file shows it: yaml.v3
// numbers lines by them, and every error after one named a line other
// than the one git, GitHub and an editor show. \r\n is a line end.
func TestLineBreaksGitDoesNotCount(t *testing.T) {
	const tail = "messages: {A: {versions: {1: {fields: {x: {type: strin}}}}}}\n"
	for _, tc := range []struct{ name, src, want string }{
		{"U+2028 in a quoted string", "version: 1\npackage: \"x\u2028y\"\n" + tail,
			`2:12: U+2028 ends a line to YAML, not to git or an editor: the lines of the errors after it would not be the file's (write it in a double-quoted string as "\u2028") [YAML-SYNTAX]`},
		{"NEL in a quoted string", "version: 1\npackage: 'x\u0085y'\n" + tail,
			`2:12: U+0085 ends a line to YAML, not to git or an editor: the lines of the errors after it would not be the file's (write it in a double-quoted string as "\u0085") [YAML-SYNTAX]`},
		{"a carriage return alone", "version: 1\npackage: \"x\ry\"\n" + tail,
			`2:12: a carriage return alone ends a line to YAML, not to git or an editor: the lines of the errors after it would not be the file's (end each line with \n or \r\n) [YAML-SYNTAX]`},
		{"CRLF line ends", "version: 1\r\npackage: x\r\n" + tail,
			`3:50: unknown type "strin" (did you mean "string"?) [UNKNOWN-TYPE]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff([]string{tc.want}, errorsOf(t, tc.src)); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}
