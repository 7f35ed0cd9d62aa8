package main

import (
	"bytes"
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/lily-mq/lily/review"
	"github.com/lily-mq/lily/schema"
	"github.com/lily-mq/lily/schema/rules"
)

// listFlag is a flag that may be given many times.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

var breakingCmd = &command{
	name: "breaking", args: "--against <file | git ref> [flags] <schema.lily.yaml>...", schemas: true,
	summary: "list the changes since an older revision that break something live",
	help: `Each schema is compared with its older revision: the file --against names
(with a single schema), or else the schema and the files it includes as they
are at the git ref --against names, read from git's objects (so shallow
clones work once the ref is fetched) through the symbolic links the ref holds,
as the working tree's are followed. A value that names both a file and a git
revision is refused: ./origin/main names the file, refs/remotes/origin/main
the revision.
A schema the ref does not have is compared with the file git finds it
renamed from (git diff -M <ref>), and said so; when git finds none, it is
new, or moved unseen. One whose file at the ref, at its path or the one git
finds it renamed from, has no package (a file a root schema included) is a
root schema new since, and compared as a new one. At a git ref, a root schema there (a *.lily.yaml file
with a package) below the directory lilygen runs in, that no schema named is
compared with, is compared with the root schema the working tree still has at
its path, as if named, and said so. When it has none there (deleted, left
without a package, as a file another includes, or reached through a symbolic
link), it is gone, and is compared with an empty revision of itself, placed
at its path.
A queue or exchange (by name) or message (by wire type) that one schema of
the run no longer holds, and another newly does, moved: it is compared with
what it was, said so on stderr, and its findings carry a note. A queue or
owned exchange new to a schema that another schema of the run holds is
compared with that one: DECLARED-DIFFERENTLY, QUEUE-SHARED. A schema the
ref does not have (as a root schema), to which nothing moved, is compared
with nothing, which a line on stderr says (a SCHEMA-NOT-COMPARED warning with --error-format json
or github-actions).

Findings are grouped by what they break (TOPOLOGY and ROUTING cover exchanges
as well as queues):
` + categoryList() + `
Each names its rule, the migration it needs, and the --allow that
acknowledges it.

An acknowledge: entry of a schema accepts only the changes of the revision
that adds it. One with a subject that the older revision has too (the same
rule, subject and reason) was written for an earlier change and accepts
nothing: a change it names is reported, and when it names none, a warning
(INHERITED-ACKNOWLEDGEMENT) asks to remove it. One with a subject that is new
and matches none of the findings acknowledges nothing this change does: it
is reported as STALE-ACKNOWLEDGEMENT, and fails the run. One without a
subject is a standing policy for its rule, and accepts its every finding.
An acknowledgement accepts every change of its rule and subject, which may
be more than one: the changes accepted are listed too, after the others,
each with what accepts it (a notice with --error-format json or
github-actions), and do not fail the run.

Rules:
` + ruleList(func(r rules.Rule) bool { return r.Category != rules.Lint }),
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
			for _, a := range allow {
				rule, _, _ := strings.Cut(a, "@")
				if problem, help := schema.AcknowledgementProblem(rule); problem != "" {
					say(e.stderr, "lilygen breaking: --allow %s: %s (%s)", a, problem, cmp.Or(help, "lilygen breaking -h lists the rules"))
					return exitUsage
				}
			}
			if e.ambiguous("breaking", *against) {
				return exitUsage
			}
			return e.breaking(*against, allow)
		}
	},
}

