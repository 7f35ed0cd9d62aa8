package main

import (
	"bytes"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lily-mq/lily/internal/update"
)

const (
	goldenArgs     = "args" // the lilygen command line of a case, when not the default
	goldenRef      = "ref/" // the files of a case's git ref main, when it has one
	defaultArgs    = "generate schema.lily.yaml"
	goldenSuffix   = ".golden"  // keeps the go tool from building expected Go files
	expectedPrefix = "expected" // expected.stdout, expected.stderr, expected.code, expected/
)

// TestGolden runs lilygen in a copy of each case of testdata/golden and
// compares everything it produced with the case's expected files:
// expected.stdout, expected.stderr and expected.code (when not 0), and
// expected/<path>.golden for each file it wrote. A case holds its input files
// (schema.lily.yaml and any others it names) and, in the file args, the
// command line when it is not "generate schema.lily.yaml". A case with files
// under ref/ runs in a git repository whose branch main holds them (see
// commit). A generate that
// succeeds must leave check satisfied, and the Go files it wrote must pass
// go vet. A case's own tests (its *_test.go files, beside the Go file they
// test) then run on what it generated: behaviour that a golden file only
// shows. The work directory's path prints as $WORK, and expected files are
// read with LF line endings. go test ./cmd/lilygen -update (or LILY_UPDATE=1)
// rewrites the expected files.
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
	tests := map[string]string{}     // <case>/<path> → content of the cases' own tests
	for _, c := range cases {
		if !c.IsDir() {
			continue
		}
		dir := filepath.Join(root, c.Name())
		t.Run(c.Name(), func(t *testing.T) {
			for name, content := range readTree(t, dir) {
				if strings.HasSuffix(name, "_test.go") {
					tests[filepath.Join(c.Name(), name)] = content
				}
			}
			got := runCase(t, dir)
			for name, content := range got {
				rel, ok := strings.CutPrefix(name, expectedPrefix+"/")
				if rel = strings.TrimSuffix(rel, goldenSuffix); ok && strings.HasSuffix(rel, ".go") {
					generated[filepath.Join(c.Name(), rel)] = content
				}
			}
			if update.Enabled() {
				rewrite(t, dir, got)
			} else if diff := cmp.Diff(expected(t, dir), got); diff != "" {
				t.Errorf("lilygen output differs from testdata/golden/%s (-want +got):\n%s\nrun go test ./cmd/lilygen -run Golden -update to accept it", c.Name(), diff)
			}
		})
	}
	if !t.Failed() {
		vetAll(t, generated, tests)
	}
}

// runCase runs the case's command line on a copy of its inputs and returns
// what its expected files should hold.
func runCase(t *testing.T, dir string) map[string]string {
	inputs := map[string]string{}
	for name, content := range readTree(t, dir) {
		if !isExpected(name) {
			inputs[name] = content
		}
	}
	args := strings.Fields(defaultArgs)
	if line, ok := inputs[goldenArgs]; ok {
		args = strings.Fields(line)
		delete(inputs, goldenArgs)
	}
	work := t.TempDir()
	commit(t, work, inputs)
	for name, content := range inputs {
		writeFile(t, filepath.Join(work, filepath.FromSlash(name)), content)
	}
	t.Chdir(work) // paths in messages are as a go:generate line gives them
	var stdout, stderr bytes.Buffer
	code := run(args, &stdout, &stderr)
	got := map[string]string{}
	// The work directory differs on every run and machine.
	normalise := func(s string) string { return strings.ReplaceAll(s, work, "$WORK") }
	if stdout.Len() > 0 {
		got[expectedPrefix+".stdout"] = normalise(stdout.String())
	}
	if stderr.Len() > 0 {
		got[expectedPrefix+".stderr"] = normalise(stderr.String())
	}
	if code != 0 {
		got[expectedPrefix+".code"] = strconv.Itoa(code) + "\n"
	}
	for name, content := range readTree(t, work) {
		if _, input := inputs[name]; !input {
			got[expectedPrefix+"/"+name+goldenSuffix] = content
		}
	}
	// Generating again must give the same bytes, which check verifies.
	if args[0] == "generate" && code == 0 {
		stdout.Reset()
		stderr.Reset()
		if code := run(append([]string{"check"}, args[1:]...), &stdout, &stderr); code != 0 || stdout.Len()+stderr.Len() > 0 {
			t.Errorf("check right after generate: exit %d\n%s%s", code, &stdout, &stderr)
		}
	}
	return got
}

