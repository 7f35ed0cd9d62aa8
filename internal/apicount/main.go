// Command apicount counts the public face of Lily's runtime: the exported
// identifiers of the root runtime package, and of every package under
// runtime/ that is not internal together with the wire package. It counts
// top-level names, exported methods, exported struct fields and interface
// methods, each once, and fails when a count is over its limit, so that make
// test keeps the front door small. -v lists what it counted.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// The limits issue 11 set for consuming, raised by 20 when the root package
// took on publishing and running a service (issue 15), and by 20 again when
// it took on telemetry, health and the duplicate count, with a public test
// harness beside it (issue 16): a user still reads it on one page.
const (
	rootLimit   = 140
	publicLimit = 200
)

func main() {
	verbose := flag.Bool("v", false, "list every identifier counted")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: go run ./internal/apicount [-v] (from the repository root)")
		flag.PrintDefaults()
	}
	flag.Parse()
	dirs, err := publicDirs()
	if err != nil {
		fail(err)
	}
	total := 0
	var root int
	for _, dir := range dirs {
		names, err := exported(dir)
		if err != nil {
			fail(err)
		}
		fmt.Printf("%-24s %3d\n", dir, len(names))
		if *verbose {
			for _, n := range names {
				fmt.Println("    " + n)
			}
		}
		if dir == "runtime" {
			root = len(names)
		}
		total += len(names)
	}
	fmt.Printf("root runtime package: %d of at most %d\n", root, rootLimit)
	fmt.Printf("runtime's public packages and wire: %d of at most %d\n", total, publicLimit)
	if root > rootLimit || total > publicLimit {
		fmt.Fprintln(os.Stderr, "apicount: the runtime's public face is over its limit")
		os.Exit(1)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "apicount:", err)
	os.Exit(2)
}

// publicDirs lists runtime, the packages under it outside internal/ and
// testdata/, and wire, in that order.
func publicDirs() ([]string, error) {
	var dirs []string
	err := filepath.WalkDir("runtime", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if name := d.Name(); name == "internal" || name == "testdata" {
			return filepath.SkipDir
		}
		if hasGo(path) {
			dirs = append(dirs, filepath.ToSlash(path))
		}
		return nil
	})
	return append(dirs, "wire"), err
}

func hasGo(dir string) bool {
	entries, _ := os.ReadDir(dir)
	return slices.ContainsFunc(entries, func(e fs.DirEntry) bool { return source(e.Name()) })
}

func source(name string) bool {
	return strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go")
}

// exported returns the exported identifiers of the package in dir, sorted.
func exported(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	var names []string
	for _, e := range entries {
		if !source(e.Name()) {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, 0)
		if err != nil {
			return nil, err
		}
		for _, d := range f.Decls {
			names = append(names, declared(d)...)
		}
	}
	slices.Sort(names)
	return names, nil
}

func declared(d ast.Decl) []string {
	var names []string
	switch d := d.(type) {
	case *ast.FuncDecl:
		if !d.Name.IsExported() {
			return nil
		}
		if d.Recv == nil {
			return []string{d.Name.Name}
		}
		if recv := receiver(d.Recv.List[0].Type); ast.IsExported(recv) {
			return []string{recv + "." + d.Name.Name}
		}
	case *ast.GenDecl:
		for _, spec := range d.Specs {
			switch s := spec.(type) {
			case *ast.ValueSpec:
				for _, n := range s.Names {
					if n.IsExported() {
						names = append(names, n.Name)
					}
				}
			case *ast.TypeSpec:
				if s.Name.IsExported() {
					names = append(names, s.Name.Name)
					names = append(names, members(s.Name.Name, s.Type)...)
				}
			}
		}
	}
	return names
}

// receiver names a method's receiver type, without its pointer or type parameters.
func receiver(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return receiver(t.X)
	case *ast.IndexExpr:
		return receiver(t.X)
	case *ast.IndexListExpr:
		return receiver(t.X)
	case *ast.Ident:
		return t.Name
	}
	return ""
}

// members lists the exported fields of a struct type and the methods of an
// interface type, with those of struct types nested in them.
func members(owner string, e ast.Expr) []string {
	var names []string
	switch t := e.(type) {
	case *ast.StructType:
		for _, f := range t.Fields.List {
			if len(f.Names) == 0 {
				if embedded := receiver(f.Type); ast.IsExported(embedded) {
					names = append(names, owner+"."+embedded)
				}
				continue
			}
			for _, n := range f.Names {
				if n.IsExported() {
					names = append(names, owner+"."+n.Name)
					names = append(names, members(owner+"."+n.Name, f.Type)...)
				}
			}
		}
	case *ast.InterfaceType:
		for _, m := range t.Methods.List {
			for _, n := range m.Names {
				if n.IsExported() {
					names = append(names, owner+"."+n.Name)
				}
			}
		}
	}
	return names
}
