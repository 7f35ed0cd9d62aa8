package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/lily-mq/lily/gen"
	"github.com/lily-mq/lily/gen/asyncapi"
	"github.com/lily-mq/lily/internal/linkpath"
	"github.com/lily-mq/lily/schema"
)

var generateCmd = &command{
	name: "generate", args: "[flags] <schema.lily.yaml>...", schemas: true,
	summary: "write each schema's generated files (the default command)",
	help: `Each schema writes <output>/<package>.lily.go next to itself, and the AsyncAPI
document it names under asyncapi: {file: ...}, each only when its content
changed, so an unchanged schema leaves modification times alone. It deletes,
and names, a *.lily.go or YAML file in the schema's module that it generated
before (lilygen's header records the path of the schema) and no longer
generates, as after output, package or the AsyncAPI file changed; one whose
header names the schema's file name but not its path (an older lilygen wrote
it, or it was copied from elsewhere) is named as a warning instead, as is an
orphan, one whose recorded schema no longer exists; nothing is deleted while a
file could not be written. Each file is written beside its path and renamed
into place once whole, so a failed write leaves the old file as it was. It
never touches any other file, nor writes outside the repository (where
includes may be) or into .git, through a symbolic link either: an output or
AsyncAPI file that leads there is a BAD-OUTPUT error, in check too. With
--error-format=json or github-actions, what it could not do prints on
stdout, as OUTPUT-NOT-WRITTEN (a file not written) and LEFTOVER-KEPT (a
leftover not deleted). In a Go package:

  //go:generate go tool lilygen generate orders.lily.yaml`,
	flags: func(*flag.FlagSet) func(*env) int {
		return func(e *env) int {
			// Nothing is written unless every schema read: the old
			// output is what still builds.
			targets, ok := e.generate("generate")
			if !ok {
				return exitUsage
			}
			return e.write(targets)
		}
	},
}

var checkCmd = &command{
	name: "check", args: "[flags] <schema.lily.yaml>...", schemas: true,
	summary: "verify that the generated files on disk are up to date",
	help: `check writes nothing. For each stale or left-over file (one generate would
delete) it prints a unified diff (on disk → generated, at most 200 lines) to
stdout and names the file on stderr; a missing file it names without a diff
(generate writes it whole), and a file generate would leave alone with the
reason; with --error-format=json or github-actions it prints one
STALE-OUTPUT diagnostic per file instead. In CI:

  go tool lilygen check $(git grep -l '^package:' -- '*.lily.yaml')

(the root schemas: a file another includes has no package, and is checked
with its root).`,
	flags: func(*flag.FlagSet) func(*env) int {
		return func(e *env) int {
			// The schemas that read are checked even when another did
			// not: one schema half edited hides nothing of the others.
			targets, ok := e.generate("check")
			code := e.check(targets)
			if !ok {
				return exitUsage
			}
			return code
		}
	},
}

// target is one file to write: its path from the current directory, the
// schema it comes from, and its content; nil content means a file the schema
// generated before and no longer does, to delete, or, when kept says why
// nothing proves whose it is, to name.
type target struct {
	path, schema string
	content      []byte
	kept         string
}

// refusal says why generate leaves alone the file at t's path, which
// readOutput read with err, or "" when it writes it: the file is not a
// regular file, cannot be read (so nothing says lilygen wrote it, and a
// new file beside it replaces it whatever its mode), or is not t's to
// overwrite (ownedElsewhere).
func (t target) refusal(err error) string {
	why := "is not a regular file"
	switch {
	case errors.Is(err, errNotRegular):
	case errors.Is(err, fs.ErrPermission):
		why = "cannot be read (nothing says lilygen wrote it)"
	case err != nil:
		return "" // not there, or no directory for it: writing it says more
	default:
		var owned bool
		if why, owned = ownedElsewhere(t.path, t.schema); !owned {
			return ""
		}
	}
	return fmt.Sprintf("%s exists and %s, so %s leaves it alone: move it, or change the schema's output or package", t.path, why, t.schema)
}

