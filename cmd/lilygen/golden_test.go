package main

import (
	"bytes"
	"flag"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the expected files of testdata/golden")

const (
	goldenSchema = "schema.lily.yaml"
	goldenSuffix = ".golden" // keeps the go tool from building expected Go files
)

// TestGolden runs lilygen generate on each testdata/golden/<case>/schema.lily.yaml
// and compares everything it produced with the case's expected files:
// expected/<path>.golden for each generated file, expected.stderr and
// expected.code when it fails. Generated files must also pass go vet.
func TestGolden(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", "..", "testdata", "golden"))
	if err != nil {
		t.Fatal(err)
	}
	cases, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	generated := map[string]string{} // <case>/<path> → content, for go vet
	for _, c := range cases {
		dir := filepath.Join(root, c.Name())
		t.Run(c.Name(), func(t *testing.T) {
			got := runCase(t, dir)
			for name, content := range got {
				if rel, ok := strings.CutPrefix(name, "expected/"); ok {
					generated[filepath.Join(c.Name(), strings.TrimSuffix(rel, goldenSuffix))] = content
				}
			}
			if *update {
				rewrite(t, dir, got)
			} else if diff := cmp.Diff(readTree(t, dir), got); diff != "" {
				t.Errorf("lilygen output differs from testdata/golden/%s (-want +got):\n%s\nrun go test ./cmd/lilygen -run Golden -update to accept it", c.Name(), diff)
			}
		})
	}
	if !t.Failed() {
		vetAll(t, generated)
	}
}

// runCase runs lilygen generate, and then check, on a copy of the case's
// schema and returns what a case directory should hold.
func runCase(t *testing.T, dir string) map[string]string {
	schema, err := os.ReadFile(filepath.Join(dir, goldenSchema))
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	writeFile(t, filepath.Join(work, goldenSchema), string(schema))
	t.Chdir(work) // paths in messages are as a go:generate line gives them
	var stdout, stderr bytes.Buffer
	code := run([]string{"generate", goldenSchema}, &stdout, &stderr)
	got := map[string]string{}
	if stdout.Len() > 0 {
		got["expected.stdout"] = stdout.String()
	}
	if stderr.Len() > 0 {
		got["expected.stderr"] = stderr.String()
	}
	if code != 0 {
		got["expected.code"] = strconv.Itoa(code) + "\n"
		return got
	}
	for name, content := range readTree(t, work) {
		got[filepath.ToSlash(filepath.Join("expected", name+goldenSuffix))] = content
	}
	// Generating again must give the same bytes, which check verifies.
	stdout.Reset()
	stderr.Reset()
	if code := run([]string{"check", goldenSchema}, &stdout, &stderr); code != 0 || stdout.Len()+stderr.Len() > 0 {
		t.Errorf("check right after generate: exit %d\n%s%s", code, &stdout, &stderr)
	}
	return got
}

// readTree reads every file below dir but the schema, by slash path.
func readTree(t *testing.T, dir string) map[string]string {
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil || rel == goldenSchema {
			return err
		}
		content, err := os.ReadFile(path)
		files[filepath.ToSlash(rel)] = string(content)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// rewrite replaces the case's expected files with got.
func rewrite(t *testing.T, dir string, got map[string]string) {
	for name := range readTree(t, dir) {
		if err := os.Remove(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.RemoveAll(filepath.Join(dir, "expected")); err != nil {
		t.Fatal(err)
	}
	for name, content := range got {
		writeFile(t, filepath.Join(dir, filepath.FromSlash(name)), content)
	}
}

// writeFile writes content to path, making its directory first.
func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// vetAll copies the generated files into the module, where they can import
// its runtime, and runs go vet on them all at once. The copy lives under
// testdata, which ./... patterns skip, so other builds never see it.
func vetAll(t *testing.T, generated map[string]string) {
	if testing.Short() {
		t.Skip("go vet of the golden outputs skipped in -short mode")
	}
	module, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	tmp, err := os.MkdirTemp(filepath.Join(module, "testdata"), "vet-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	pkgs := map[string]bool{}
	for name, content := range generated {
		path := filepath.Join(tmp, name)
		writeFile(t, path, content)
		rel, err := filepath.Rel(module, filepath.Dir(path))
		if err != nil {
			t.Fatal(err)
		}
		pkgs["./"+filepath.ToSlash(rel)] = true
	}
	args := []string{"vet"}
	for pkg := range pkgs {
		args = append(args, pkg)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = module
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go vet of the golden outputs: %v\n%s", err, out)
	}
}
