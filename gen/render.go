package gen

import (
	"bytes"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"maps"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/dave/jennifer/jen"
)

// A part writes some of a file's top-level declarations.
type part func(j *jen.File)

// render builds, renders and gofmt's each part on its own, in parallel, since
// formatting is most of the work, then joins them, in order, under head's
// header and one import block of what they refer to. Each part begins with a
// declaration's doc comment, so one blank line between parts is what
// gofmt'ing the whole file in one piece gives (FuzzGenerate compares the
// two).
func render(head *jen.File, parts []part) ([]byte, error) {
	bodies := make([][]byte, len(parts))
	used := make([]map[string]string, len(parts))
	errs := make([]error, len(parts))
	panics := make([]any, len(parts))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(len(parts), runtime.GOMAXPROCS(0)) {
		wg.Go(func() {
			for i := range next {
				func() {
					// A bug in a builder panics on the caller's goroutine, as
					// it would have without the workers.
					defer func() { panics[i] = recover() }()
					bodies[i], used[i], errs[i] = renderPart(parts[i])
				}()
			}
		})
	}
	for i := range parts {
		next <- i
	}
	close(next)
	wg.Wait()
	for _, p := range panics {
		if p != nil {
			panic(p)
		}
	}
	// The first failure, bounded (formatError): a fault in a builder fails
	// each part it writes alike.
	if failed := slices.DeleteFunc(errs, func(err error) bool { return err == nil }); len(failed) > 0 {
		if len(failed) > 1 {
			return nil, fmt.Errorf("%w (and %d more parts of the file failed)", failed[0], len(failed)-1)
		}
		return nil, failed[0]
	}
	names := map[string]string{}
	for _, u := range used {
		for path, name := range u {
			if other, ok := names[path]; ok && other != name {
				return nil, fmt.Errorf("two parts name package %s apart: %q and %q", path, other, name)
			}
			names[path] = name
		}
	}
	var out bytes.Buffer
	if err := head.Render(&out); err != nil {
		return nil, err
	}
	writeImports(&out, names)
	for _, b := range bodies {
		if len(b) > 0 {
			out.WriteByte('\n')
			out.Write(b)
			out.WriteByte('\n')
		}
	}
	return out.Bytes(), nil
}

// writeImports writes the import block of names (each path and the name it
// is imported under, empty for none) as goimports groups it: the standard
// library's packages (a first path element without a dot), then the others,
// each group sorted by path, as gofmt keeps it.
func writeImports(out *bytes.Buffer, names map[string]string) {
	if len(names) == 0 {
		return
	}
	spec := func(path string) string {
		if name := names[path]; name != "" {
			return name + " " + strconv.Quote(path)
		}
		return strconv.Quote(path)
	}
	paths := slices.Sorted(maps.Keys(names))
	if len(paths) == 1 {
		fmt.Fprintf(out, "\nimport %s\n", spec(paths[0]))
		return
	}
	var std, other []string
	for _, path := range paths {
		if first, _, _ := strings.Cut(path, "/"); strings.Contains(first, ".") {
			other = append(other, path)
		} else {
			std = append(std, path)
		}
	}
	out.WriteString("\nimport (\n")
	for _, path := range std {
		fmt.Fprintf(out, "\t%s\n", spec(path))
	}
	if len(std) > 0 && len(other) > 0 {
		out.WriteByte('\n')
	}
	for _, path := range other {
		fmt.Fprintf(out, "\t%s\n", spec(path))
	}
	out.WriteString(")\n")
}

// renderPart renders and formats one part, and says how it named the
// packages it imports.
func renderPart(p part) ([]byte, map[string]string, error) {
	code, registry := jen.NewFile(""), newFile("p")
	p(code)
	var body bytes.Buffer
	if err := code.Group.RenderWithFile(&body, registry); err != nil {
		return nil, nil, formatError(err)
	}
	// registry holds no code: rendered, it is a package clause and the import
	// block of what the part referred to.
	registry.NoFormat = true
	var clause bytes.Buffer
	if err := registry.Render(&clause); err != nil {
		return nil, nil, err
	}
	names, err := imports(clause.Bytes())
	if err != nil {
		return nil, nil, err
	}
	return bytes.TrimSpace(body.Bytes()), names, nil
}

// maxQuoted bounds the generated source a render error quotes.
const maxQuoted = 2 << 10

// formatLine finds the line of the first problem gofmt reports, in the error
// jennifer makes of it.
var formatLine = regexp.MustCompile(`^Error (?:[^:\n]*:)?(\d+):\d+: `)

// formatError bounds the error jennifer returns when gofmt refuses what a
// part rendered: it quotes the whole source after the problem, megabytes
// for a large message, on one line of a log once escaped. It keeps
// gofmt's problem and quotes the lines around the first one, at most
// maxQuoted bytes.
func formatError(err error) error {
	msg := err.Error()
	problem, src, ok := strings.Cut(msg, " while formatting source:\n")
	if !ok {
		return errors.New(clipText(msg, maxQuoted))
	}
	lines := strings.Split(src, "\n")
	from, to := 0, len(lines)
	if m := formatLine.FindStringSubmatch(problem); m != nil {
		if n, err := strconv.Atoi(m[1]); err == nil && n >= 1 && n <= len(lines) {
			from, to = max(n-3, 0), min(n+2, len(lines))
		}
	}
	return fmt.Errorf("%s while formatting source; lines %d to %d of the part:\n%s",
		clipText(problem, maxQuoted), from+1, to, clipText(strings.Join(lines[from:to], "\n"), maxQuoted))
}

// clipText cuts s to at most n bytes, at a character's start, saying how much
// it left out.
func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d more bytes)", s[:cut], len(s)-cut)
}

// imports reads the import block of src: each path and the name it is
// imported under, empty for none.
func imports(src []byte) (map[string]string, error) {
	parsed, err := parser.ParseFile(token.NewFileSet(), "", src, parser.ImportsOnly)
	if err != nil {
		return nil, fmt.Errorf("reading the imports jennifer wrote: %w", err)
	}
	names := make(map[string]string, len(parsed.Imports))
	for _, spec := range parsed.Imports {
		path, err := strconv.Unquote(spec.Path.Value)
		if err != nil {
			return nil, err
		}
		names[path] = ""
		if spec.Name != nil {
			names[path] = spec.Name.Name
		}
	}
	return names, nil
}

// newFile is a jennifer file of package pkg that names the packages generated
// code imports the same way every time.
func newFile(pkg string) *jen.File {
	j := jen.NewFile(pkg)
	// Named explicitly, so that no tool has to guess the package's name.
	j.ImportAlias(rt, "runtime")
	j.ImportName(wire, "wire")
	j.ImportName(topo, "topology")
	j.ImportName(envPkg, "envelope")
	return j
}
