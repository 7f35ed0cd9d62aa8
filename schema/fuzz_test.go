package schema

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"unicode/utf8"

	// Defines -update, which go test ./... -update hands every test binary.
	_ "github.com/lily-mq/lily/internal/update"
)

// FuzzParse checks that no input makes the parser panic, and that every
// error it reports is positioned inside the input. Its seeds are every
// schema of the golden cases and the example's, read where they live so
// that a new case seeds it too, and the inputs the fuzzer found, in
// testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	f.Add([]byte(valid))
	f.Add([]byte(features))
	schemas, err := filepath.Glob("../testdata/golden/*/*.lily.yaml")
	if err != nil || len(schemas) == 0 {
		f.Fatalf("no golden schemas to seed with: %v", err)
	}
	for _, name := range append(schemas, "../examples/orders/orders.lily.yaml") {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	noFiles := func(string, int) ([]byte, error) { return nil, errors.New("no files while fuzzing") }
	f.Fuzz(func(t *testing.T, data []byte) {
		_, err := parse("s.yaml", data, noFiles)
		if err == nil {
			return
		}
		var list ErrorList
		if !errors.As(err, &list) || len(list) == 0 {
			t.Fatalf("want a non-empty ErrorList, got %v", err)
		}
		lines := lineBreak.Split(string(data), -1)
		for _, e := range list {
			if e.File != "s.yaml" || e.Rule == "" || e.Msg == "" {
				t.Errorf("incomplete error %#v", e)
			}
			if e.Line < 1 || e.Line > len(lines) {
				t.Fatalf("%v: line outside the input's %d lines", e, len(lines))
			}
			if width := utf8.RuneCountInString(lines[e.Line-1]); e.Column < 1 || e.Column > width+1 {
				t.Fatalf("%v: column outside line %d's %d characters", e, e.Line, width)
			}
		}
	})
}
