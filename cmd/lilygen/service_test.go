package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestServiceModule follows README.md's "Use Lily in your service" in a
// module outside the repository: each of its commands, with this checkout
// in place of ../lily, then its main.go and send/main.go, to a consumer and
// a sender that build and a go generate that regenerates. It needs the Go
// toolchain and the module proxy (or a module cache holding Lily's
// dependencies), so -short skips it.
func TestServiceModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module with the go command: not under -short")
	}
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	commands := block(t, readme, "commands")
	files := map[string]string{"main.go": block(t, readme, "main.go"), "send/main.go": block(t, readme, "send/main.go")}
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for line := range strings.Lines(commands) {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "# now write main.go") {
			for name, text := range files {
				path := filepath.Join(dir, filepath.FromSlash(name))
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		args := strings.Fields(strings.ReplaceAll(line, "=../lily", "="+repo))
		if args[0] != "go" {
			t.Fatalf("README command %q does not run go", line)
		}
		cmd := exec.Command("go", args[1:]...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", line, err, out)
		}
	}
	generated, err := os.ReadFile(filepath.Join(dir, "ordersmsg", "ordersmsg.lily.go"))
	if err != nil {
		t.Errorf("no generated code: %v", err)
	}
	// send/main.go reaches the consumer through the default exchange, so
	// its routing key must be the starter's queue name.
	key := regexp.MustCompile(`RoutingKey: ("[^"]*")`).FindStringSubmatch(files["send/main.go"])
	if key == nil {
		t.Error("send/main.go names no routing key")
	} else if !strings.Contains(string(generated), "Name: "+key[1]+",") {
		t.Errorf("send/main.go's routing key %s is not the name of the starter's queue", key[1])
	}
	mod, _ := os.ReadFile(filepath.Join(dir, "go.mod"))
	if !strings.Contains(string(mod), "tool github.com/lily-mq/lily/cmd/lilygen") {
		t.Errorf("go.mod names no tool:\n%s", mod)
	}
}

// init's advice and its starter's header name the commands README.md's
// set-up runs: there, lilygen is a Go tool, not a command on the PATH.
func TestInitAdvisesTheREADMEsCommands(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	commands, mainGo := block(t, readme, "commands"), block(t, readme, "main.go")
	documented := func(line string) bool {
		for l := range strings.Lines(commands + mainGo) {
			if strings.TrimSpace(l) == line {
				return true
			}
		}
		return false
	}
	dir := t.TempDir()
	code, _, stderr := lilygen(t, dir, "init", "orders.lily.yaml")
	if code != exitOK {
		t.Fatalf("init: exit %d\n%s", code, stderr)
	}
	_, advice, ok := strings.Cut(strings.TrimSpace(stderr), "then run ")
	if !ok || !documented(advice) {
		t.Errorf("init advises %q, not a command of README.md's set-up", advice)
	}
	starter, err := os.ReadFile(filepath.Join(dir, "orders.lily.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	header := 0
	for line := range strings.Lines(string(starter)) {
		cmd, ok := strings.CutPrefix(line, "#   ")
		if !ok {
			continue
		}
		header++
		if !documented(strings.ReplaceAll(strings.TrimSpace(cmd), "<this file>", "orders.lily.yaml")) {
			t.Errorf("the starter's header says %q, not a command of README.md's set-up", strings.TrimSpace(cmd))
		}
	}
	if header == 0 {
		t.Errorf("the starter's header names no command (lines of the form \"#   command\")")
	}
}

// block returns the fenced block README.md marks as
// <!-- service-module: name -->.
func block(t *testing.T, readme []byte, name string) string {
	t.Helper()
	re := regexp.MustCompile("(?s)<!-- service-module: " + regexp.QuoteMeta(name) + " -->\n```[a-z]*\n(.*?)```")
	m := re.FindSubmatch(readme)
	if m == nil {
		t.Fatalf("README.md has no block marked service-module: %s", name)
	}
	return string(m[1])
}
