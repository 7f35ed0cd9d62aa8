package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/lily-mq/lily/internal/cliflag"
	"github.com/lily-mq/lily/schema"
)

// Exit codes, the same for every command.
const (
	exitOK       = 0
	exitFindings = 1 // check: stale or missing output, or a write failed; lint: findings; breaking: breaking changes
	exitUsage    = 2 // bad arguments, unreadable files or schema errors
)

// command is one lilygen subcommand.
type command struct {
	name, args, summary string
	// help is the rest of the -h text, after the usage line and the flags.
	help string
	// schemas says whether the command reads schema files, and so takes
	// --error-format.
	schemas bool
	// flags adds the command's own flags and returns its body.
	flags func(fs *flag.FlagSet) func(e *env) int
}

// env is what a command's body works with.
type env struct {
	args           []string
	stdout, stderr io.Writer
	format         errorFormat
	git            *gitRun
}

// commands are the subcommands, in the order lilygen -h lists them.
var commands = []*command{generateCmd, checkCmd, lintCmd, breakingCmd, docCmd, topologyCmd, asyncapiCmd, initCmd}

const usage = `lilygen compiles Lily schema files into typed RabbitMQ consumers, and checks
schemas for review.

Usage:
  lilygen <command> [flags] <schema.lily.yaml>...
  lilygen <schema.lily.yaml>...     same as lilygen generate

Commands:
%s
Run lilygen <command> -h (or lilygen help <command>) for a command's flags.
Flags may come before or after the files.

Exit codes (every command):
  0  done: generated, up to date, no findings, no breaking changes
  1  findings: check found stale or missing output (or generate could not
     write a file), lint found a convention broken, breaking found a change
     that is not acknowledged, or a new acknowledgement that matches none
  2  usage errors, unreadable files, git failures or schema errors

Schema errors print as file:line:column: message [RULE-ID], all of them,
sorted; --error-format=json or github-actions prints them for tools.
docs/lilygen.md describes the commands, docs/schema.md the schema language.
`

func mainUsage() string {
	var b strings.Builder
	for _, c := range commands {
		fmt.Fprintf(&b, "  %-10s %s\n", c.name, c.summary)
	}
	return fmt.Sprintf(usage, b.String())
}

// run is lilygen with its arguments; it returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		// Likely someone finding out what lilygen does: tell them, but as a
		// usage error, so that a script that named no file still fails.
		fmt.Fprint(stderr, mainUsage())
		return exitUsage
	}
	name := "generate"
	switch a := args[0]; {
	case a == "help" && len(args) > 1:
		return run([]string{args[1], "-h"}, stdout, stderr)
	case a == "help" || a == "-h" || a == "-help" || a == "--help":
		fmt.Fprint(stdout, mainUsage())
		return exitOK
	case slices.ContainsFunc(commands, func(c *command) bool { return c.name == a }):
		name, args = a, args[1:]
	case !strings.HasPrefix(a, "-") && !isFile(a):
		say(stderr, "lilygen: unknown command %q (lilygen -h lists them)", a)
		return exitUsage
	}
	c := commands[slices.IndexFunc(commands, func(c *command) bool { return c.name == name })]
	fs := flag.NewFlagSet("lilygen "+c.name, flag.ContinueOnError)
	fs.SetOutput(commandFree{stderr})
	e := &env{stdout: stdout, stderr: stderr, format: textFormat, git: newGitRun()}
	defer e.git.close()
	if c.schemas {
		fs.Var(&e.format, "error-format", "how to print errors and findings: text, json or github-actions")
	}
	body := c.flags(fs)
	// Help asked for goes to stdout; help after a usage error, to stderr.
	out := stderr
	if slices.ContainsFunc(args, func(a string) bool { return a == "-h" || a == "-help" || a == "--help" }) {
		out = stdout
	}
	fs.Usage = func() {
		fs.SetOutput(commandFree{out})
		fmt.Fprintf(out, "Usage: lilygen %s %s\n\n%s\n\nFlags:\n", c.name, c.args, c.summary)
		fs.PrintDefaults()
		fmt.Fprintf(out, "\n%s\n\nExit codes: 0 done, 1 findings, 2 usage or schema errors (lilygen -h explains).\n", c.help)
	}
	var err error
	if e.args, err = cliflag.ParseInterspersed(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if c.schemas {
		e.args = distinct(e.args)
	}
	return body(e)
}

// distinct drops each schema file named again, keeping its first name: the
// same path, cleaned and made absolute (./a.lily.yaml, dir/../a.lily.yaml),
// or the same file in the same directory by another link (a hard link, a
// directory reached through a symbolic one), which reads and generates the
// same files. A file named twice is read once, as go vet vets a package
// named twice once; a link in another directory is a schema of its own
// there, generating its files beside it.
func distinct(names []string) []string {
	type place struct{ file, dir os.FileInfo }
	var out []string
	var places []place
	seen := map[string]bool{}
	for _, name := range names {
		key, err := filepath.Abs(name)
		if err != nil {
			key = filepath.Clean(name)
		}
		if seen[key] {
			continue
		}
		seen[key] = true
		file, ferr := os.Stat(name)
		dir, derr := os.Stat(filepath.Dir(name))
		if ferr == nil && derr == nil {
			if slices.ContainsFunc(places, func(p place) bool { return os.SameFile(p.file, file) && os.SameFile(p.dir, dir) }) {
				continue
			}
			places = append(places, place{file, dir})
		}
		out = append(out, name)
	}
	return out
}

// isFile reports whether a names a file, or looks like a schema file's name,
// so that "lilygen orders.lily.yaml" means generate.
func isFile(a string) bool {
	return strings.HasSuffix(a, ".yaml") || strings.HasSuffix(a, ".yml") || namesFile(a)
}

// namesFile reports whether a, a path or --against's value, names a file
// (not a directory): as --against, the older revision is then that file,
// not a git ref.
func namesFile(a string) bool {
	info, err := os.Stat(a)
	return err == nil && !info.IsDir()
}

// needSchemas reports a usage error when no schema file was named.
func (e *env) needSchemas(name string) bool {
	if len(e.args) == 0 {
		fmt.Fprintf(e.stderr, "lilygen %s: name at least one schema file (lilygen %s -h explains)\n", name, name)
		return false
	}
	return true
}

// loadAll reads and checks every schema the command named, printing every
// problem of every file, so that one run shows them all. It returns the
// schemas that loaded, and whether all did (and one was named at all): a
// command may go on with those, so that one schema half edited hides
// nothing of the others.
func (e *env) loadAll(name string) ([]*schema.File, bool) {
	if !e.needSchemas(name) {
		return nil, false
	}
	var files []*schema.File
	ok := true
	for _, name := range e.args {
		f, good := e.loadOne(name)
		if !good {
			ok = false
			continue
		}
		files = append(files, f)
	}
	return files, ok
}

// loadOne reads and checks the schema file name.
func (e *env) loadOne(name string) (*schema.File, bool) {
	f, err := schema.Load(name)
	return f, e.report(err)
}

// report prints the error of loading a schema, if any, and says whether
// there was none.
func (e *env) report(err error) bool {
	var list schema.ErrorList
	switch {
	case errors.As(err, &list):
		e.format.schemaErrors(e.stdout, e.stderr, list)
		return false
	case err != nil:
		say(e.stderr, "lilygen: %v", err)
		return false
	}
	return true
}
