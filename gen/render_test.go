package gen

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/dave/jennifer/jen"
)

// A part gofmt refuses fails with gofmt's problem and the lines around it,
// not the whole source jennifer quotes: a large message's part is megabytes,
// on one line of a log once escaped.
func TestRenderErrorIsBounded(t *testing.T) {
	const n = 20000
	bad := func(j *jen.File) {
		for i := range n {
			j.Var().Id(fmt.Sprintf("v%d", i)).Op("=").Lit(i)
		}
		j.Comment("a\x00b")
		j.Var().Id("last").Op("=").Lit(0)
	}
	_, err := render(newFile("p"), []part{bad, bad})
	if err == nil {
		t.Fatal("a NUL in a comment rendered")
	}
	msg := err.Error()
	if len(msg) > 2*maxQuoted+200 {
		t.Errorf("the error is %d bytes, want at most %d", len(msg), 2*maxQuoted+200)
	}
	for _, want := range []string{"illegal character NUL", "// a\x00b", fmt.Sprintf("var v%d = %d\n", n-1, n-1), "(and 1 more parts of the file failed)"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the error lacks %q:\n%s", want, msg)
		}
	}
	if lines := regexp.MustCompile(`lines (\d+) to (\d+) of the part`).FindStringSubmatch(msg); lines == nil || len(lines[1]) != 5 {
		t.Errorf("the error quotes no lines near line %d:\n%s", n, msg)
	}
	// An error that quotes no source is cut too.
	if got := formatError(fmt.Errorf("%s", strings.Repeat("é", 1<<20))).Error(); len(got) > maxQuoted+64 || !strings.HasSuffix(got, " more bytes)") {
		t.Errorf("an unquoted error is %d bytes: %.80s...", len(got), got)
	}
}
