package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/lily-mq/lily/review"
	"github.com/lily-mq/lily/schema"
)

// listFlag is a flag that may be given many times.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

var breakingCmd = &command{
	name: "breaking", args: "--against <file | git ref> [flags] <schema.lily.yaml>...", schemas: true,
	summary: "list the changes since an older revision that break something live",
	help: `Each schema is compared with its older revision: the file --against names
(with a single schema), or else the schema's path at the git ref --against
names, read with git show (so shallow clones work once the ref is fetched).
A schema the ref does not have is new and breaks nothing.

Findings are grouped: API (generated Go names and signatures), WIRE (payload
and content type), INFLIGHT (messages already in a queue, retry bucket or DLQ
can no longer be decoded or dispatched), PRODUCER (producers on the new
schema send what consumers on the old one reject), TOPOLOGY (RabbitMQ
refuses the queue's redeclare with 406). Each names its rule, the migration
it needs, and the --allow that acknowledges it.`,
	flags: func(fs *flag.FlagSet) func(*env) int {
		against := fs.String("against", "", "the older revision: a schema file, or a git ref such as main or origin/main")
		var allow listFlag
		fs.Var(&allow, "allow", "acknowledge an intended break, RULE@SUBJECT as printed, or RULE for all (repeatable)")
		return func(e *env) int {
			if *against == "" {
				fmt.Fprintln(e.stderr, "lilygen breaking: --against names the older revision (lilygen breaking -h explains)")
				return exitUsage
			}
			if !e.needSchemas("breaking") {
				return exitUsage
			}
			return e.breaking(*against, allow)
		}
	},
}

func (e *env) breaking(against string, allow []string) int {
	var found, acknowledged []review.Finding
	ok := true
	for _, name := range e.args {
		old, isNew, good := e.older(name, against)
		f, goodNew := e.loadOne(name, nil)
		if !good || !goodNew {
			ok = false
			continue
		}
		if isNew {
			continue
		}
		for _, x := range review.Breaking(old, f) {
			if x.Acknowledged(allow) {
				acknowledged = append(acknowledged, x)
			} else {
				found = append(found, x)
			}
		}
	}
	if !ok {
		return exitUsage
	}
	review.Sort(found)
	e.format.findings(e.stdout, found)
	if e.format == textFormat {
		fmt.Fprintf(e.stderr, "lilygen breaking: %d breaking change%s against %s", len(found), plural(len(found)), against)
		if len(acknowledged) > 0 {
			fmt.Fprintf(e.stderr, " (and %d acknowledged)", len(acknowledged))
		}
		fmt.Fprintln(e.stderr)
	}
	if len(found) > 0 {
		return exitFindings
	}
	return exitOK
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// older reads and checks the revision of schema name that against names;
// isNew reports a schema the git ref does not have.
func (e *env) older(name, against string) (f *schema.File, isNew, ok bool) {
	if info, err := os.Stat(against); err == nil && !info.IsDir() {
		if len(e.args) > 1 {
			fmt.Fprintln(e.stderr, "lilygen breaking: --against names a file, so name a single schema")
			return nil, false, false
		}
		f, ok := e.loadOne(against, nil)
		return f, false, ok
	}
	dir, base := filepath.Dir(name), filepath.Base(name)
	if _, err := gitOutput(dir, "rev-parse", "--verify", "--quiet", against+"^{commit}"); err != nil {
		fmt.Fprintf(e.stderr, "lilygen breaking: --against %s is neither a file nor a git commit (is it fetched?)\n", against)
		return nil, false, false
	}
	// "./" makes the path relative to dir, not to the repository's root.
	spec := against + ":./" + base
	if _, err := gitOutput(dir, "cat-file", "-e", spec); err != nil {
		return nil, true, true
	}
	data, err := gitOutput(dir, "show", spec)
	if err != nil {
		fmt.Fprintf(e.stderr, "lilygen breaking: %v\n", err)
		return nil, false, false
	}
	f, ok = e.loadOne(against+":"+filepath.ToSlash(name), data)
	return f, false, ok
}

// gitOutput runs git in dir and returns its standard output.
func gitOutput(dir string, args ...string) ([]byte, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}
