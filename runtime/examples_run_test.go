package runtime_test

import (
	"go/doc"
	"go/parser"
	"go/token"
	"regexp"
	"slices"
	"testing"
)

// The package's examples compile and run in go test, as DESIGN.md's house
// style asks: each one either checks its output, or is one that needs a
// broker by its nature and is named as such at the top of its file, so that
// a reader of the file knows which run and why the others do not.
func TestExamplesRunOrSayWhyNot(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "example_test.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var named []string // in the comments above the package clause
	for _, c := range f.Comments {
		if c.End() < f.Package {
			named = append(named, regexp.MustCompile(`\bExample(?:[A-Z_]\w*)?\b`).FindAllString(c.Text(), -1)...)
		}
	}
	var compileOnly []string
	for _, ex := range doc.Examples(f) {
		name := "Example" + ex.Name
		if ex.Output != "" {
			if slices.Contains(named, name) {
				t.Errorf("%s checks its output but the file's comment calls it compile-only", name)
			}
			continue
		}
		compileOnly = append(compileOnly, name)
		if !slices.Contains(named, name) {
			t.Errorf("%s has no // Output: (go test never runs it), and the file's comment does not say it needs a broker", name)
		}
	}
	for _, name := range named {
		if !slices.Contains(compileOnly, name) {
			t.Errorf("the file's comment names %s as compile-only, but no such example is", name)
		}
	}
}
