//go:build unix

package schema

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// An include is read only when it is a regular file of at most
// maxSchemaBytes: a device would be read without end (/dev/zero until
// memory runs out), a FIFO would block lilygen forever. The repository is
// taken to be all of the file system, so that the link to /dev/zero is in
// it.
func TestIncludeReadsRegularFilesOnly(t *testing.T) {
	dir := t.TempDir()
	if err := os.Symlink("/dev/zero", filepath.Join(dir, "zero.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo.yaml"), 0o600); err != nil {
		t.Fatal(err)
	}
	big := append([]byte("version: 1\nmessages: {}\n#"), bytes.Repeat([]byte("x"), maxSchemaBytes)...)
	if err := os.WriteFile(filepath.Join(dir, "big.yaml"), big, 0o600); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "root.yaml")
	src := "version: 1\npackage: x\ninclude: [zero.yaml, fifo.yaml, big.yaml]\nmessages: {A: {versions: {1: {}}}}\n"
	if err := os.WriteFile(root, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := parseWithin(root, []byte(src), readFile, bound{dir: "/", what: inRepository})
		done <- err
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		t.Fatal("Load still reads a minute later")
	}
	for _, want := range []string{
		`3:11: cannot read include "zero.yaml": not a regular file [BAD-INCLUDE]`,
		`3:22: cannot read include "fifo.yaml": not a regular file [BAD-INCLUDE]`,
		`3:33: cannot read include "big.yaml": larger than 4 MiB [BAD-INCLUDE]`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Load: %v\nwant %s", err, want)
		}
	}
}

// A file reached through symbolic links is the same file: sub.yaml, which
// includes itself as l1/sub.yaml and l2/sub.yaml with l1 and l2 links to
// its own directory, is read once, not twice at every level until the
// names grow too long.
func TestIncludeThroughSymlinksIsReadOnce(t *testing.T) {
	dir := t.TempDir()
	for _, link := range []string{"l1", "l2"} {
		if err := os.Symlink(".", filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	for name, src := range map[string]string{
		"root.yaml": "version: 1\npackage: x\ninclude: [sub.yaml]\nmessages: {A: {versions: {1: {}}}}\n",
		"sub.yaml":  "version: 1\ninclude: [l1/sub.yaml, l2/sub.yaml]\nmessages: {B: {versions: {1: {}}}}\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	var f *File
	go func() {
		var err error
		f, err = Load(filepath.Join(dir, "root.yaml"))
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Load still reads a minute later")
	}
	if want := []string{filepath.Join(dir, "sub.yaml")}; !slices.Equal(f.Includes, want) || len(f.Messages) != 2 {
		t.Errorf("includes %v, messages %d; want %v", f.Includes, len(f.Messages), want)
	}
}

// An include is judged by the file it leads to: a link in the repository to
// a file outside is outside, and a link to another file inside is fine.
func TestIncludeThroughSymlinksStaysInTheRepository(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"secrets.env":      secret,
		"repo/.git/HEAD":   "ref: refs/heads/main\n",
		"repo/shared.yaml": "version: 1\nmessages: {A: {versions: {1: {}}}}\n",
		"repo/x.lily.yaml": "version: 1\npackage: x\ninclude: [in.yaml, out.yaml, up/secrets.env]\nqueues: {q: {consumes: [{message: A}]}}\n",
	})
	for link, to := range map[string]string{"in.yaml": "shared.yaml", "out.yaml": "../secrets.env", "up": ".."} {
		if err := os.Symlink(to, filepath.Join(dir, "repo", link)); err != nil {
			t.Fatal(err)
		}
	}
	wantRefused(t, filepath.Join(dir, "repo", "x.lily.yaml"),
		`3:20: include "out.yaml" is outside the repository [BAD-INCLUDE]`,
		`3:30: include "up/secrets.env" is outside the repository [BAD-INCLUDE]`)
}

// A root schema that is a link to a file outside its repository is not
// read: CI names the root, but a pull request may commit a link there.
func TestRootSchemaLinkStaysInTheRepository(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"outside.yaml":   "version: 1\npackage: ghp_SECRET\nmessages: ghp_ANOTHER\n",
		"repo/.git/HEAD": "ref: refs/heads/main\n",
		"repo/in.yaml":   "version: 1\npackage: x\nmessages: {A: {versions: {1: {}}}}\nqueues: {q: {consumes: [{message: A}]}}\n",
	})
	for link, to := range map[string]string{"out.lily.yaml": "../outside.yaml", "in.lily.yaml": "in.yaml"} {
		if err := os.Symlink(to, filepath.Join(dir, "repo", link)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Load(filepath.Join(dir, "repo", "in.lily.yaml")); err != nil {
		t.Errorf("a link to a file in the repository: %v", err)
	}
	root := filepath.Join(dir, "repo", "out.lily.yaml")
	_, err := Load(root)
	if want := root + ": a link to a file outside the repository, which is not read"; err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
}

// A path longer than maxPath bytes is refused before its links are
// resolved, and named clipped: resolving one took time of the square of
// its parts (40,000 of them, 12 s), and the error quoted it whole.
func TestLongPathsAreRefused(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"repo/.git/HEAD": "ref: refs/heads/main\n"})
	if err := os.Symlink(".", filepath.Join(dir, "repo", "l")); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("l/", 2500)
	writeTree(t, dir, map[string]string{
		"repo/x.lily.yaml": "version: 1\npackage: x\noutput: " + long + "out\nasyncapi: {file: " + long + "x.yaml}\n" +
			"include: [" + long + "b.yaml]\nmessages: {A: {versions: {1: {}}}}\n",
	})
	// Under the bound, the longest leading directory that resolves is
	// still found: all the links, and no more.
	repo := fileID(filepath.Join(dir, "repo"))
	if got, want := fileID(filepath.Join(dir, "repo", strings.Repeat("l/", 100)+"missing/b.yaml")), filepath.Join(repo, "missing", "b.yaml"); got != want {
		t.Errorf("fileID = %s, want %s", got, want)
	}
	name := filepath.Join(dir, "repo", "x.lily.yaml")
	wantRefused(t, name, `5:11: include "l/l/l/l/l/l/l/l/l/l/l/l/l/l/l/l/l/l/l..." leads to a path of 5`)
	// The same schema, its include gone, for its outputs.
	writeTree(t, dir, map[string]string{"repo/x.lily.yaml": strings.Replace(readTestFile(t, name), "include: ["+long+"b.yaml]\n", "", 1)})
	f, err := Load(name)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ out, want string }{
		{long + "out/x.lily.go", `3:9: output "l/l/l/l/l/l/l/l/l/l/l/l/l/l/l/l/l/l/l..." leads to a path of 5`},
		{long + "x.yaml", `4:18: asyncapi file "l/l/l/l/l/l/l/l/l/l/l/l/l/l/l/l/l/l/l..." leads to a path of 5`},
	} {
		err := f.CheckOutput(c.out)
		if err == nil || !strings.Contains(err.Error(), c.want) || len(err.Error()) > 1000 {
			t.Errorf("CheckOutput: %.1000v\nwant %s", err, c.want)
		}
	}
}

func readTestFile(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
