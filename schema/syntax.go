package schema

import (
	"bytes"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// syntaxLine is how yaml.v3 names the line of a syntax error, when it does.
var syntaxLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// parserProblems are the messages of yaml.v3's parser, whose lines count
// from 0.
var parserProblems = []string{
	"did not find expected <stream-start>",
	"did not find expected <document start>",
	"did not find expected node content",
	"did not find expected '-' indicator",
	"did not find expected key",
	"did not find expected ',' or ']'",
	"did not find expected ',' or '}'",
	"found undefined tag handle",
	"found duplicate %YAML directive",
	"found duplicate %TAG directive",
	"found incompatible YAML document",
}

// readerProblems are the messages of yaml.v3's reader about UTF-8 input,
// which name no line.
var readerProblems = []string{
	"invalid leading UTF-8 octet",
	"invalid trailing UTF-8 octet",
	"incomplete UTF-8 octet sequence",
	"invalid length of a UTF-8 sequence",
	"invalid Unicode character",
	"control characters are not allowed",
}

// lineBreak is what yaml.v3 counts as the end of a line.
var lineBreak = regexp.MustCompile("\r\n|[\r\n\u0085\u2028\u2029]")

// syntaxError reports the YAML syntax error err of data. yaml.v3 stops at
// the first syntax error of a file, names no column, and names the line, if
// past the first, in a way that depends on which of its parts found it:
//
//   - its scanner (quotes, indentation, stray characters) counts from 1;
//   - its parser (structure: a missing key, an unclosed [ or {) counts from
//     0, so it names the line before the one it means;
//   - its reader (bytes that are not UTF-8, control characters) names none,
//     but the character is found again here;
//   - its decoder (an alias with no anchor before it) names none, but the
//     alias is found again here, and reported as an alias (RuleAlias).
//
// The line meant is that of the error's context, such as the { of an
// unclosed flow mapping, or else of the token that did not fit. The error
// points at its first non-blank character unless the character at fault is
// known: a tab that indents the line, an alias.
func (p *parser) syntaxError(data []byte, err error) {
	data = bytes.TrimPrefix(data, []byte("\ufeff")) // yaml.v3 skips the BOM
	line, col, msg := 1, 0, strings.TrimPrefix(err.Error(), "yaml: ")
	if m := syntaxLine.FindStringSubmatch(err.Error()); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
		if slices.Contains(parserProblems, msg) {
			line++
		}
	} else if slices.Contains(readerProblems, msg) {
		if at, what, ok := badChar(data); ok {
			line, col = position(data, at)
			msg += ": " + what
		}
	}
	rule, text := RuleSyntax, "YAML syntax error: "+msg
	if name, ok := unknownAnchor(msg); ok {
		// An alias without an anchor before it, which yaml.v3 reports
		// while it reads: one with its anchor is refused where it is used
		// (kind).
		rule, text = RuleAlias, fmt.Sprintf("alias *%s refers to no anchor before it: YAML aliases are not supported", shorten(name))
		if at, ok := aliasAt(data, name); ok {
			line, col = position(data, at)
		}
	}
	lines := lineBreak.Split(string(data), -1)
	line = min(max(line, 1), len(lines))
	if col == 0 {
		indent := len(lines[line-1]) - len(strings.TrimLeft(lines[line-1], " \t"))
		col = 1 + indent
		if tab := strings.IndexByte(lines[line-1][:indent], '\t'); tab >= 0 && slices.Contains(tabProblems, msg) {
			col = 1 + tab // the indentation's first tab, after spaces alone
		}
	}
	p.errorf(&yaml.Node{Line: line, Column: col}, rule, "%s", text).
		Hint = "YAML parsing stops at the first syntax error: the file's other problems show once it is fixed"
}

// tabProblems are the messages of yaml.v3's scanner about a line that a tab
// indents: the tab is the character at fault.
var tabProblems = []string{
	"found a tab character that violates indentation",
	"found character that cannot start any token",
}

