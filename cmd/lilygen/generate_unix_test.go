//go:build unix

package main

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
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

	code, _, stderr := underFileSizeLimit(t, dir, "generate", "ping.lily.yaml")
	if code != exitFindings || !strings.Contains(stderr, "out/pingmsg.lily.go not written, and left as it was") {
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

// underFileSizeLimit runs lilygen with args in dir while no file may grow
// past 512 bytes, as on a full disk: in a process of its own (this test
// binary, started again), since the limit is the whole process's, and the
// test framework's own log would meet it too.
func underFileSizeLimit(t *testing.T, dir string, args ...string) (int, string, string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), limitedEnv+"=512")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errOut.String()
}

// limitedEnv, set to a size in bytes, makes this test binary run lilygen
// with its arguments under that file size limit, and exit, in place of the
// tests (underFileSizeLimit).
const limitedEnv = "LILYGEN_TEST_FILE_SIZE_LIMIT"

func init() {
	size, ok := os.LookupEnv(limitedEnv)
	if !ok {
		return
	}
	n, err := strconv.ParseUint(size, 10, 64)
	if err != nil {
		panic(limitedEnv + ": " + err.Error())
	}
	var limit syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &limit); err != nil {
		panic(err)
	}
	limit.Cur = n // Go ignores SIGXFSZ: a write past it fails with EFBIG
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &limit); err != nil {
		panic(err)
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// doc -o cut short leaves the page it would replace whole, and init cut
// short leaves no starter behind, which would make the next init refuse.
func TestDocAndInitFailedWriteLeaveNothingHalfWritten(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "ping.lily.yaml"), minimal)
	before := []byte("the page as it was\n")
	page := filepath.Join(dir, "page.md")
	writeFile(t, page, string(before))
	if code, _, stderr := underFileSizeLimit(t, dir, "doc", "-o", "page.md", "ping.lily.yaml"); code != exitUsage {
		t.Errorf("doc -o under a file size limit: exit %d\n%s", code, stderr)
	}
	if after, err := os.ReadFile(page); err != nil || !bytes.Equal(after, before) {
		t.Errorf("the page was changed (%v):\n%s", err, after)
	}
	if code, _, stderr := underFileSizeLimit(t, dir, "init", "orders.lily.yaml"); code != exitUsage {
		t.Errorf("init under a file size limit: exit %d\n%s", code, stderr)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("the directory holds %v, want the schema and the page alone", entries)
	}
	if code, _, stderr := lilygen(t, dir, "init", "orders.lily.yaml"); code != exitOK {
		t.Errorf("init after the failed one: exit %d\n%s", code, stderr)
	}
}

// An output directory reached through a symbolic link holds the files
// generate writes: they are not taken for leftovers at their real paths,
// deleted every second run and reported by check. A schema reached through
// one is no namesake of itself at its real path, whose output it would
// leave alone once changed.
func TestOutputThroughASymlink(t *testing.T) {
	dir := shopModule(t)
	if err := os.MkdirAll(filepath.Join(dir, "shared", "gen"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "svc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("..", "shared", "gen"), filepath.Join(dir, "svc", "gen")); err != nil {
		t.Fatal(err)
	}
	name := filepath.Join("svc", "ping.lily.yaml")
	writeFile(t, filepath.Join(dir, name), strings.Replace(minimal, "output: out", "output: gen", 1))
	for run := range 3 {
		if code, stdout, stderr := lilygen(t, dir, "generate", name); code != exitOK || stdout+stderr != "" {
			t.Fatalf("generate %d: exit %d\n%s%s", run+1, code, stdout, stderr)
		}
		if _, err := os.Stat(filepath.Join(dir, "shared", "gen", "pingmsg.lily.go")); err != nil {
			t.Fatalf("after generate %d: %v", run+1, err)
		}
		if code, stdout, stderr := lilygen(t, dir, "check", name); code != exitOK {
			t.Errorf("check after generate %d: exit %d\n%s%s", run+1, code, stdout, stderr)
		}
	}

	if err := os.Symlink("svc", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, name), strings.NewReplacer("output: out", "output: gen", "required: true}", "required: true, max_length: 9}").Replace(minimal))
	linked := filepath.Join("link", "ping.lily.yaml")
	if code, stdout, stderr := lilygen(t, dir, "generate", linked); code != exitOK || stdout+stderr != "" {
		t.Fatalf("generate %s: exit %d\n%s%s", linked, code, stdout, stderr)
	}
	if code, stdout, stderr := lilygen(t, dir, "check", linked); code != exitOK {
		t.Errorf("check %s: exit %d\n%s%s", linked, code, stdout, stderr)
	}
}

