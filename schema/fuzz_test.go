package schema

import (
	"errors"
	"testing"
	"unicode/utf8"

	// Defines -update, which go test ./... -update hands every test binary.
	_ "github.com/lily-mq/lily/internal/update"
)

// FuzzParse checks that no input makes the parser panic, and that every
// error it reports is positioned inside the input. The seed corpus, in
// testdata/fuzz/FuzzParse, holds every golden schema and the example's.
func FuzzParse(f *testing.F) {
	f.Add([]byte(valid))
	f.Add([]byte(features))
	noFiles := func(string) ([]byte, error) { return nil, errors.New("no files while fuzzing") }
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
