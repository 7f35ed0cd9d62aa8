package update

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every test package of the module imports this package, or `go test ./...
// -update` fails in the one that does not: its binary rejects the flag.
func TestEveryTestPackageDefinesTheFlag(t *testing.T) {
	const imp = `"github.com/lily-mq/lily/internal/update"`
	root := filepath.Join("..", "..")
	tests := map[string]bool{} // directory → a test file imports this package
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			skip := strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" ||
				(path != root && exists(filepath.Join(path, "go.mod"))) // another module
			if skip && path != root {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		dir := filepath.Dir(path)
		tests[dir] = tests[dir] || strings.Contains(string(src), imp)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for dir, ok := range tests {
		if !ok {
			t.Errorf("%s: no test file imports %s", dir, imp)
		}
	}
	if len(tests) < 5 {
		t.Errorf("found %d test packages; the walk missed the module", len(tests))
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