func (e *env) breaking(against string, allow []string) int {
	// The acknowledgements of every schema, and of their older revisions,
	// are judged together, as --allow is: what moved from one schema to
	// another, or a schema deleted held, is acknowledged in a schema that
	// remains.
	var newer, older []schema.Acknowledgement
	var revs []review.Revision
	// The schemas the ref has under no path, or as no root schema (then
	// from is its path there).
	var unpaired []struct{ name, from string }
	ok := true
	paired := map[string]bool{} // at a git ref, the paths there compared
	for _, name := range e.args {
		old, from, isNew, good := e.older(name, against)
		f, goodNew := e.loadOne(name)
		if !good || !goodNew {
			ok = false
			continue
		}
		paired[from] = true
		newer = append(newer, f.Acknowledged...)
		if isNew {
			// Compared with nothing of its own: what it holds that moved
			// from another schema is compared with that one.
			unpaired = append(unpaired, struct{ name, from string }{name, from})
			old = &schema.File{Package: f.Package, Output: f.Output}
		}
		revs = append(revs, review.Revision{Old: old, New: f})
		older = append(older, old.Acknowledged...)
	}
	if !ok {
		return exitUsage
	}
	unnamed, ok := e.unnamed(against, paired)
	if !ok {
		return exitUsage
	}
	gone, compared := 0, 0
	for _, u := range unnamed {
		if u.now != nil {
			compared++
			say(e.stderr, "lilygen: %s: a root schema at %s and now, but not named: compared with %s as if named (name it; git grep '^package:' misses a package key written otherwise)", u.name, against, u.old.Name)
			revs = append(revs, review.Revision{Old: u.old, New: u.now})
			newer = append(newer, u.now.Acknowledged...)
			older = append(older, u.old.Acknowledged...)
			continue
		}
		gone++
		say(e.stderr, "lilygen: %s: %s since %s, and no schema named is compared with %s: what it held is compared where a schema named holds it now, else reported removed", u.name, u.how, against, u.old.Name)
		// Compared with an empty revision of itself, placed at its path.
		revs = append(revs, review.Revision{Old: u.old, New: &schema.File{Name: u.name, Package: u.old.Package, Output: u.old.Output}})
		older = append(older, u.old.Acknowledged...)
	}
	found, moves := review.BreakingAcross(revs)
	for _, m := range moves {
		say(e.stderr, "lilygen: %s; compared with what it was there", m)
	}
	notCompared := 0
	for _, u := range unpaired {
		if slices.ContainsFunc(moves, func(m review.Move) bool { return m.To == u.name }) {
			continue
		}
		notCompared++
		msg := fmt.Sprintf("not at %s, not compared (new, or moved where git finds no rename from a file there, and holding nothing moved from another schema of this run): only what it shares with the other schemas of this run is checked", against)
		if u.from != "" {
			msg = fmt.Sprintf("%s:%s is no root schema (it has no package), not compared (new as one, and holding nothing moved from another schema of this run): only what it shares with the other schemas of this run is checked", against, u.from)
		}
		// Also on the pull request, where a reviewer would otherwise read
		// no finding as a clean comparison.
		e.format.problem(e.stdout, e.stderr, diag{File: u.name, Rule: schemaNotCompared, Message: msg, Severity: warning},
			fmt.Sprintf("lilygen breaking: %s: %s", u.name, msg))
	}
	j := review.Acknowledge(found, newer, older, allow)
	found, acknowledged := j.Breaking, j.Acknowledged
	stale, inherited := j.Stale, j.Inherited
	review.Sort(found)
	review.Sort(acknowledged)
	e.format.findings(e.stdout, found, acknowledged)
	var problems []diag
	for _, a := range stale {
		problems = append(problems, diag{File: a.Pos.File, Line: a.Pos.Line, Column: a.Pos.Column, Rule: staleAcknowledgement,
			Message: fmt.Sprintf("acknowledgement %s is new since %s and matches no breaking change against it: it acknowledges nothing this change does (remove it, or correct its rule or subject)", a.String(), against)})
	}
	for _, a := range inherited {
		problems = append(problems, diag{File: a.Pos.File, Line: a.Pos.Line, Column: a.Pos.Column, Rule: inheritedAcknowledgement, Severity: warning,
			Message: fmt.Sprintf("acknowledgement %s is at %s too, written for a change made before, and matches no breaking change against it: it accepts nothing now; remove it", a.String(), against)})
	}
	// By file name, then position: a schema's problems read top to bottom.
	// Schema errors order their files as they were read, but these come
	// from several schemas, so file names order them.
	slices.SortStableFunc(problems, func(a, b diag) int {
		return cmp.Or(strings.Compare(a.File, b.File), cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column))
	})
	for _, d := range problems {
		e.format.problem(e.stdout, e.stderr, d, "")
	}
	if e.format == textFormat {
		summary := fmt.Sprintf("lilygen breaking: %d breaking change%s against %s", len(found), plural(len(found)), against)
		var also []string
		if len(acknowledged) > 0 {
			also = append(also, fmt.Sprintf("%d acknowledged", len(acknowledged)))
		}
		if len(stale) > 0 {
			also = append(also, fmt.Sprintf("%d stale acknowledgement%s", len(stale), plural(len(stale))))
		}
		if len(inherited) > 0 {
			also = append(also, fmt.Sprintf("%d inherited acknowledgement%s to remove", len(inherited), plural(len(inherited))))
		}
		if notCompared > 0 {
			also = append(also, fmt.Sprintf("%d schema%s not compared", notCompared, plural(notCompared)))
		}
		if compared > 0 {
			also = append(also, fmt.Sprintf("%d schema%s not named, compared", compared, plural(compared)))
		}
		if gone > 0 {
			also = append(also, fmt.Sprintf("%d schema%s gone", gone, plural(gone)))
		}
		if len(also) > 0 {
			summary += fmt.Sprintf(" (and %s)", strings.Join(also, ", "))
		}
		say(e.stderr, "%s", summary)
	}
	if len(found) > 0 || len(stale) > 0 {
		return exitFindings
	}
	return exitOK
}