// unknownAnchor returns the name in yaml.v3's message about an alias whose
// anchor it has not read, which names no line.
func unknownAnchor(msg string) (string, bool) {
	name, ok := strings.CutPrefix(msg, "unknown anchor '")
	if !ok {
		return "", false
	}
	return strings.CutSuffix(name, "' referenced")
}

// aliasAt finds the first alias *name in data: * after a blank, [, { or ,
// or at the start, and name not followed by a character an anchor's name
// may hold, as yaml.v3 reads them.
func aliasAt(data []byte, name string) (int, bool) {
	alias := []byte("*" + name)
	for from := 0; ; {
		i := bytes.Index(data[from:], alias)
		if i < 0 {
			return 0, false
		}
		at, end := from+i, from+i+len(alias)
		before := at == 0 || strings.IndexByte(" \t\r\n[{,", data[at-1]) >= 0
		if before && (end == len(data) || !anchorChar(data[end])) {
			return at, true
		}
		from = end
	}
}

// anchorChar reports whether yaml.v3 takes c in an anchor's or an alias's
// name.
func anchorChar(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c == '-'
}

// badChar finds the first character of data that yaml.v3's reader refuses,
// and shows it: a byte that is not UTF-8, or a control character other than
// tab and the line breaks. It finds none in UTF-16, which the reader takes
// after a byte order mark.
func badChar(data []byte) (at int, what string, ok bool) {
	if bytes.HasPrefix(data, []byte{0xff, 0xfe}) || bytes.HasPrefix(data, []byte{0xfe, 0xff}) {
		return 0, "", false
	}
	for at < len(data) {
		r, n := utf8.DecodeRune(data[at:])
		switch {
		case r == utf8.RuneError && n == 1:
			return at, fmt.Sprintf("byte %#02x", data[at]), true
		case !yamlChar(r):
			return at, fmt.Sprintf("%U", r), true
		}
		at += n
	}
	return 0, "", false
}

// yamlChar reports whether YAML allows r in a stream.
func yamlChar(r rune) bool {
	return r == '\t' || r == '\n' || r == '\r' || r >= 0x20 && r <= 0x7e || r == 0x85 ||
		r >= 0xa0 && r <= 0xd7ff || r >= 0xe000 && r <= 0xfffd || r >= 0x10000 && r <= 0x10ffff
}

// yamlOnlyBreak finds the first line break yaml.v3 counts that git, GitHub
// and an editor do not: U+0085, U+2028, U+2029, or a carriage return not
// before a newline. yaml.v3 numbers the lines of its nodes by them, so
// every error after one would name a line other than the one the file
// shows there. It returns the break's offset, what it is, and how to
// write what it means instead. A file in UTF-16 is not looked at, as
// badChar does not look at one.
func yamlOnlyBreak(data []byte) (at int, what, fix string, ok bool) {
	if bytes.HasPrefix(data, []byte{0xff, 0xfe}) || bytes.HasPrefix(data, []byte{0xfe, 0xff}) {
		return 0, "", "", false
	}
	for at < len(data) {
		r, n := utf8.DecodeRune(data[at:])
		switch {
		case r == 0x85 || r == 0x2028 || r == 0x2029:
			return at, fmt.Sprintf("%U", r), fmt.Sprintf(`write it in a double-quoted string as "\u%04x"`, r), true
		case r == '\r' && (at+1 == len(data) || data[at+1] != '\n'):
			return at, "a carriage return alone", `end each line with \n or \r\n`, true
		}
		at += n
	}
	return 0, "", "", false
}

// gitPosition is the line and column, counted from 1 as position counts
// them but with lines ended by \n alone, of the byte at offset at of data.
func gitPosition(data []byte, at int) (line, col int) {
	start := bytes.LastIndexByte(data[:at], '\n') + 1
	return 1 + bytes.Count(data[:at], []byte("\n")), 1 + utf8.RuneCount(data[start:at])
}

// position is the line and column, counted from 1 in characters as yaml.v3
// counts them, of the byte at offset at of data.
func position(data []byte, at int) (line, col int) {
	lines := lineBreak.Split(string(data[:at]), -1)
	return len(lines), 1 + utf8.RuneCountInString(lines[len(lines)-1])
}
