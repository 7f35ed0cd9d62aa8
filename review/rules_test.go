package review

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

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