// commit makes work a git repository when the case has files under ref/:
// they are committed at their paths below it as main, then removed from
// inputs, and the rest committed on a branch of their own, as a pull
// request's checkout has them, so that git finds what it renamed.
func commit(t *testing.T, work string, inputs map[string]string) {
	ref := false
	for name, content := range inputs {
		if rel, ok := strings.CutPrefix(name, goldenRef); ok {
			writeFile(t, filepath.Join(work, filepath.FromSlash(rel)), content)
			delete(inputs, name)
			ref = true
		}
	}
	if !ref {
		return
	}
	git(t, work, "init", "-q", "-b", "main")
	git(t, work, "add", ".")
	git(t, work, "commit", "-q", "-m", "main")
	git(t, work, "checkout", "-q", "-b", "change")
	git(t, work, "rm", "-q", "-r", ".")
	for name, content := range inputs {
		writeFile(t, filepath.Join(work, filepath.FromSlash(name)), content)
	}
	git(t, work, "add", ".")
	git(t, work, "commit", "-q", "--allow-empty", "-m", "change")
}

func isExpected(name string) bool {
	return strings.HasPrefix(name, expectedPrefix+".") || strings.HasPrefix(name, expectedPrefix+"/")
}

// expected reads a case's expected files, with line endings normalised in
// case a checkout turned them into CRLF.
func expected(t *testing.T, dir string) map[string]string {
	files := map[string]string{}
	for name, content := range readTree(t, dir) {
		if isExpected(name) {
			files[name] = strings.ReplaceAll(content, "\r\n", "\n")
		}
	}
	return files
}

// readTree reads every file below dir, by slash path.
func readTree(t *testing.T, dir string) map[string]string {
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			if err == nil && d.Name() == ".git" {
				return fs.SkipDir // a case's repository (see commit)
			}
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
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
	for name := range expected(t, dir) {
		if err := os.Remove(filepath.Join(dir, filepath.FromSlash(name))); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.RemoveAll(filepath.Join(dir, expectedPrefix)); err != nil {
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
// its runtime, and runs go vet on them all at once, then the cases' tests,
// copied beside them. The copy lives under testdata, which ./... patterns
// skip, so other builds never see it.
func vetAll(t *testing.T, generated, tests map[string]string) {
	if testing.Short() {
		t.Skip("go vet of the golden outputs skipped in -short mode")
	}
	if len(generated) == 0 {
		return
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
	// place writes files into tmp and returns their packages.
	place := func(files map[string]string) []string {
		pkgs := map[string]bool{}
		for name, content := range files {
			path := filepath.Join(tmp, name)
			writeFile(t, path, content)
			rel, err := filepath.Rel(module, filepath.Dir(path))
			if err != nil {
				t.Fatal(err)
			}
			pkgs["./"+filepath.ToSlash(rel)] = true
		}
		return slices.Sorted(maps.Keys(pkgs))
	}
	goCommand(t, module, append([]string{"vet"}, place(generated)...)...)
	if tested := place(tests); len(tested) > 0 {
		goCommand(t, module, append([]string{"test", "-count=1"}, tested...)...)
	}
}

// goCommand runs the go command in dir and fails t with its output if it
// fails.
func goCommand(t *testing.T, dir string, args ...string) {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s of the golden outputs: %v\n%s", args[0], err, out)
	}
}
