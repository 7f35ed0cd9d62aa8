package review

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestRulesDocumented keeps the rule tables of docs/lilygen.md in step with
// the rules this package reports.
func TestRulesDocumented(t *testing.T) {
	read := func(path string) string {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
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
	var code string
	for _, name := range []string{"breaking.go", "lint.go"} {
		code += read(name)
	}
	reported := ids(regexp.MustCompile(`add\((?:\w+, )?"([A-Z]+(?:-[A-Z]+)+)"`), code)
	documented := ids(regexp.MustCompile("(?m)^\\| `([A-Z]+(?:-[A-Z]+)+)` \\|"), read(filepath.Join("..", "docs", "lilygen.md")))
	if len(reported) < 20 {
		t.Fatalf("found only %d rules in the code: %v", len(reported), reported)
	}
	if diff := cmp.Diff(reported, documented); diff != "" {
		t.Errorf("rules (-reported +documented in docs/lilygen.md):\n%s", diff)
	}
}
