//go:build unix

package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// -o writes through what it is given: a FIFO (or a device, a process
// substitution) as it is, a symbolic link to its target (also one that
// does not exist yet), and a file it replaces keeps its mode; a link to
// itself is refused.
func TestExportWritesThroughWhatItIsGiven(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	dlq := b.queue("dlq", nil)
	b.publish(dlq, lilyCopy("one", "t", "permanent failure", "permanent", "src", 1, time.Now()))
	dir := t.TempDir()

	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	read := make(chan string, 1)
	go func() {
		data, _ := os.ReadFile(fifo)
		read <- string(data)
	}()
	if r := b.lilydlq("export", dlq, "-o", fifo); r.code != exitOK {
		t.Fatalf("export to a FIFO: exit %d\n%s", r.code, r.stderr)
	}
	if got := <-read; strings.Count(got, "\n") != 1 || !strings.Contains(got, `"id":"one"`) {
		t.Errorf("the FIFO's reader got %q", got)
	}

	target := filepath.Join(dir, "target.jsonl")
	if err := os.WriteFile(target, []byte("old\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.jsonl")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if r := b.lilydlq("export", dlq, "-o", link); r.code != exitOK {
		t.Fatalf("export to a link: exit %d\n%s", r.code, r.stderr)
	}
	if info, err := os.Lstat(link); err != nil || info.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link was replaced (%v)", err)
	}
	data, err := os.ReadFile(target)
	info, _ := os.Stat(target)
	if err != nil || !strings.Contains(string(data), `"id":"one"`) || info.Mode().Perm() != 0o640 {
		t.Errorf("the target holds %q (%v), mode %v; want the export, mode 0640", data, err, info.Mode().Perm())
	}

	// A link to a file not there yet, relative, through another: the file
	// is created where the last one points, and both stay links.
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "out"), 0o700); err != nil {
		t.Fatal(err)
	}
	dangling, chain := filepath.Join(dir, "sub", "dangling.jsonl"), filepath.Join(dir, "chain.jsonl")
	if err := os.Symlink("../out/new.jsonl", dangling); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("sub/dangling.jsonl", chain); err != nil {
		t.Fatal(err)
	}
	if r := b.lilydlq("export", dlq, "-o", chain); r.code != exitOK {
		t.Fatalf("export to a dangling link: exit %d\n%s", r.code, r.stderr)
	}
	for _, l := range []string{chain, dangling} {
		if info, err := os.Lstat(l); err != nil || info.Mode()&os.ModeSymlink == 0 {
			t.Errorf("the link %s was replaced (%v)", l, err)
		}
	}
	created := filepath.Join(dir, "out", "new.jsonl")
	data, err = os.ReadFile(created)
	info, _ = os.Stat(created)
	if err != nil || !strings.Contains(string(data), `"id":"one"`) || info.Mode().Perm() != 0o600 {
		t.Errorf("%s holds %q (%v); want the export, mode 0600", created, data, err)
	}

	// A link to itself is refused, not followed for ever, and left as it is.
	loop := filepath.Join(dir, "loop.jsonl")
	if err := os.Symlink("loop.jsonl", loop); err != nil {
		t.Fatal(err)
	}
	if r := b.lilydlq("export", dlq, "-o", loop); r.code != exitFailure || !strings.Contains(r.stderr, "too many symbolic links") {
		t.Errorf("export to a link to itself: exit %d\n%s", r.code, r.stderr)
	}
	if to, err := os.Readlink(loop); err != nil || to != "loop.jsonl" {
		t.Errorf("the loop now leads to %q (%v)", to, err)
	}
	b.assertCounts(dlq, 1)
}
