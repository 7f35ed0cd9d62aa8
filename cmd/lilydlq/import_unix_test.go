//go:build unix

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestImportReadsAPipeOnce: an export that can be read only once, from a
// pipe (as /dev/stdin is under `zcat export.gz | lilydlq import ...`) or a
// FIFO whose writer writes it once, is imported whole: each line is in the
// queue, exit 0. Before, the publish opened the file again: the pipe was
// empty by then (imported 0 of 2 lines, exit 0), and the FIFO, without a
// writer, held the import for good. Past the bound of the copy import keeps
// of such an input, it is refused and nothing is published.
func TestImportReadsAPipeOnce(t *testing.T) {
	b := newBroker(t)
	dlq := b.queue("dlq", nil)
	var msgs []amqp.Publishing
	for _, id := range []string{"p-1", "p-2"} {
		msgs = append(msgs, lilyCopy(id, "t", "permanent failure", "permanent", "src", 1, time.Now()))
	}
	b.publish(dlq, msgs...)
	file := filepath.Join(t.TempDir(), "dlq.jsonl")
	if r := b.lilydlq("export", dlq, "-o", file); r.code != exitOK {
		t.Fatalf("export: exit %d\n%s", r.code, r.stderr)
	}
	if r := b.lilydlq("purge", dlq, "-confirm", dlq, "-all"); r.code != exitOK {
		t.Fatalf("purge: exit %d\n%s", r.code, r.stderr)
	}
	export, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}

	// import runs lilydlq import of path, which writeOnce fills, and
	// returns what it did, failing the test if it does not end.
	importFrom := func(path string, writeOnce func()) result {
		t.Helper()
		done := make(chan result, 1)
		go func() { done <- b.lilydlq("import", "-to", dlq, path) }()
		writeOnce()
		select {
		case r := <-done:
			return r
		case <-time.After(2 * time.Minute):
			t.Fatalf("import of %s: not ended within 2 minutes", path)
			return result{}
		}
	}
	pipe := func() (string, func()) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Close() })
		return fmt.Sprintf("/dev/fd/%d", r.Fd()), func() {
			defer w.Close()
			if _, err := w.Write(export); err != nil {
				t.Error(err)
			}
		}
	}
	fifo := func() (string, func()) {
		path := filepath.Join(t.TempDir(), "export.fifo")
		if err := syscall.Mkfifo(path, 0o600); err != nil {
			t.Fatal(err)
		}
		return path, func() {
			// Once: a writer that has gone does not come back.
			if err := os.WriteFile(path, export, 0o600); err != nil {
				t.Error(err)
			}
		}
	}
	for name, input := range map[string]func() (string, func()){"pipe": pipe, "fifo": fifo} {
		path, writeOnce := input()
		r := importFrom(path, writeOnce)
		if r.code != exitOK || !strings.Contains(r.stdout, path+": imported 2 of 2 lines to "+dlq+" (0 skipped)") {
			t.Errorf("import from a %s: exit %d\n%s%s", name, r.code, r.stdout, r.stderr)
		}
		if got := ids(b.take(dlq)); !slices.Equal(got, []string{"p-1", "p-2"}) {
			t.Errorf("import from a %s: the DLQ holds %v", name, got)
		}
	}

	defer func(was int64) { maxSpool = was }(maxSpool)
	maxSpool = int64(len(export) - 1)
	path, writeOnce := pipe()
	r := importFrom(path, writeOnce)
	if want := fmt.Sprintf("%s is not a regular file, and it holds more than the %d bytes import copies of such an input before it publishes anything: write it to a file first, and import that; nothing was imported", path, maxSpool); r.code != exitFailure || !strings.Contains(r.stderr, want) || r.stdout != "" {
		t.Errorf("import of more than the copy's bound: exit %d, want %d and %q\n%s%s", r.code, exitFailure, want, r.stdout, r.stderr)
	}
	b.assertCounts(dlq, 0)
}
