package schema

import (
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// A schema's errors are bounded however long the text they quote: a value
// of more than 40 bytes is quoted by its first 37, then ..., and a whole
// message and a whole hint by at most maxText bytes as printed. Each case
// writes big, a value of 1 MiB, where its error quotes it.
func TestErrorsQuoteSchemaTextBounded(t *testing.T) {
	big := strings.Repeat("A", 1<<20)
	head := "version: 1\npackage: x\n"
	msg := "messages:\n  M:\n    versions:\n      1:\n        fields:\n"
	for _, tc := range []struct {
		name, src, rule string
	}{
		{"absolute include", head + "include: [\"/" + big + "\"]\n", RuleInclude},
		{"unreadable include", head + "include: [\"nope" + big + "\"]\n", RuleInclude},
		{"package", "version: 1\npackage: X" + big + "\n", RuleName},
		{"output", head + "output: \"/" + big + "\"\n", RuleOutput},
		{"asyncapi file", head + "asyncapi: {file: \"/" + big + "\"}\n", RuleOutput},
		{"duplicate enum value", head + msg + "          e: {type: enum, values: [" + big + ", " + big + "]}\n", RuleDuplicate},
		{"enum value without a letter", head + msg + "          e: {type: enum, values: [\"" + strings.Repeat("-", 1<<20) + "\"]}\n", RuleName},
		{"content_type_parameter", head + "envelopes:\n  e: {kind: headers, type: {header: t}, version: {content_type_parameter: \"a b" + big + "\"}}\n", RuleEnvelope},
		{"example number", head + msg + "          id: {type: number}\n        examples:\n          - body: {id: !!float \"x" + big + "\"}\n", RuleExample},
		{"envelope name", head + "envelopes:\n  ? E" + big + "\n  : {}\n", RuleMissingKey},
		{"negative duration", head + "queues:\n  q: {handler_timeout: \"-" + strings.Repeat("0", 1<<20) + "1s\", consumes: [{message: M}]}\n", RuleDuration},
		{"unknown anchor", head + "messages:\n  A: *" + big + "\n", RuleAlias},
	} {
		t.Run(tc.name, func(t *testing.T) {
			read := func(string, int) ([]byte, error) { return nil, os.ErrNotExist }
			_, err := parse("s.yaml", []byte(tc.src), read)
			var list ErrorList
			if !errors.As(err, &list) {
				t.Fatalf("want an ErrorList, got %v", err)
			}
			found := false
			for _, e := range list {
				line := e.Error()
				if len(line) > 512 {
					t.Errorf("a line of %d bytes: %.512s", len(line), line)
				}
				if !regexp.MustCompile(`^s\.yaml:\d+:\d+: .* \[[A-Z-]+\]$`).MatchString(line) {
					t.Errorf("no position or rule: %.512s", line)
				}
				found = found || e.Rule == tc.rule && strings.Contains(e.Msg, "...")
			}
			if !found {
				t.Errorf("no %s error quoting the value shortened in\n%.2000s", tc.rule, list.Error())
			}
		})
	}
}

// However an error is made, its message and its hint are bounded, and
// what is cut ends in ...; text within the bound is kept as it is.
func TestErrorTextIsBounded(t *testing.T) {
	p := newParser(nil)
	p.name = "s.yaml"
	long := strings.Repeat("\x1b", 1<<20)
	e := p.errorf(&yaml.Node{Line: 1, Column: 1}, RuleKind, "%s", long)
	e.Hint = long
	short := p.errorf(&yaml.Node{Line: 1, Column: 1}, RuleKind, "%s", strings.Repeat("é", maxText/2))
	short.Hint = "kept"
	list := p.errs.sorted([]string{"s.yaml"})
	if n := len(list[0].Error()); n > 2*maxText+100 {
		t.Errorf("a line of %d bytes, want at most %d", n, 2*maxText+100)
	}
	if !strings.HasSuffix(list[0].Msg, "...") || !strings.HasSuffix(list[0].Hint, "...") {
		t.Errorf("cut text does not end in ...")
	}
	if list[1].Msg != strings.Repeat("é", maxText/2) || list[1].Hint != "kept" {
		t.Errorf("text within the bound was cut")
	}
}
