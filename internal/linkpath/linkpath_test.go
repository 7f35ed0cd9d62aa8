package linkpath_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lily-mq/lily/internal/linkpath"
	_ "github.com/lily-mq/lily/internal/update"
)

// Resolve follows a link to its file, a dangling one to the file it names,
// relative to the link's real directory, and refuses a loop.
func TestResolve(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, l := range []struct{ to, at string }{
		{"real/there", "there"}, {"real/nothere", "dangling"}, {"real", "dirlink"}, {"loop", "loop"},
	} {
		if err := os.Symlink(l.to, filepath.Join(dir, l.at)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(real, "there"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ path, want string }{
		{"there", "real/there"},
		{"dangling", "real/nothere"},
		{"dirlink/new", "dirlink/new"}, // not there: created as named, the directory link followed by the kernel
		{"plain", "plain"},
	} {
		got, err := linkpath.Resolve(filepath.Join(dir, c.path))
		if want := filepath.Join(dir, c.want); err != nil || got != want {
			t.Errorf("Resolve(%s) = %q, %v; want %q", c.path, got, err, want)
		}
	}
	if got, err := linkpath.Resolve(filepath.Join(dir, "loop")); err == nil || !strings.Contains(err.Error(), "too many symbolic links") {
		t.Errorf("Resolve(a loop) = %q, %v", got, err)
	}
}