// generate reads every schema and renders its files, with each schema's
// leftovers. It returns the targets of the schemas that read and rendered,
// and whether every one did: check goes on with those, while generate
// writes nothing unless all did. A schema that failed has no leftovers
// searched for, since none of its files is among the targets, and the
// files it generated are no other schema's leftover or orphan either.
func (e *env) generate(name string) ([]target, bool) {
	if !e.needSchemas(name) {
		return nil, false
	}
	var targets []target
	var loaded, failed []string
	bySchema := map[string]string{}
	// A directory's Go files are one package: a second schema with
	// another package there would leave it unbuildable.
	type goPackage struct{ name, schema string }
	byDir := map[string]goPackage{}
	for _, name := range e.args {
		f, good := e.loadOne(name)
		if !good {
			failed = append(failed, name)
			continue
		}
		outs, err := outputs(f)
		if err != nil {
			say(e.stderr, "lilygen: %v", err)
			failed = append(failed, name)
			continue
		}
		dir := filepath.Dir(filepath.Join(filepath.Dir(name), filepath.FromSlash(gen.FilePath(f))))
		key := dir
		if abs, err := filepath.Abs(dir); err == nil {
			key = abs
		}
		if prev, ok := byDir[key]; !ok {
			byDir[key] = goPackage{name: f.Package, schema: name}
		} else if prev.name != f.Package {
			say(e.stderr, "lilygen: %s (package %s) and %s (package %s) both generate into %s, one Go package: give them one package, or each its own output",
				prev.schema, prev.name, name, f.Package, dir)
			failed = append(failed, name)
			continue
		}
		var own []target
		for _, out := range outs {
			// check refuses it too: a file written there once would
			// otherwise pass for up to date.
			if err := f.CheckOutput(out.Path); err != nil {
				e.report(err)
				good = false
				continue
			}
			path := filepath.Join(filepath.Dir(name), filepath.FromSlash(out.Path))
			if prev, dup := bySchema[path]; dup {
				say(e.stderr, "lilygen: %s and %s both generate %s", prev, name, path)
				good = false
				continue
			}
			bySchema[path] = name
			own = append(own, target{path: path, schema: name, content: out.Content})
		}
		if !good {
			failed = append(failed, name)
			continue
		}
		loaded = append(loaded, name)
		targets = append(targets, own...)
	}
	// A file one schema deletes is not named again for another, nor one
	// named twice.
	var claimed, unclaimed []target
	skip := newFileSet(failed)
	for _, name := range loaded {
		for _, t := range leftovers(name, targets, skip) {
			if t.kept == "" {
				claimed = append(claimed, t)
			} else {
				unclaimed = append(unclaimed, t)
			}
		}
	}
	seen := map[string]bool{}
	for _, t := range slices.Concat(claimed, unclaimed) {
		if !seen[t.path] {
			seen[t.path] = true
			targets = append(targets, t)
		}
	}
	return targets, len(failed) == 0
}

// outputs are the files schema f generates: its Go file, and the AsyncAPI
// document it names.
func outputs(f *schema.File) ([]gen.Output, error) {
	out, err := gen.Generate(f)
	if err != nil || f.AsyncAPI == nil {
		return []gen.Output{out}, err
	}
	doc, err := asyncapi.Generate(f, f.AsyncAPI.Version)
	return []gen.Output{out, {Path: f.AsyncAPI.File, Content: doc}}, err
}

// The rules of generate's problems, as --error-format json and
// github-actions print them: a file it did not write (one in the way, or a
// write that failed), and a leftover it did not delete.
const (
	outputNotWritten = "OUTPUT-NOT-WRITTEN"
	leftoverKept     = "LEFTOVER-KEPT"
)