// A schema named again by another link to it in the same directory (its
// directory reached through a link, a hard link beside it) is read once,
// by its first name: it generates the same files. A link in another
// directory is a schema of its own there, generating its files beside it.
func TestSchemaNamedTwiceThroughLinks(t *testing.T) {
	dir := shopModule(t)
	writeFile(t, filepath.Join(dir, "ping.lily.yaml"), minimal)
	if err := os.Symlink(".", filepath.Join(dir, "here")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(dir, "ping.lily.yaml"), filepath.Join(dir, "hard.lily.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "other"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("..", "ping.lily.yaml"), filepath.Join(dir, "other", "ping.lily.yaml")); err != nil {
		t.Fatal(err)
	}
	names := []string{"ping.lily.yaml", filepath.Join("here", "ping.lily.yaml"), "hard.lily.yaml", filepath.Join("other", "ping.lily.yaml")}
	if code, stdout, stderr := lilygen(t, dir, append([]string{"generate"}, names...)...); code != exitOK || stdout+stderr != "" {
		t.Fatalf("generate: exit %d\n%s%s", code, stdout, stderr)
	}
	for _, out := range []string{"out/pingmsg.lily.go", "other/out/pingmsg.lily.go"} {
		data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(out)))
		if err != nil || !bytes.Contains(data, []byte("// Source: ping.lily.yaml\n")) {
			t.Errorf("%s: %v\n%.300s", out, err, data)
		}
	}
	if code, stdout, stderr := lilygen(t, dir, append([]string{"check"}, names...)...); code != exitOK {
		t.Errorf("check: exit %d\n%s%s", code, stdout, stderr)
	}
}

// An output file that is a symbolic link stays one: generate writes the
// file it names, a file not there yet (a dangling link) too, as a plain
// write would.
func TestOutputFileThroughASymlink(t *testing.T) {
	dir := shopModule(t)
	writeFile(t, filepath.Join(dir, "ping.lily.yaml"), minimal)
	if err := os.MkdirAll(filepath.Join(dir, "out"), 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "out", "pingmsg.lily.go")
	if err := os.Symlink(filepath.Join("..", "kept.go"), link); err != nil {
		t.Fatal(err)
	}
	if code, stdout, stderr := lilygen(t, dir, "generate", "ping.lily.yaml"); code != exitOK {
		t.Fatalf("generate: exit %d\n%s%s", code, stdout, stderr)
	}
	info, err := os.Lstat(link)
	data, rerr := os.ReadFile(filepath.Join(dir, "kept.go"))
	if err != nil || info.Mode()&os.ModeSymlink == 0 || rerr != nil || !bytes.HasPrefix(data, []byte("// Code generated by lilygen")) {
		t.Errorf("the link: %v, %v; its file: %.40q, %v", info, err, data, rerr)
	}
}

