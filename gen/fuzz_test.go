package gen

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/lily-mq/lily/schema"
)

// FuzzGenerate checks that every schema the parser accepts generates Go
// that formats: a schema lilygen takes must never give code that does not
// compile. Its seeds are the schema package's corpus.
func FuzzGenerate(f *testing.F) {
	seeds, _ := filepath.Glob("../testdata/golden/*/schema.lily.yaml")
	for _, name := range seeds {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := schema.Parse("s.yaml", data)
		if err != nil {
			return
		}
		if _, err := Generate(s); err != nil {
			t.Fatalf("a schema the parser accepts does not generate: %v", err)
		}
	})
}
