package schema

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeTree writes files, by slash path, below dir.
func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, src := range files {
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

const secret = "API_TOKEN=ghp_abcdefghijklmnopqrstuvwxyz\n"

// An include stays in the repository of the root schema: a schema a pull
// request brings, checked in CI, must not read the runner's files and quote
// them in its errors. A file elsewhere in the repository is fine.
func TestIncludeStaysInTheRepository(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"secrets.env":             secret,
		"repo/.git/HEAD":          "ref: refs/heads/main\n",
		"repo/shared/a.lily.yaml": "version: 1\nmessages: {A: {versions: {1: {}}}}\n",
		"repo/svc/x.lily.yaml":    "version: 1\npackage: x\ninclude: [../shared/a.lily.yaml, ../../secrets.env, ../../../../../../../../../../../etc/passwd]\nqueues: {q: {consumes: [{message: A}]}}\n",
	})
	wantRefused(t, filepath.Join(dir, "repo", "svc", "x.lily.yaml"),
		`3:34: include "../../secrets.env" is outside the repository [BAD-INCLUDE]`,
		`3:53: include "../../../../../../../../../../../etc/..." is outside the repository [BAD-INCLUDE]`)
}

// An include into a .git directory, the repository's or a submodule's, is
// refused though it is inside the repository: git's config there may hold
// the token CI fetched with. A file named like one elsewhere is read.
func TestIncludeIntoGitIsRefused(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"repo/.git/config":           "version: 1\n" + secret,
		"repo/sub/.git/config":       "version: 1\n" + secret,
		"repo/shared/a.lily.yaml":    "version: 1\nmessages: {A: {versions: {1: {}}}}\n",
		"repo/shared/.github/x.yaml": "version: 1\n",
		"repo/svc/x.lily.yaml":       "version: 1\npackage: x\ninclude: [../shared/a.lily.yaml, ../.git/config, ../shared/../sub/.git/config, ../shared/.github/x.yaml]\nqueues: {q: {consumes: [{message: A}]}}\n",
	})
	wantRefused(t, filepath.Join(dir, "repo", "svc", "x.lily.yaml"),
		`3:34: include "../.git/config" is in a .git directory, git's own, which is not read: its config may hold a credential [BAD-INCLUDE]`,
		`3:50: include "../shared/../sub/.git/config" is in a .git directory, git's own, which is not read: its config may hold a credential [BAD-INCLUDE]`)
}

// isolatedDir is a temporary directory that no git work tree or Go module
// holds: one would be the bound of what the schemas written there include.
func isolatedDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if b := enclosing(dir); b.dir != fileID(dir) {
		t.Skipf("the temporary directory %s is inside %s (%s): set TMPDIR outside it", dir, b.dir, b.what)
	}
	return dir
}

// wantRefused loads the schema root and wants exactly the errors want, one
// a line, and none that quotes the secret.
func wantRefused(t *testing.T, root string, want ...string) {
	t.Helper()
	_, err := Load(root)
	got := ""
	if err != nil {
		got = err.Error()
	}
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("want %s\ngot %s", w, got)
		}
	}
	if strings.Contains(got, "ghp_") || strings.Count(got, "\n") != len(want)-1 {
		t.Errorf("want %d errors, none quoting the secret; got %s", len(want), got)
	}
}

// Outside a git work tree, an include stays in the outermost Go module that
// holds the root schema: a build that copies the sources without .git still
// reads a file the repository's modules share.
func TestIncludeStaysInTheModule(t *testing.T) {
	dir := isolatedDir(t)
	writeTree(t, dir, map[string]string{
		"secrets.env":            secret,
		"mod/go.mod":             "module example.com/mod\n",
		"mod/svc/go.mod":         "module example.com/mod/svc\n", // a module of its own
		"mod/shared/a.lily.yaml": "version: 1\nmessages: {A: {versions: {1: {}}}}\n",
		"mod/svc/x.lily.yaml":    "version: 1\npackage: x\ninclude: [../shared/a.lily.yaml]\nqueues: {q: {consumes: [{message: A}]}}\n",
		"mod/svc/y.lily.yaml":    "version: 1\npackage: y\ninclude: [../shared/a.lily.yaml, ../../secrets.env]\nqueues: {q: {consumes: [{message: A}]}}\n",
	})
	if _, err := Load(filepath.Join(dir, "mod", "svc", "x.lily.yaml")); err != nil {
		t.Errorf("a file shared by the modules: %v", err)
	}
	wantRefused(t, filepath.Join(dir, "mod", "svc", "y.lily.yaml"),
		`3:34: include "../../secrets.env" is outside the Go module, and no git work tree holds it [BAD-INCLUDE]`)
}

// Outside a git work tree and a Go module, an include stays in the root
// schema's directory.
func TestIncludeStaysInTheSchemasDirectory(t *testing.T) {
	dir := isolatedDir(t)
	writeTree(t, dir, map[string]string{
		"secrets.env":         secret,
		"svc/sub/a.lily.yaml": "version: 1\nmessages: {A: {versions: {1: {}}}}\n",
		"svc/x.lily.yaml":     "version: 1\npackage: x\ninclude: [sub/a.lily.yaml, ../secrets.env]\nqueues: {q: {consumes: [{message: A}]}}\n",
	})
	wantRefused(t, filepath.Join(dir, "svc", "x.lily.yaml"),
		`3:28: include "../secrets.env" is outside the root schema's directory, and no git work tree or Go module holds it [BAD-INCLUDE]`)
}

