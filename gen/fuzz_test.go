package gen

import (
	"bytes"
	"errors"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/lily-mq/lily/schema"
)

// FuzzGenerate checks that every schema the parser accepts generates Go
// that compiles, type-checked against the packages it imports (the runtime,
// the wire codec and the standard library's), that its parts, formatted
// apart, come out as rendering and formatting the file in one piece would
// give, and that its imports are grouped as goimports would group them.
// Its seeds are the golden schemas.
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
		out, err := Generate(s)
		if err != nil {
			t.Fatalf("a schema the parser accepts does not generate: %v", err)
		}
		if err := typeCheck(s.Package, out.Content); err != nil {
			t.Fatalf("a schema the parser accepts generates code that does not compile:\n%v\n\n%s", err, out.Content)
		}
		whole, parts := layout(s)
		for _, p := range parts {
			p(whole)
		}
		var want bytes.Buffer
		if err := whole.Render(&want); err != nil {
			t.Fatalf("the file in one piece does not render: %v", err)
		}
		// jennifer writes one import block, in one group.
		got, gotImports := cutImports(t, out.Content)
		whole1, wantImports := cutImports(t, want.Bytes())
		if !bytes.Equal(got, whole1) || gotImports.names != wantImports.names {
			t.Fatalf("the parts formatted apart differ from the file formatted in one piece:\n%s\n\nin one piece:\n%s", out.Content, want.Bytes())
		}
		if !gotImports.grouped {
			t.Fatalf("the imports are not the standard library's, then the others:\n%s", out.Content)
		}
	})
}

// importBlock is what cutImports reads of a file's import declaration: its
// specs as written, one a line, in order, and whether they are grouped as
// goimports groups them: the standard library's packages, then a blank
// line, then the others.
type importBlock struct {
	names   string
	grouped bool
}

// cutImports returns src without its import declaration, and the block.
func cutImports(t *testing.T, src []byte) ([]byte, importBlock) {
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, "", src, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	if len(file.Decls) == 0 {
		return src, importBlock{grouped: true}
	}
	decl := file.Decls[0].(*ast.GenDecl)
	var specs []string
	b := importBlock{grouped: true}
	prevLine, prevStd := 0, true
	for i, s := range decl.Specs {
		spec := s.(*ast.ImportSpec)
		path := strings.Trim(spec.Path.Value, `"`)
		std := !strings.Contains(strings.Split(path, "/")[0], ".")
		line := fset.Position(spec.Pos()).Line
		name := path
		if spec.Name != nil {
			name = spec.Name.Name + " " + path
		}
		specs = append(specs, name)
		switch {
		case i == 0:
		case std && !prevStd: // a standard package after another
			b.grouped = false
		case std == prevStd && line != prevLine+1, std != prevStd && line != prevLine+2:
			b.grouped = false
		}
		prevLine, prevStd = line, std
	}
	slices.Sort(specs)
	b.names = strings.Join(specs, "\n")
	start, end := fset.Position(decl.Pos()).Offset, fset.Position(decl.End()).Offset
	return append(slices.Clip(src[:start]), src[end:]...), b
}

// typeCheck type-checks src, one file of package pkg, and returns all of its
// errors.
func typeCheck(pkg string, src []byte) error {
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, pkg+".lily.go", src, parser.SkipObjectResolution)
	if err != nil {
		return err
	}
	var errs []error
	conf := types.Config{Importer: exportData(), Error: func(err error) { errs = append(errs, err) }}
	conf.Check(pkg, fset, []*ast.File{file}, nil)
	return errors.Join(errs...)
}

// exportData imports packages from the export data the compiler wrote for
// them, which go list -export finds in the build cache (building it once if
// need be). The importer keeps every package it has read, so each path costs
// one go list per process, and an input costs only its own type-check.
var exportData = sync.OnceValue(func() types.Importer {
	return importer.ForCompiler(token.NewFileSet(), "gc", func(path string) (io.ReadCloser, error) {
		out, err := exec.Command("go", "list", "-export", "-f", "{{.Export}}", path).Output()
		if exitErr, ok := errors.AsType[*exec.ExitError](err); ok {
			return nil, errors.New(strings.TrimSpace(string(exitErr.Stderr)))
		} else if err != nil {
			return nil, err
		}
		return os.Open(strings.TrimSpace(string(out)))
	})
})
