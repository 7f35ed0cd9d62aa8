//go:build unix

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// A write cut short (here by a file size limit, as by a full disk) leaves
// the file it would replace whole, and nothing beside it; a file replaced
// keeps its mode.
func TestGenerateFailedWriteLeavesTheFileWhole(t *testing.T) {
	dir := t.TempDir()
	target, before := generatePing(t, dir)
	if err := os.Chmod(target, 0o600); err != nil {
		t.Fatal(err)
	}
	changed := strings.Replace(minimal, "required: true}", "required: true, max_length: 9}", 1)
	writeFile(t, filepath.Join(dir, "ping.lily.yaml"), changed)

	var limit syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &limit); err != nil {
		t.Fatal(err)
	}
	small := limit
	small.Cur = 1024 // Go ignores SIGXFSZ: a write past it fails with EFBIG
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &small); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := lilygen(t, dir, "generate", "ping.lily.yaml")
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &limit); err != nil {
		t.Fatal(err)
	}
	if code != exitFindings || !strings.Contains(stderr, "out/pingmsg.lily.go left as it was") {
		t.Errorf("generate under a file size limit: exit %d\n%s", code, stderr)
	}
	if after, err := os.ReadFile(target); err != nil || !bytes.Equal(after, before) {
		t.Errorf("the file was changed (%v):\n%s", err, after)
	}
	if entries, _ := os.ReadDir(filepath.Dir(target)); len(entries) != 1 {
		t.Errorf("out holds %v, want the generated file alone", entries)
	}

	if code, _, stderr := lilygen(t, dir, "generate", "ping.lily.yaml"); code != exitOK {
		t.Fatalf("generate: exit %d\n%s", code, stderr)
	}
	info, err := os.Stat(target)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Errorf("the replaced file's mode is %v, want -rw-------", info.Mode())
	}
}
