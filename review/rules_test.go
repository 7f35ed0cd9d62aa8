package review

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lily-mq/lily/schema"
	"github.com/lily-mq/lily/schema/rules"
)

func read(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestRulesDocumented keeps the rule tables of docs/lilygen.md, the breaking
// rules (rule, category, change) and the lint rules (rule, finding), the same
// as rules.All.
func TestRulesDocumented(t *testing.T) {
	row := regexp.MustCompile("(?m)^\\| `([A-Z]+(?:-[A-Z]+)+)` \\| (?:([A-Z]+) \\| )?(.+) \\|$")
	var documented []rules.Rule
	for _, m := range row.FindAllStringSubmatch(read(t, filepath.Join("..", "docs", "lilygen.md")), -1) {
		c := rules.Category(m[2])
		if c == "" {
			c = rules.Lint
		}
		documented = append(documented, rules.Rule{ID: m[1], Category: c, Meaning: m[3]})
	}
	byID := func(a, b rules.Rule) int { return strings.Compare(a.ID, b.ID) }
	if diff := cmp.Diff(slices.SortedFunc(slices.Values(rules.All), byID), slices.SortedFunc(slices.Values(documented), byID)); diff != "" {
		t.Errorf("rules (-rules.All +docs/lilygen.md):\n%s", diff)
	}
}

// TestRulesReported requires every rule to be reported somewhere: each
// variable rules declares is used by the breaking or lint checks.
func TestRulesReported(t *testing.T) {
	ids := func(re *regexp.Regexp, text string) []string {
		var out []string
		for _, m := range re.FindAllStringSubmatch(text, -1) {
			if !slices.Contains(out, m[1]) {
				out = append(out, m[1])
			}
		}
		slices.Sort(out)
		return out
	}
	declared := ids(regexp.MustCompile(`(?m)^\t(\w+)\s+= Rule\{`), read(t, filepath.Join("..", "schema", "rules", "rules.go")))
	used := ids(regexp.MustCompile(`\brules\.(\w+)\b`), read(t, "breaking.go")+read(t, "lint.go"))
	used = slices.DeleteFunc(used, func(name string) bool { return name == "Rule" })
	if len(declared) != len(rules.All) {
		t.Errorf("rules.go declares %d rules, rules.All lists %d", len(declared), len(rules.All))
	}
	if diff := cmp.Diff(declared, used); diff != "" {
		t.Errorf("rules (-declared +used by breaking.go and lint.go):\n%s", diff)
	}
}

// ruleCases produce rules' findings from the smallest change to base that
// shows each: the edits old and new, pairs of text in base and its
// replacement, give the two revisions.
var ruleCases = []struct {
	rule     rules.Rule
	old, new []string
	// model changes the old revision in what no schema can say yet.
	model            func(old *schema.File)
	subject, message string
}{
	{rule: rules.OutputChanged,
		new:     []string{"package: shopmsg\n", "package: shopmsg\noutput: gen\n"},
		subject: "gen", message: "the generated file moves from . to gen, which changes its import path"},
	{rule: rules.MessageRemoved,
		old:     []string{"queues:\n", "  Refunded:\n    versions:\n      1: {}\nqueues:\n"},
		subject: "Refunded", message: "message Refunded is removed with its generated types and extractors"},
	// Lily reads only application/json for now, so an old revision
	// accepting another content type is one a later schema may state.
	{rule: rules.ContentTypeRemoved,
		model: func(old *schema.File) {
			v := old.Messages[0].Versions[0]
			v.ContentTypes = append(v.ContentTypes, "application/x-protobuf")
		},
		subject: "OrderPlaced.v1", message: "OrderPlaced version 1 is no longer accepted as application/x-protobuf"},
	{rule: rules.FieldNullRefused,
		old: []string{
			"order_id: {type: string, required: true, max_length: 64}\n          amount",
			"order_id: {type: string, required: true, nullable: true, max_length: 64}\n          amount",
		},
		subject: "OrderPlaced.v1.order_id",
		message: "OrderPlaced.v1.order_id no longer accepts null: messages already queued, and producers on the old schema, may send it"},
	{rule: rules.ExampleRejectedByOld,
		old:     []string{"max_length: 64}\nqueues:", "max_length: 5}\nqueues:"},
		new:     []string{"max_length: 64}\nqueues:", "max_length: 64}\n        examples:\n          - body: {order_id: abcdefgh}\nqueues:"},
		subject: "OrderPlaced.v2.examples.1",
		message: "example 1 of OrderPlaced.v2 fails the old schema: field order_id: longer than 5 characters"},
}

// TestRuleFindings produces each case's finding, by Breaking from the old
// revision to the new or, for a lint rule, by Lint of the new, and checks
// its subject, message and place.
func TestRuleFindings(t *testing.T) {
	today := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	for _, tc := range ruleCases {
		t.Run(tc.rule.ID, func(t *testing.T) {
			new := parse(t, "new.lily.yaml", edit(t, tc.new...))
			var found []Finding
			if tc.rule.Category == rules.Lint {
				found = Lint(new, today)
			} else {
				old := parse(t, "old.lily.yaml", edit(t, tc.old...))
				if tc.model != nil {
					tc.model(old)
				}
				found = Breaking(old, new)
			}
			i := slices.IndexFunc(found, func(f Finding) bool { return f.Rule == tc.rule.ID && f.Subject == tc.subject })
			if i < 0 {
				t.Fatalf("no %s@%s among the findings %+v", tc.rule.ID, tc.subject, found)
			}
			f := found[i]
			if f.Message != tc.message {
				t.Errorf("message\n%s\nwant\n%s", f.Message, tc.message)
			}
			if f.Category != tc.rule.Category || f.File != "new.lily.yaml" || f.Line < 1 || f.Column < 1 || f.Migration == "" {
				t.Errorf("finding without its category, place or migration: %+v", f)
			}
		})
	}
}