// A file that YAML reads as one value is no schema, and its content is not
// quoted: it may be anything, a secret among them.
func TestSchemaOfOneValueIsNotQuoted(t *testing.T) {
	wantErrors(t, secret, []string{`1:1: the schema: want a mapping, got a single value (its content is not shown): a schema starts with version: 1 [WRONG-KIND]`})
}

// maxSchemaBytes bounds a schema's files together, not each one: a root
// and includes each just under it, up to 1,000 files, would otherwise
// make lilygen read gigabytes and hold the YAML tree of each (three
// 16 MiB includes took 100 s and 5.2 GB). The include that would take the
// schema past it is refused where it is named, and not read; one that
// still fits after it is read. A root schema past it is refused whole.
func TestSchemaBytesBoundAllFilesTogether(t *testing.T) {
	dir := t.TempDir()
	pad := func(head string, n int) string { return head + "#" + strings.Repeat("x", n-len(head)-2) + "\n" }
	third := maxSchemaBytes / 3
	writeTree(t, dir, map[string]string{
		"repo/.git/HEAD":  "ref: refs/heads/main\n",
		"repo/a.yaml":     pad("version: 1\nmessages: {A: {versions: {1: {}}}}\n", third),
		"repo/b.yaml":     pad("version: 1\nmessages: {B: {versions: {1: {}}}}\n", third),
		"repo/c.yaml":     pad("version: 1\nmessages: {C: {versions: {1: {}}}}\n", third),
		"repo/small.yaml": "version: 1\nmessages: {S: {versions: {1: {}}}}\n",
		"repo/x.lily.yaml": "version: 1\npackage: x\ninclude: [a.yaml, b.yaml, c.yaml, small.yaml]\n" +
			"queues: {q: {consumes: [{message: A}, {message: B}, {message: S}]}}\n",
	})
	wantRefused(t, filepath.Join(dir, "repo", "x.lily.yaml"),
		`3:27: include "c.yaml" takes the schema past 4 MiB, the most its files may hold together (it is not read) (split the messages and queues into schemas of their own, each with its root file) [BAD-INCLUDE]`)

	src := pad("version: 1\npackage: x\nmessages: {A: {versions: {1: {}}}}\n", maxSchemaBytes+1)
	if _, err := Parse("big.lily.yaml", []byte(src)); err == nil || err.Error() != "big.lily.yaml: larger than 4 MiB" {
		t.Errorf("Parse of a root over the bound: %v", err)
	}
}

// An include refused for the room it would take is refused once, where it
// is first named, and not read again: a root listing one 4 MiB file 20,000
// times read it each time (124 s) and never counted it toward maxFiles.
func TestIncludePastTheRoomIsRefusedOnce(t *testing.T) {
	files := map[string]string{
		"a.yaml": "version: 1\n#" + strings.Repeat("x", 3<<20) + "\n",
		"b.yaml": "version: 1\n#" + strings.Repeat("x", 2<<20) + "\n",
	}
	reads := map[string]int{}
	read := func(name string, _ int) ([]byte, error) {
		reads[name]++
		return []byte(files[name]), nil
	}
	src := "version: 1\npackage: x\ninclude: [a.yaml" + strings.Repeat(", b.yaml", 100) + "]\nmessages: {A: {versions: {1: {}}}}\n"
	_, err := parse("root.yaml", []byte(src), read)
	want := `root.yaml:3:19: include "b.yaml" takes the schema past 4 MiB, the most its files may hold together (it is not read) (split the messages and queues into schemas of their own, each with its root file) [BAD-INCLUDE]`
	if err == nil || err.Error() != want {
		t.Errorf("got  %v\nwant %s", err, want)
	}
	if reads["b.yaml"] > 1 {
		t.Errorf("b.yaml read %d times", reads["b.yaml"])
	}

	// From disk, its size is known before it is read.
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"repo/.git/HEAD":   "ref: refs/heads/main\n",
		"repo/b.yaml":      "version: 1\n#" + strings.Repeat("x", maxSchemaBytes-13) + "\n",
		"repo/x.lily.yaml": "version: 1\npackage: x\ninclude: [b.yaml, b.yaml, b.yaml]\nmessages: {A: {versions: {1: {}}}}\n",
	})
	wantRefused(t, filepath.Join(dir, "repo", "x.lily.yaml"),
		`3:11: include "b.yaml" takes the schema past 4 MiB, the most its files may hold together (it is not read) (split the messages and queues into schemas of their own, each with its root file) [BAD-INCLUDE]`)
	if data, err := readFile(filepath.Join(dir, "repo", "b.yaml"), maxSchemaBytes-1); err != errPastRoom || data != nil {
		t.Errorf("readFile past the room: %d bytes, %v", len(data), err)
	}
}
