//go:build unix

package schema

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// An include is read only when it is a regular file of at most
// maxSchemaBytes: a device would be read without end (/dev/zero until
// memory runs out), a FIFO would block lilygen forever.
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
		_, err := Load(root)
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
		`3:33: cannot read include "big.yaml": larger than 16 MiB [BAD-INCLUDE]`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Load: %v\nwant %s", err, want)
		}
	}
}