// A FIFO is never opened: one among the YAML files of the module (where
// generate looks for leftovers) would block generate and check for ever
// waiting for a writer; one at an output path is refused, not read.
func TestGenerateOpensNoFIFO(t *testing.T) {
	dir := shopModule(t)
	writeFile(t, filepath.Join(dir, "ping.lily.yaml"), minimal)
	if err := os.MkdirAll(filepath.Join(dir, "deploy"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "deploy", "values.yaml"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, command := range []string{"generate", "check"} {
		if r := lilygenWithin(t, dir, command, "ping.lily.yaml"); r.code != exitOK {
			t.Errorf("%s beside a FIFO: exit %d\n%s", command, r.code, r.stderr)
		}
	}

	target := filepath.Join(dir, "out", "pingmsg.lily.go")
	if err := os.Remove(target); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(target, 0o600); err != nil {
		t.Fatal(err)
	}
	for command, want := range map[string]string{
		"generate": "out/pingmsg.lily.go exists and is not a regular file, so ping.lily.yaml leaves it alone",
		"check":    "out/pingmsg.lily.go exists and is not a regular file, so ping.lily.yaml leaves it alone",
	} {
		if r := lilygenWithin(t, dir, command, "ping.lily.yaml"); r.code != exitFindings || !strings.Contains(r.stderr, want) {
			t.Errorf("%s with a FIFO at the output path: exit %d, want 1 and %q\n%s", command, r.code, want, r.stderr)
		}
	}
	if info, err := os.Lstat(target); err != nil || info.Mode().Type() != fs.ModeNamedPipe {
		t.Errorf("the FIFO at the output path was replaced (%v)", err)
	}
}

type result struct {
	code           int
	stdout, stderr string
}

// lilygenWithin runs lilygen as lilygen does, failing the test when it
// has not returned a minute later.
func lilygenWithin(t *testing.T, dir string, args ...string) result {
	t.Helper()
	t.Chdir(dir)
	done := make(chan result, 1)
	go func() {
		var out, errOut bytes.Buffer
		code := run(args, &out, &errOut)
		done <- result{code, out.String(), errOut.String()}
	}()
	select {
	case r := <-done:
		return r
	case <-time.After(time.Minute):
		t.Fatalf("lilygen %s still runs a minute later", strings.Join(args, " "))
		return result{}
	}
}

// A file at an output path that cannot be read is left alone: nothing says
// lilygen wrote it, and the new file, renamed over it, would replace it
// whatever its mode. (Tested by the error alone: the tests may run as
// root, whom no mode keeps out.)
func TestGenerateRefusesAnUnreadableOutput(t *testing.T) {
	tg := target{path: "out/pingmsg.lily.go", schema: "ping.lily.yaml"}
	unreadable := &fs.PathError{Op: "open", Path: tg.path, Err: syscall.EACCES}
	if got := tg.refusal(unreadable); !strings.Contains(got, "cannot be read") {
		t.Errorf("refusal of an unreadable file = %q", got)
	}
	for _, err := range []error{&fs.PathError{Op: "stat", Path: tg.path, Err: syscall.ENOENT}, &fs.PathError{Op: "stat", Path: tg.path, Err: syscall.ENOTDIR}} {
		if got := tg.refusal(err); got != "" {
			t.Errorf("refusal after %v = %q, want none: writing it says more", err, got)
		}
	}
}

// generate writes nothing outside the repository, where an include may not
// lead either: not through a directory link to outside, not through a link
// at an output path (a dangling one, whose file generate would create), not
// by a path of ..; nor into its .git directory. Outside a git work tree, as
// for includes, the Go module is the bound. A pull request could
// otherwise have a CI job that regenerates and diffs write anywhere the
// runner can. check refuses the same schemas, so that a file written there
// once does not pass for up to date.
func TestGenerateWritesNothingOutsideTheRepository(t *testing.T) {
	for _, c := range []struct {
		name, schema string
		link         [2]string // at, to; to relative to the test's directory when it starts with "/"
		written      string    // the file outside that must not be there
		want         string
		module       bool // a Go module, in no git work tree
	}{
		{
			name:    "asyncapi file through a directory link",
			schema:  minimal + "asyncapi: {file: link/x.yaml}\n",
			link:    [2]string{"link", "../outside"},
			written: "outside/x.yaml",
			want:    `ping.lily.yaml:14:18: asyncapi file "link/x.yaml" leads outside the repository: it is not written`,
		},
		{
			name:    "dangling link at the Go file's path",
			schema:  minimal,
			link:    [2]string{"out/pingmsg.lily.go", "/outside/evil.sh"},
			written: "outside/evil.sh",
			want:    `ping.lily.yaml:3:9: output "out" leads outside the repository: out/pingmsg.lily.go is not written`,
		},
		{
			name:    "output out of the repository by ..",
			schema:  strings.Replace(minimal, "output: out", "output: ../outside", 1),
			written: "outside/pingmsg.lily.go",
			want:    `ping.lily.yaml:3:9: output "../outside" leads outside the repository: ../outside/pingmsg.lily.go is not written`,
		},
		{
			name:    "output in .git",
			schema:  strings.Replace(minimal, "output: out", "output: .git/info", 1),
			written: "repo/.git/info/pingmsg.lily.go",
			want:    `ping.lily.yaml:3:9: output ".git/info" leads into a .git directory, git's own: .git/info/pingmsg.lily.go is not written`,
		},
		{
			name:    "dangling link at the Go file's path, in a module",
			schema:  minimal,
			link:    [2]string{"out/pingmsg.lily.go", "/outside/evil.sh"},
			written: "outside/evil.sh",
			want:    `ping.lily.yaml:3:9: output "out" leads outside the Go module, and no git work tree holds it: out/pingmsg.lily.go is not written`,
			module:  true,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			top := t.TempDir()
			repo := filepath.Join(top, "repo")
			for _, d := range []string{filepath.Join(repo, "out"), filepath.Join(top, "outside")} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if c.module {
				writeFile(t, filepath.Join(repo, "go.mod"), "module example.com/shop\n")
			} else if err := os.Mkdir(filepath.Join(repo, ".git"), 0o755); err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(repo, "ping.lily.yaml"), c.schema)
			if c.link[0] != "" {
				to := c.link[1]
				if strings.HasPrefix(to, "/") {
					to = filepath.Join(top, to)
				}
				if err := os.Symlink(to, filepath.Join(repo, c.link[0])); err != nil {
					t.Fatal(err)
				}
			}
			for _, command := range []string{"generate", "check"} {
				code, stdout, stderr := lilygen(t, repo, command, "ping.lily.yaml")
				if code != exitUsage || !strings.Contains(stderr, c.want+" (the file a write reaches through symbolic links is what counts, as for an include) [BAD-OUTPUT]") {
					t.Errorf("%s: exit %d, want 2 and %s\n%s%s", command, code, c.want, stdout, stderr)
				}
				if _, err := os.Lstat(filepath.Join(top, c.written)); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("after %s, %s is there (%v)", command, c.written, err)
				}
			}
		})
	}
}