// The rules of a schema's acknowledgements with a subject that match no
// breaking change against the older revision: one new since it fails the
// run, having nothing of this change to accept; one it has too is left
// over from a change merged before, and only warned of.
const (
	staleAcknowledgement     = "STALE-ACKNOWLEDGEMENT"
	inheritedAcknowledgement = "INHERITED-ACKNOWLEDGEMENT"
)

// schemaNotCompared is the rule of a schema the ref does not have, under
// its path or one git finds it renamed from, so compared with nothing.
const schemaNotCompared = "SCHEMA-NOT-COMPARED"

// ruleList lists the rules keep selects, one a line: id, category, meaning,
// in columns as wide as the longest id.
func ruleList(keep func(rules.Rule) bool) string {
	var kept []rules.Rule
	width := 0
	for _, r := range rules.All {
		if keep(r) {
			kept = append(kept, r)
			width = max(width, len(r.ID))
		}
	}
	var b strings.Builder
	for _, r := range kept {
		fmt.Fprintf(&b, "  %-*s %-8s %s\n", width, r.ID, r.Category, r.Meaning)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// categoryList lists the categories of breaking changes, one a line: name,
// what breaks.
func categoryList() string {
	var b strings.Builder
	for _, c := range rules.Categories {
		if c != rules.Lint {
			fmt.Fprintf(&b, "  %-9s %s\n", c, c.Describe())
		}
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// older reads and checks the revision of schema name that against names:
// at a git ref, the file at name's path or, when the ref has none, the one
// git finds it renamed from, through the symbolic links the ref holds
// there; from is the path from the repository's root of the file read,
// where they lead. isNew reports a schema the ref has under neither, or
// whose file there, at from then, is no root schema (it has no package): a
// file a root schema included, whose content that root's revision holds,
// and which move detection finds there.
func (e *env) older(name, against string) (f *schema.File, from string, isNew, ok bool) {
	if namesFile(against) {
		if len(e.args) > 1 {
			fmt.Fprintln(e.stderr, "lilygen: --against names a file, so name a single schema")
			return nil, "", false, false
		}
		f, err := schema.Load(against)
		return f, "", false, e.reportOlder(f, err)
	}
	dir := filepath.Dir(name)
	prefix, err := e.git.revParse(dir, "--show-prefix")
	if err != nil {
		// Then no commit can be named: say why, not that against is none.
		say(e.stderr, "lilygen: --against %s is not a file, and %s is not in a git work tree, whose commits it could name (%v)", against, name, err)
		return nil, "", false, false
	}
	if !e.isCommit(dir, against) {
		return nil, "", false, false
	}
	rel := path.Join(strings.TrimSpace(string(prefix)), filepath.Base(name))
	tree := e.git.tree(dir, against)
	at, err := tree.resolve(rel)
	// A link there is there, even one that leads nowhere: its revision is
	// broken, not new.
	there := at.kind != refMissing || len(at.links) > 0
	var renamed string
	if err == nil && !there {
		if renamed, err = e.renamedFrom(dir, against, rel); err == nil && renamed != "" {
			rel, there = renamed, true
			at, err = tree.resolve(rel)
		}
	}
	var data []byte
	if err == nil && there {
		data, err = tree.read(rel, at)
	}
	switch {
	case err != nil:
		say(e.stderr, "lilygen: %v", err)
		return nil, "", false, false
	case !there:
		return nil, "", true, true
	case isIncluded(data):
		// Read as a root schema it would fail for the package it lacks.
		return nil, at.real, true, true
	}
	if renamed != "" {
		say(e.stderr, "lilygen: %s: not at %s; compared with %s:%s, which git finds it renamed from", name, against, against, renamed)
	}
	f, ok = e.readAt(tree, rel)
	return f, at.real, false, ok
}

// ambiguous reports, and says, whether against names both a file (older
// and gone read a file before a ref) and a commit of the repository of
// the directory lilygen runs in or of a schema named. A pull request could
// otherwise add a file at origin/main and be compared with it, not with
// the base branch. A path beginning ./ is never a revision, and a ref's
// full name rarely a file, so each can be named alone.
func (e *env) ambiguous(cmd, against string) bool {
	if !namesFile(against) {
		return false
	}
	dirs := []string{"."}
	for _, name := range e.args {
		if dir := filepath.Dir(name); !slices.Contains(dirs, dir) {
			dirs = append(dirs, dir)
		}
	}
	for _, dir := range dirs {
		commit, err := e.git.output(dir, "rev-parse", "--verify", "--quiet", against+"^{commit}")
		if err != nil {
			continue
		}
		// A branch or tag by its full name; else (HEAD~1, an abbreviated
		// hash) the commit itself.
		full, _ := e.git.output(dir, "rev-parse", "--symbolic-full-name", against)
		ref := strings.TrimSpace(string(full))
		if !strings.HasPrefix(ref, "refs/") {
			ref = strings.TrimSpace(string(commit))
		}
		file := against
		if !filepath.IsAbs(file) {
			file = "./" + file
		}
		say(e.stderr, "lilygen %s: --against %s names both the file %s and the git revision %s: write %s for the file, or %s for the revision",
			cmd, against, against, ref, file, ref)
		return true
	}
	return false
}

// isCommit reports whether against names a commit of the repository of
// dir, and says so when it does not.
func (e *env) isCommit(dir, against string) bool {
	if _, err := e.git.output(dir, "rev-parse", "--verify", "--quiet", against+"^{commit}"); err != nil {
		say(e.stderr, "lilygen: --against %s is neither a file nor a git commit (is it fetched?)", against)
		return false
	}
	return true
}

// readAt reads and checks the schema at rel, a path from the repository's
// root, and the files it includes, as tree's ref has them. Its Name, and
// its errors, name its files as git does, <ref>:<path from the root>, by
// the paths that name them, as the working tree's errors do.
func (e *env) readAt(tree *refTree, rel string) (*schema.File, bool) {
	ref := tree.ref
	tmp, err := os.MkdirTemp("", "lilygen-")
	if err != nil {
		say(e.stderr, "lilygen: %v", err)
		return nil, false
	}
	defer os.RemoveAll(tmp)
	if err := tree.checkout(rel, tmp); err != nil {
		say(e.stderr, "lilygen: %v", err)
		return nil, false
	}
	// Its includes stay in the checkout, as the working tree's stay in
	// the repository: the temporary directory's parent holds anything.
	f, err := schema.LoadWithin(filepath.Join(tmp, filepath.FromSlash(rel)), tmp)
	var list schema.ErrorList
	if errors.As(err, &list) {
		for _, x := range list {
			if r, err := filepath.Rel(tmp, x.File); err == nil {
				x.File = ref + ":" + filepath.ToSlash(r)
			}
		}
	}
	if f != nil {
		f.Name = ref + ":" + rel
	}
	return f, e.reportOlder(f, err)
}

// unnamedSchema is a root schema at the git ref that no schema named is
// compared with: old is its revision there, name its path from the working
// directory. now is the root schema the working tree still has at that
// path, compared with old as if named; when it has none, how says why the
// schema is gone as one.
type unnamedSchema struct {
	old  *schema.File
	name string
	now  *schema.File
	how  string
}

// unnamed reads the root schemas at ref below the working directory (the
// files named *.lily.yaml with a package, as the CI job of docs/lilygen.md
// names them there) that no schema of the run was compared with (paired
// holds their paths from the repository's root). One the working tree
// still has at its path as a root schema, which the CI job's git grep
// misses when its package key is written otherwise (package : x, a quoted
// or flow key), is read from there. The others are gone as root schemas:
// deleted, moved where git finds no rename to a schema named, left without
// a package (included now, or by nothing), or reached through a symbolic
// link, whose content is the file it leads to, compared there if that is
// named. With --against a file there are none.
func (e *env) unnamed(ref string, paired map[string]bool) ([]unnamedSchema, bool) {
	if namesFile(ref) {
		return nil, true
	}
	prefix, err := e.git.revParse(".", "--show-prefix")
	if err != nil {
		say(e.stderr, "lilygen breaking: --against %s: the schemas deleted since are looked for below the directory lilygen runs in, which is in no git work tree: run it in the repository (%v)", ref, err)
		return nil, false
	}
	if !e.isCommit(".", ref) {
		return nil, false
	}
	top, err := e.git.revParse(".", "--show-toplevel")
	if err != nil {
		say(e.stderr, "lilygen: %v", err)
		return nil, false
	}
	below := strings.TrimSpace(string(prefix))
	tree := e.git.tree(".", ref)
	files, err := tree.files(below)
	if err != nil {
		say(e.stderr, "lilygen: %v", err)
		return nil, false
	}
	// A file reached through a link resolves elsewhere than its path below
	// top, once top too is taken without links.
	realTop, err := filepath.EvalSymlinks(strings.TrimSpace(string(top)))
	if err != nil {
		say(e.stderr, "lilygen: %v", err)
		return nil, false
	}
	var unnamed []unnamedSchema
	// A link is no root schema, as in the working tree: its content is the
	// file it leads to, compared there if that is one.
	for _, f := range files {
		p := f.name
		if !strings.HasSuffix(p, ".lily.yaml") || paired[p] {
			continue
		}
		data, err := tree.blob(f.object, p)
		if err != nil {
			say(e.stderr, "lilygen: %v", err)
			return nil, false
		}
		if !isRoot(data) {
			continue // an included file, or no schema: none the CI job names
		}
		name := filepath.FromSlash(strings.TrimPrefix(p, below))
		full := filepath.Join(realTop, filepath.FromSlash(p))
		how := "gone from the working tree"
		now, err := os.ReadFile(full)
		var real string
		if err == nil {
			real, err = filepath.EvalSymlinks(full)
		}
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			say(e.stderr, "lilygen: %v", err)
			return nil, false
		case real != full:
			// Its content is the file the link leads to, compared there if
			// that is named.
			how = "a symbolic link now, or below one,"
		case !isRoot(now):
			how = "a root schema no longer (it has no package: another schema includes it, or none does)"
		default:
			how = ""
		}
		old, ok := e.readAt(tree, p)
		if !ok {
			return nil, false
		}
		u := unnamedSchema{old: old, name: name, how: how}
		if how == "" {
			if u.now, ok = e.loadOne(name); !ok {
				return nil, false
			}
		}
		unnamed = append(unnamed, u)
	}
	return unnamed, true
}

// isRoot reports whether data, a schema file's content, is a root schema:
// one with a package, which an included file may not have (as the CI job
// of docs/lilygen.md names them with git grep). What YAML cannot read is
// none.
func isRoot(data []byte) bool {
	pkg, ok := packageOf(data)
	return ok && pkg != ""
}

// isIncluded reports whether data, a schema file's content, is one that
// YAML reads and that has no package: a file a root schema includes (or
// one none does), not a root schema. What YAML cannot read is not: as a
// root schema, the parser reports it.
func isIncluded(data []byte) bool {
	pkg, ok := packageOf(data)
	return ok && pkg == ""
}

// packageOf is the package data, a schema file's content, names; ok is
// false when YAML cannot read it.
func packageOf(data []byte) (pkg string, ok bool) {
	var root struct {
		Package string `yaml:"package"`
	}
	if yaml.Unmarshal(data, &root) != nil {
		return "", false
	}
	return root.Package, true
}

// reportOlder prints the error of loading an older revision, if any, and
// says whether f can be compared. A revision that breaks only limits lilygen
// set after it accepted schemas beyond them (schema.Parse) is: the change
// that meets the limit is what breaking is for, so its problems are warned
// of, and it is compared as it is.
func (e *env) reportOlder(f *schema.File, err error) bool {
	var list schema.ErrorList
	if f == nil || !errors.As(err, &list) {
		return e.report(err)
	}
	for _, x := range list {
		e.format.problem(e.stdout, e.stderr, diag{File: x.File, Line: x.Line, Column: x.Column, Rule: x.Rule, Severity: warning, Hint: x.Hint,
			Message: "the older revision, compared as it is, breaks a limit lilygen sets now: " + x.Msg}, "")
	}
	return true
}

// renamedFrom is the path at ref of the file that git finds the repository
// file rel renamed from, by comparing ref with the working tree as git diff
// -M does; "" when it finds none.
func (e *env) renamedFrom(gitDir, ref, rel string) (string, error) {
	// Paths from the repository's root, whatever diff.relative says.
	out, err := e.git.output(gitDir, "-c", "diff.relative=false", "diff", "--name-status", "-z", "-M", "--diff-filter=R", ref, "--")
	if err != nil {
		return "", err
	}
	// Each rename is R<similarity>, the old path and the new, each ended by
	// a NUL.
	fields := strings.Split(string(out), "\x00")
	for i := 0; i+2 < len(fields); i += 3 {
		if fields[i+2] == rel {
			return fields[i+1], nil
		}
	}
	return "", nil
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

// gitRun asks git the questions of one run of lilygen, each once: the
// repository does not change while lilygen reads it, so an answer, or an
// error, stands for the run, and the objects at a ref are read once.
type gitRun struct {
	answers map[string]gitAnswer // by directory and arguments
	located map[string]bool      // the directories whose prefix and top were asked together
	trees   map[string]*refTree  // by work tree (its top) and ref
}

type gitAnswer struct {
	out []byte
	err error
}

func newGitRun() *gitRun {
	return &gitRun{answers: map[string]gitAnswer{}, located: map[string]bool{}, trees: map[string]*refTree{}}
}

// tree is the run's refTree of ref in the repository of dir, one for
// every directory of its work tree.
func (g *gitRun) tree(dir, ref string) *refTree {
	where := dir // git gives no top inside .git
	if top, err := g.revParse(dir, "--show-toplevel"); err == nil {
		where = string(top)
	}
	key := gitKey(where, ref)
	t, ok := g.trees[key]
	if !ok {
		t = newRefTree(g, dir, ref)
		g.trees[key] = t
	}
	return t
}

// close ends the git processes of the run's trees.
func (g *gitRun) close() {
	for _, t := range g.trees {
		t.close()
	}
}

// output is gitOutput(dir, args...), run once.
func (g *gitRun) output(dir string, args ...string) ([]byte, error) {
	key := gitKey(dir, args...)
	if a, ok := g.answers[key]; ok {
		return a.out, a.err
	}
	out, err := gitOutput(dir, args...)
	g.answers[key] = gitAnswer{out, err}
	return out, err
}

// revParse is git rev-parse arg, --show-prefix or --show-toplevel, in dir.
// Both are asked in one process; when that fails, each alone, which then
// fails with its own error.
func (g *gitRun) revParse(dir, arg string) ([]byte, error) {
	if !g.located[dir] {
		g.located[dir] = true
		out, err := gitOutput(dir, "rev-parse", "--show-prefix", "--show-toplevel")
		// A line each, unless a name holds a newline.
		if lines := strings.Split(string(out), "\n"); err == nil && len(lines) == 3 && lines[2] == "" {
			g.answers[gitKey(dir, "rev-parse", "--show-prefix")] = gitAnswer{out: []byte(lines[0] + "\n")}
			g.answers[gitKey(dir, "rev-parse", "--show-toplevel")] = gitAnswer{out: []byte(lines[1] + "\n")}
		}
	}
	return g.output(dir, "rev-parse", arg)
}

func gitKey(dir string, args ...string) string {
	return strings.Join(append([]string{dir}, args...), "\x00")
}