// write writes each target whose file is missing or differs, so that an
// unchanged schema leaves modification times alone. A file in the way that
// lilygen did not generate, or that another schema generated, is never
// overwritten. Leftovers are deleted only once every file is written: the
// old output is what still builds when the new cannot be.
func (e *env) write(targets []target) int {
	code := exitOK
	written := true
	var leftovers []target
	report := func(path, rule, severity, msg string) {
		text := "lilygen: " + msg
		if severity == "" {
			code = exitFindings
		} else {
			text = "lilygen: " + severity + ": " + msg
		}
		e.format.problem(e.stdout, e.stderr, diag{File: path, Rule: rule, Message: msg, Severity: severity}, text)
	}
	for _, t := range targets {
		if t.kept != "" {
			report(t.path, leftoverKept, warning, t.kept)
			continue
		}
		if t.content == nil {
			leftovers = append(leftovers, t)
			continue
		}
		old, err := readOutput(t.path)
		if err == nil && bytes.Equal(old, t.content) {
			continue
		}
		if refusal := t.refusal(err); refusal != "" {
			report(t.path, outputNotWritten, "", refusal)
			written = false
			continue
		}
		err = os.MkdirAll(filepath.Dir(t.path), 0o755)
		if err == nil {
			err = replaceFile(t.path, t.content)
		}
		if err != nil {
			report(t.path, outputNotWritten, "", fmt.Sprintf("%s not written, and left as it was: %v", t.path, err))
			written = false
		}
	}
	for _, t := range leftovers {
		if !written {
			report(t.path, leftoverKept, warning, t.path+" is left over, and kept until every file is written")
			continue
		}
		if err := os.Remove(t.path); err != nil {
			report(t.path, leftoverKept, "", err.Error())
			continue
		}
		say(e.stderr, "lilygen: deleted %s, which %s generated before and no longer generates", t.path, t.schema)
	}
	return code
}

// replaceFile writes content to a new file beside path and renames it over
// path once whole, so that a write that fails (a full disk, a file size
// limit) leaves the file as it was rather than cut short. The file gets the
// mode os.WriteFile gives it: the old file's, or 0o644 less the umask.
func replaceFile(path string, content []byte) error {
	// A link to the file stays a link, a dangling one too; where it
	// leads is inside the repository (schema.File.CheckOutput).
	path, err := linkpath.Resolve(path)
	if err != nil {
		return err
	}
	info, statErr := os.Stat(path)
	f, err := createBeside(path)
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // once renamed, there is nothing to remove
	if statErr == nil {
		err = f.Chmod(info.Mode().Perm())
	}
	if err == nil {
		_, err = f.Write(content)
	}
	if err == nil {
		err = f.Sync() // a full disk may say so only here
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	return err
}

// createBeside creates a new hidden file in path's directory, with the mode
// os.WriteFile gives a new file (os.CreateTemp's is 0o600, whatever the
// umask).
func createBeside(path string) (*os.File, error) {
	for {
		name := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+"."+strconv.FormatUint(rand.Uint64(), 36))
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		if !errors.Is(err, fs.ErrExist) {
			return f, err
		}
	}
}

// check compares each target with its file on disk.
func (e *env) check(targets []target) int {
	code := exitOK
	for _, t := range targets {
		old, err := readOutput(t.path)
		if t.content != nil && err == nil && bytes.Equal(old, t.content) {
			continue
		}
		var problem, refusal string
		if t.content != nil {
			refusal = t.refusal(err)
		}
		switch {
		case errors.Is(err, fs.ErrNotExist):
			problem = fmt.Sprintf("%s is missing: run lilygen generate %s", t.path, t.schema)
		case refusal != "":
			// No diff: generate would not write it either.
			problem = refusal
		case err != nil:
			problem = err.Error()
		case t.kept != "":
			problem = t.kept
			if e.format == textFormat {
				unifiedDiff(e.stdout, t.path, old, nil)
			}
		case t.content == nil:
			problem = fmt.Sprintf("%s was generated from %s, which no longer generates it: run lilygen generate %s to delete it", t.path, t.schema, t.schema)
			if e.format == textFormat {
				unifiedDiff(e.stdout, t.path, old, nil)
			}
		default:
			problem = fmt.Sprintf("%s is stale: run lilygen generate %s", t.path, t.schema)
			if e.format == textFormat {
				unifiedDiff(e.stdout, t.path, old, t.content)
			}
		}
		e.format.problem(e.stdout, e.stderr, diag{File: t.path, Rule: "STALE-OUTPUT", Message: problem}, "lilygen: "+problem)
		code = exitFindings
	}
	return code
}
