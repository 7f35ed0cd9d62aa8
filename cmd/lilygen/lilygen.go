package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/lily-mq/lily/gen"
	"github.com/lily-mq/lily/schema"
)

// Exit codes.
const (
	exitOK    = 0
	exitStale = 1 // check found a stale or missing file, or a file could not be written
	exitUsage = 2 // bad arguments or schema errors
)

const usage = `lilygen generates typed RabbitMQ consumers from Lily schema files.

Usage:
  lilygen generate <schema.lily.yaml>...   write each schema's Go file
  lilygen check <schema.lily.yaml>...      verify that the Go files on disk are up to date
  lilygen <schema.lily.yaml>...            same as generate

Each schema writes <output>/<package>.lily.go next to itself, and only when the
content changed. In a Go package:

  //go:generate go run github.com/lily-mq/lily/cmd/lilygen generate orders.lily.yaml

Exit codes: 0 done or up to date; 1 stale or missing output (check) or a write
failed; 2 usage or schema errors, each printed as file:line:column: message.
See docs/schema.md for the schema language.
`

// run is lilygen with its arguments; it returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	cmd := "generate"
	if len(args) > 0 {
		switch a := args[0]; {
		case a == "generate" || a == "check":
			cmd, args = a, args[1:]
		case a == "help":
			fmt.Fprint(stdout, usage)
			return exitOK
		case !strings.HasPrefix(a, "-") && !isFile(a):
			fmt.Fprintf(stderr, "lilygen: unknown command %q (want generate or check; lilygen -h explains)\n", a)
			return exitUsage
		}
	}
	flags := flag.NewFlagSet("lilygen "+cmd, flag.ContinueOnError)
	flags.SetOutput(stderr)
	flags.Usage = func() { fmt.Fprint(stderr, usage) }
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if flags.NArg() == 0 {
		fmt.Fprintf(stderr, "lilygen %s: name at least one schema file (lilygen -h explains)\n", cmd)
		return exitUsage
	}
	targets, ok := generate(flags.Args(), stderr)
	if !ok {
		return exitUsage
	}
	if cmd == "check" {
		return check(targets, stdout, stderr)
	}
	return write(targets, stderr)
}

// isFile reports whether a names a file, or looks like a schema file's name,
// so that "lilygen orders.lily.yaml" means generate.
func isFile(a string) bool {
	if strings.HasSuffix(a, ".yaml") || strings.HasSuffix(a, ".yml") {
		return true
	}
	info, err := os.Stat(a)
	return err == nil && !info.IsDir()
}

// target is one file to write: its path from the current directory, the
// schema it comes from, and its content.
type target struct {
	path, schema string
	content      []byte
}

// generate reads every schema and renders its file. It reports every schema's
// problems before failing, so that one run shows them all.
func generate(names []string, stderr io.Writer) ([]target, bool) {
	var targets []target
	ok := true
	bySchema := map[string]string{}
	for _, name := range names {
		f, err := schema.Load(name)
		var list schema.ErrorList
		switch {
		case errors.As(err, &list):
			fmt.Fprintln(stderr, list)
			ok = false
			continue
		case err != nil:
			fmt.Fprintf(stderr, "lilygen: %v\n", err)
			ok = false
			continue
		}
		out, err := gen.Generate(f)
		if err != nil {
			fmt.Fprintf(stderr, "lilygen: %v\n", err)
			ok = false
			continue
		}
		path := filepath.Join(filepath.Dir(name), filepath.FromSlash(out.Path))
		if prev, dup := bySchema[path]; dup {
			fmt.Fprintf(stderr, "lilygen: %s and %s both generate %s\n", prev, name, path)
			ok = false
			continue
		}
		bySchema[path] = name
		targets = append(targets, target{path: path, schema: name, content: out.Content})
	}
	return targets, ok
}

// write writes each target whose file is missing or differs, so that an
// unchanged schema leaves modification times alone.
func write(targets []target, stderr io.Writer) int {
	code := exitOK
	for _, t := range targets {
		if old, err := os.ReadFile(t.path); err == nil && bytes.Equal(old, t.content) {
			continue
		}
		err := os.MkdirAll(filepath.Dir(t.path), 0o755)
		if err == nil {
			err = os.WriteFile(t.path, t.content, 0o644)
		}
		if err != nil {
			fmt.Fprintf(stderr, "lilygen: %v\n", err)
			code = exitStale
		}
	}
	return code
}

// check compares each target with its file on disk, writing a diff of each
// stale one to stdout.
func check(targets []target, stdout, stderr io.Writer) int {
	code := exitOK
	for _, t := range targets {
		old, err := os.ReadFile(t.path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			fmt.Fprintf(stderr, "lilygen: %s is missing: run lilygen generate %s\n", t.path, t.schema)
		case err != nil:
			fmt.Fprintf(stderr, "lilygen: %v\n", err)
		case bytes.Equal(old, t.content):
			continue
		default:
			unifiedDiff(stdout, t.path, old, t.content)
			fmt.Fprintf(stderr, "lilygen: %s is stale: run lilygen generate %s\n", t.path, t.schema)
		}
		code = exitStale
	}
	return code
}
