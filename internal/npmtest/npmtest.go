// Package npmtest installs the npm packages a test runs beside Lily (the
// AsyncAPI project's parser, a Node.js producer), from a directory holding
// their package.json and package-lock.json, once per lock file, into the
// user's cache directory.
package npmtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// Install installs the packages of dir and returns their node_modules;
// probe is a package the install must hold, such as amqplib. Two test
// processes may install at once: each installs into a directory of its own
// and renames it into place, and the one that loses keeps the winner's.
// Without node or npm the test fails: callers skip under -short.
func Install(t testing.TB, dir, probe string) string {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed: this test runs npm packages (go test -short skips it)", tool)
		}
	}
	files := []string{"package.json", "package-lock.json"}
	sum := sha256.New()
	contents := map[string][]byte{}
	for _, name := range files {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		contents[name] = data
		sum.Write(data)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir() // no home directory: a cache that lasts less
	}
	root := filepath.Join(cache, "lily", "npm")
	target := filepath.Join(root, hex.EncodeToString(sum.Sum(nil))[:16])
	modules := filepath.Join(target, "node_modules")
	installed := func() bool {
		_, err := os.Stat(filepath.Join(modules, probe, "package.json"))
		return err == nil
	}
	if installed() {
		return modules
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	tmp, err := os.MkdirTemp(root, "install-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	for name, data := range contents {
		if err := os.WriteFile(filepath.Join(tmp, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// --ignore-scripts: none of the packages needs its install scripts, and
	// one of the parser's dependencies would otherwise report the install
	// to its vendor.
	cmd := exec.CommandContext(ctx, "npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in %s: %v (the first run needs the npm registry; later ones use the install under %s; go test -short skips this test)\n%s", tmp, err, root, out)
	}
	// A rename that fails because another process put its install there
	// first leaves that one, as good as this.
	if err := os.Rename(tmp, target); err != nil && !installed() {
		t.Fatal(err)
	}
	if !installed() {
		t.Fatalf("npm ci did not install %s into %s", probe, modules)
	}
	return modules
}
