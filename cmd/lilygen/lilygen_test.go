package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lily-mq/lily/schema/rules"
)

const minimal = `version: 1
package: pingmsg
output: out
messages:
  Ping:
    versions:
      1:
        fields:
          id: {type: string, required: true}
queues:
  pings:
    consumes:
      - message: Ping
`

// lilygen runs the command in dir and returns its exit code and output.
func lilygen(t *testing.T, dir string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	t.Chdir(dir)
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestGenerateThenCheck(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "ping.lily.yaml"), minimal)
	target := filepath.Join(dir, "out", "pingmsg.lily.go")

	if code, _, stderr := lilygen(t, dir, "check", "ping.lily.yaml"); code != exitFindings || !strings.Contains(stderr, "out/pingmsg.lily.go is missing") {
		t.Errorf("check before generate: exit %d, stderr %q", code, stderr)
	}
	if code, stdout, stderr := lilygen(t, dir, "ping.lily.yaml"); code != exitOK || stdout+stderr != "" {
		t.Fatalf("generate: exit %d\n%s%s", code, stdout, stderr)
	}

	// An unchanged schema leaves the file alone.
	old := time.Now().Add(-time.Hour).Truncate(time.Second)
	if err := os.Chtimes(target, old, old); err != nil {
		t.Fatal(err)
	}
	if code, _, _ := lilygen(t, dir, "generate", "ping.lily.yaml"); code != exitOK {
		t.Fatalf("second generate: exit %d", code)
	}
	if info, err := os.Stat(target); err != nil || !info.ModTime().Equal(old) {
		t.Errorf("unchanged output was rewritten (%v)", err)
	}
	if code, stdout, stderr := lilygen(t, dir, "check", "ping.lily.yaml"); code != exitOK || stdout+stderr != "" {
		t.Errorf("check of fresh output: exit %d\n%s%s", code, stdout, stderr)
	}

	// A hand edit is stale, and check shows it.
	content, _ := os.ReadFile(target)
	edited := strings.Replace(string(content), `{Name: "id", Required: true}`, `{Name: "id"}`, 1)
	writeFile(t, target, edited)
	code, stdout, stderr := lilygen(t, dir, "check", "ping.lily.yaml")
	if code != exitFindings || !strings.Contains(stderr, "out/pingmsg.lily.go is stale") {
		t.Errorf("check of stale output: exit %d, stderr %q", code, stderr)
	}
	for _, want := range []string{"--- out/pingmsg.lily.go (on disk)", `-	wire.JSONField{Name: "id"},`, `+	wire.JSONField{Name: "id", Required: true},`} {
		if !strings.Contains(stdout, want) {
			t.Errorf("diff lacks %q:\n%s", want, stdout)
		}
	}
}

// check names a missing file without a diff, which would be the whole file
// against nothing, and its help says so rather than promise a diff for it.
func TestCheckMissingFile(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "ping.lily.yaml"), minimal)
	code, stdout, stderr := lilygen(t, dir, "check", "ping.lily.yaml")
	if want := "lilygen: out/pingmsg.lily.go is missing: run lilygen generate ping.lily.yaml\n"; code != exitFindings || stdout != "" || stderr != want {
		t.Errorf("check: exit %d, stdout %q, stderr %q; want 1, no diff, %q", code, stdout, stderr, want)
	}
	_, help, _ := lilygen(t, dir, "check", "-h")
	if flat := strings.Join(strings.Fields(help), " "); strings.Contains(flat, "missing or left-over file") || !strings.Contains(flat, "a missing file it names without a diff") {
		t.Errorf("check -h does not say that a missing file is named without a diff:\n%s", help)
	}
}

func TestUsage(t *testing.T) {
	dir := t.TempDir()
	for _, c := range commands {
		code, stdout, _ := lilygen(t, dir, c.name, "-h")
		if code != exitOK || !strings.Contains(stdout, "Usage: lilygen "+c.name) || !strings.Contains(stdout, "Exit codes") {
			t.Errorf("lilygen %s -h: exit %d\n%s", c.name, code, stdout)
		}
	}
	if code, stdout, _ := lilygen(t, dir, "help", "lint"); code != exitOK || !strings.Contains(stdout, "Usage: lilygen lint") {
		t.Errorf("lilygen help lint: exit %d\n%s", code, stdout)
	}
	if code, stdout, _ := lilygen(t, dir, "-h"); code != exitOK || !strings.Contains(stdout, "breaking") || !strings.Contains(stdout, "Exit codes") {
		t.Errorf("lilygen -h: exit %d\n%s", code, stdout)
	}
	// Bare lilygen is someone finding out what it does: the same text, but
	// as a usage error, so a script that forgot its files still fails.
	if code, stdout, stderr := lilygen(t, dir); code != exitUsage || stdout != "" || stderr != mainUsage() {
		t.Errorf("lilygen: exit %d, stdout %q, stderr %q; want exit %d and lilygen -h's text on stderr", code, stdout, stderr, exitUsage)
	}
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"generate"}, exitUsage, "lilygen generate: name at least one schema file"},
		{[]string{"frobnicate"}, exitUsage, `unknown command "frobnicate"`},
		{[]string{"generate", "-x", "a.yaml"}, exitUsage, "flag provided but not defined"},
		{[]string{"missing.lily.yaml"}, exitUsage, "missing.lily.yaml"},
		{[]string{"breaking", "--against", "main", "--allow", "FIELD-REMOVD@Ping.v1.id", "a.yaml"}, exitUsage,
			`--allow FIELD-REMOVD@Ping.v1.id: unknown rule "FIELD-REMOVD" (did you mean "FIELD-REMOVED"?)`},
		{[]string{"breaking", "--against", "main", "--allow", "LINT-QUEUE-NAME", "a.yaml"}, exitUsage,
			"--allow LINT-QUEUE-NAME: LINT-QUEUE-NAME is a lint rule: acknowledge accepts breaking changes only (lilygen breaking -h lists the rules)"},
	} {
		code, _, stderr := lilygen(t, dir, tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.stderr) {
			t.Errorf("lilygen %q: exit %d, stderr %q; want exit %d and %q", tc.args, code, stderr, tc.code, tc.stderr)
		}
	}
}

// TestRulesListed requires breaking -h to list every breaking-change rule and
// lint -h every lint rule, each with its category and meaning, in columns
// that line up.
func TestRulesListed(t *testing.T) {
	dir := t.TempDir()
	_, breaking, _ := lilygen(t, dir, "breaking", "-h")
	_, lint, _ := lilygen(t, dir, "lint", "-h")
	columns := map[string]map[int][]string{}
	for _, r := range rules.All {
		command, help, other := "breaking", breaking, lint
		if r.Category == rules.Lint {
			command, help, other = "lint", lint, breaking
		}
		id := `(?m)^  ` + regexp.QuoteMeta(r.ID) + ` `
		line := regexp.MustCompile(id + `+` + string(r.Category) + ` +` + regexp.QuoteMeta(r.Meaning) + `$`)
		found := line.FindString(help)
		if found == "" || regexp.MustCompile(id).MatchString(other) {
			t.Errorf("%s is not listed in its command's -h alone", r.ID)
			continue
		}
		if columns[command] == nil {
			columns[command] = map[int][]string{}
		}
		at := strings.Index(found[len("  ")+len(r.ID):], string(r.Category)) + len("  ") + len(r.ID)
		columns[command][at] = append(columns[command][at], r.ID)
	}
	for command, at := range columns {
		if len(at) != 1 {
			t.Errorf("%s -h lists categories at columns %v", command, at)
		}
	}
}

// TestCategoriesListed requires breaking -h to list every category of
// breaking change with what it breaks.
func TestCategoriesListed(t *testing.T) {
	_, help, _ := lilygen(t, t.TempDir(), "breaking", "-h")
	for _, c := range rules.Categories {
		if c != rules.Lint && !regexp.MustCompile(`(?m)^  `+string(c)+` +`+regexp.QuoteMeta(c.Describe())+`$`).MatchString(help) {
			t.Errorf("breaking -h does not list %s with what it breaks:\n%s", c, help)
		}
	}
}

func TestTwoSchemasOneOutput(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"a.lily.yaml", "b.lily.yaml"} {
		writeFile(t, filepath.Join(dir, name), minimal)
	}
	code, _, stderr := lilygen(t, dir, "a.lily.yaml", "b.lily.yaml")
	if code != exitUsage || !strings.Contains(stderr, "a.lily.yaml and b.lily.yaml both generate") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
}

// Two schemas of different packages that generate into one directory
// would make it a Go package that does not build: check and generate
// refuse them, and write nothing.
func TestTwoPackagesOneOutputDirectory(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.lily.yaml"), minimal)
	writeFile(t, filepath.Join(dir, "b.lily.yaml"), strings.Replace(minimal, "package: pingmsg", "package: othermsg", 1))
	want := "lilygen: a.lily.yaml (package pingmsg) and b.lily.yaml (package othermsg) both generate into out, one Go package: give them one package, or each its own output\n"
	for _, cmd := range []string{"generate", "check"} {
		code, stdout, stderr := lilygen(t, dir, cmd, "a.lily.yaml", "b.lily.yaml")
		if code != exitUsage || !strings.Contains(stderr, want) {
			t.Errorf("%s: exit %d, want 2 and %s\n%s%s", cmd, code, want, stdout, stderr)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("generate wrote %d files, want none", len(entries)-2)
	}
}

// A schema named twice, by the same path or another spelling of it, is
// read once, as go vet vets a package named twice once: it is no second
// schema generating the same files, and its findings print once.
func TestSchemaNamedTwice(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "ping.lily.yaml"), minimal)
	names := []string{"ping.lily.yaml", "./ping.lily.yaml", filepath.Join(dir, "ping.lily.yaml"), "out/../ping.lily.yaml"}

	code, _, stderr := lilygen(t, dir, append([]string{"check"}, names...)...)
	if code != exitFindings || strings.Count(stderr, "is missing") != 1 || strings.Contains(stderr, "both generate") {
		t.Errorf("check before generate: exit %d, stderr %q", code, stderr)
	}
	if code, stdout, stderr := lilygen(t, dir, append([]string{"generate"}, names...)...); code != exitOK || stdout+stderr != "" {
		t.Fatalf("generate: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, stdout, stderr := lilygen(t, dir, append([]string{"check"}, names...)...); code != exitOK {
		t.Errorf("check: exit %d\n%s%s", code, stdout, stderr)
	}
	code, stdout, _ := lilygen(t, dir, append([]string{"lint"}, names...)...)
	if code != exitFindings || strings.Count(stdout, "[LINT-STRING-UNBOUNDED]") != 1 || !strings.HasPrefix(strings.Split(stdout, "\n")[1], "ping.lily.yaml:") {
		t.Errorf("lint: exit %d, want one finding, named by the first name\n%s", code, stdout)
	}

	// A schema that cannot be read is named once too.
	code, _, stderr = lilygen(t, dir, "check", "gone.lily.yaml", "./gone.lily.yaml")
	if code != exitUsage || strings.Count(stderr, "gone.lily.yaml") != 1 {
		t.Errorf("check of a missing schema named twice: exit %d, stderr %q", code, stderr)
	}
}

// The example's generated code is committed; it must match its schema.
func TestExampleIsFresh(t *testing.T) {
	code, stdout, stderr := lilygen(t, filepath.Join("..", "..", "examples", "orders"), "check", "orders.lily.yaml")
	if code != exitOK {
		t.Errorf("examples/orders is stale: run go generate ./examples/orders\n%s%s", stdout, stderr)
	}
}

func TestUnifiedDiff(t *testing.T) {
	old := "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\nk\n"
	new := "a\nB\nc\nd\ne\nf\ng\nh\ni\nj\nk\nl\n"
	var out bytes.Buffer
	unifiedDiff(&out, "x.go", []byte(old), []byte(new))
	want := `--- x.go (on disk)
+++ x.go (generated)
@@ -1,5 +1,5 @@
 a
-b
+B
 c
 d
 e
@@ -9,3 +9,4 @@
 i
 j
 k
+l
`
	if out.String() != want {
		t.Errorf("diff:\n%s\nwant:\n%s", &out, want)
	}
}

// A file that differs only by its final newline shows the difference, as
// diff -u does, rather than a diff of headers alone; a last line without a
// newline is no other line with one.
func TestUnifiedDiffMissingFinalNewline(t *testing.T) {
	for _, c := range []struct{ old, new, want string }{
		{"a\nb\nc", "a\nb\nc\n", "@@ -1,3 +1,3 @@\n a\n b\n-c\n\\ No newline at end of file\n+c\n"},
		{"a\nb\n", "a\nb", "@@ -1,2 +1,2 @@\n a\n-b\n+b\n\\ No newline at end of file\n"},
		{"a\nx", "a\ny", "@@ -1,2 +1,2 @@\n a\n-x\n\\ No newline at end of file\n+y\n\\ No newline at end of file\n"},
		{"a\nb", "a\nc\nb", "@@ -1,2 +1,3 @@\n a\n+c\n b\n\\ No newline at end of file\n"},
	} {
		var out bytes.Buffer
		unifiedDiff(&out, "x.go", []byte(c.old), []byte(c.new))
		if want := "--- x.go (on disk)\n+++ x.go (generated)\n" + c.want; out.String() != want {
			t.Errorf("%q to %q:\n%s\nwant:\n%s", c.old, c.new, &out, want)
		}
	}

	dir := t.TempDir()
	path, content := generatePing(t, dir)
	writeFile(t, path, strings.TrimSuffix(string(content), "\n"))
	code, stdout, stderr := lilygen(t, dir, "check", "ping.lily.yaml")
	if code != exitFindings || !strings.Contains(stdout, "\n\\ No newline at end of file\n+") {
		t.Errorf("check of a file cut by its final newline: exit %d\n%s%s", code, stdout, stderr)
	}
}

// A file on disk may hold anything: check's diff escapes an escape sequence
// or a carriage return in its lines, so that they cannot forge the
// terminal's output, nor a workflow command the CI log's, and keeps the
// tabs of Go code.
func TestCheckDiffEscapesTheFile(t *testing.T) {
	dir := t.TempDir()
	path, content := generatePing(t, dir)
	forged := string(content) + "\t// \x1b[2J\rok\n  ::error::x\n// ##[add-mask]y\n"
	writeFile(t, path, forged)
	code, stdout, stderr := lilygen(t, dir, "check", "ping.lily.yaml")
	for _, want := range []string{"-\t// \\x1b[2J\\rok\n", "-  \\::error::x\n", "-// ##\\[add-mask]y\n"} {
		if code != exitFindings || !strings.Contains(stdout, want) || strings.ContainsAny(stdout, "\x1b\r") || strings.Contains(stdout, "##[") {
			t.Errorf("check: exit %d, want 1 and the line %q\n%q%s", code, want, stdout, stderr)
		}
	}
}

func TestUnifiedDiffIsBounded(t *testing.T) {
	var old, new strings.Builder
	for i := range 1000 {
		old.WriteString("old line\n")
		new.WriteString("new line " + string(rune('a'+i%26)) + "\n")
	}
	var out bytes.Buffer
	unifiedDiff(&out, "x.go", []byte(old.String()), []byte(new.String()))
	if lines := strings.Count(out.String(), "\n"); lines > diffLines+5 {
		t.Errorf("diff is %d lines long", lines)
	}
	if !strings.Contains(out.String(), "diff cut at") {
		t.Error("a cut diff says so")
	}
}

// A schema whose output moves leaves its old file behind: check reports it,
// generate deletes it, and neither touches a file lilygen did not generate
// from that schema.
func TestLeftovers(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "ping.lily.yaml"), minimal)
	if code, _, stderr := lilygen(t, dir, "generate", "ping.lily.yaml"); code != exitOK {
		t.Fatalf("generate: exit %d\n%s", code, stderr)
	}
	mine := filepath.Join("out", "pingmsg.lily.go")
	user := filepath.Join("out", "user.lily.go")
	writeFile(t, filepath.Join(dir, user), "// Code written by hand.\npackage pingmsg\n")
	other := filepath.Join("nested", "gen", "pingmsg.lily.go")
	writeFile(t, filepath.Join(dir, other), header+"\n// Source: ping.lily.yaml\n\npackage pingmsg\n")
	// Another schema of the same name, nearer to nested/gen, owns what it
	// generated there before, though it no longer generates it.
	writeFile(t, filepath.Join(dir, "nested", "ping.lily.yaml"), strings.Replace(minimal, "output: out", "output: now", 1))

	writeFile(t, filepath.Join(dir, "ping.lily.yaml"), strings.Replace(minimal, "output: out", "output: moved", 1))
	code, stdout, stderr := lilygen(t, dir, "check", "ping.lily.yaml")
	if code != exitFindings || !strings.Contains(stderr, mine+" was generated from ping.lily.yaml, which no longer generates it") ||
		!strings.Contains(stdout, "--- "+mine+" (on disk)") || strings.Contains(stderr, user) || strings.Contains(stderr, other) {
		t.Errorf("check: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, _, stderr := lilygen(t, dir, "generate", "ping.lily.yaml"); code != exitOK {
		t.Fatalf("generate: exit %d\n%s", code, stderr)
	}
	for path, want := range map[string]bool{mine: false, user: true, other: true, filepath.Join("moved", "pingmsg.lily.go"): true} {
		if _, err := os.Stat(filepath.Join(dir, path)); (err == nil) != want {
			t.Errorf("%s exists: %v, want %v", path, err == nil, want)
		}
	}
	if code, stdout, stderr := lilygen(t, dir, "check", "ping.lily.yaml"); code != exitOK {
		t.Errorf("check after generate: exit %d\n%s%s", code, stdout, stderr)
	}
}

// A schema of the same file name below this one may write its output
// anywhere in its module, outside its own directory too: what it generates
// now is its, not a leftover of this one, which names the same source.
func TestLeftoversSpareANamesakesOutput(t *testing.T) {
	dir := shopModule(t)
	writeFile(t, filepath.Join(dir, "ping.lily.yaml"), minimal)
	writeFile(t, filepath.Join(dir, "sub", "ping.lily.yaml"), strings.NewReplacer("output: out", "output: ../gen", "package: pingmsg", "package: subping").Replace(minimal))
	for _, name := range []string{filepath.Join("sub", "ping.lily.yaml"), "ping.lily.yaml"} {
		if code, _, stderr := lilygen(t, dir, "generate", name); code != exitOK {
			t.Fatalf("generate %s: exit %d\n%s", name, code, stderr)
		}
	}
	theirs := filepath.Join(dir, "gen", "subping.lily.go")
	if _, err := os.Stat(theirs); err != nil {
		t.Errorf("generating ping.lily.yaml removed what sub/ping.lily.yaml generates: %v", err)
	}
	if code, stdout, stderr := lilygen(t, dir, "check", "ping.lily.yaml", filepath.Join("sub", "ping.lily.yaml")); code != exitOK {
		t.Errorf("check: exit %d\n%s%s", code, stdout, stderr)
	}
}

// A schema of the same file name beside this one's directory, elsewhere in
// the module, may write its output below this one: what it generates now is
// its, not a leftover of this one, which names the same source.
func TestLeftoversSpareANamesakeElsewhereInTheModule(t *testing.T) {
	dir := shopModule(t)
	writeFile(t, filepath.Join(dir, "a", "ping.lily.yaml"), strings.NewReplacer("output: out", "output: ../b/gen/a", "package: pingmsg", "package: pinga").Replace(minimal))
	writeFile(t, filepath.Join(dir, "b", "ping.lily.yaml"), strings.Replace(minimal, "output: out", "output: gen", 1))
	a, b := filepath.Join("a", "ping.lily.yaml"), filepath.Join("b", "ping.lily.yaml")
	for _, name := range []string{a, b} {
		if code, _, stderr := lilygen(t, dir, "generate", name); code != exitOK {
			t.Fatalf("generate %s: exit %d\n%s", name, code, stderr)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "b", "gen", "a", "pinga.lily.go")); err != nil {
		t.Errorf("generating b's schema removed what a's generates: %v", err)
	}
	if code, stdout, stderr := lilygen(t, dir, "check", a, b); code != exitOK {
		t.Errorf("check: exit %d\n%s%s", code, stdout, stderr)
	}
	// Half edited, a's schema says nothing of what it generates: nothing
	// is deleted until it can be read.
	writeFile(t, filepath.Join(dir, a), "version: 1\npackage: [\n")
	if code, _, stderr := lilygen(t, dir, "generate", b); code != exitOK {
		t.Fatalf("generate %s: exit %d\n%s", b, code, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "b", "gen", "a", "pinga.lily.go")); err != nil {
		t.Errorf("generating b's schema removed what a's generated while a's could not be read: %v", err)
	}
}

// In a module, a schema's output may lie outside its directory: when its
// package or output changes, check names the file it generated there before,
// and generate deletes it, leaving alone a file lilygen did not generate and
// one another schema generated.
func TestLeftoversOutsideTheSchemasDirectory(t *testing.T) {
	dir := shopModule(t)
	name := filepath.Join("schemas", "ping.lily.yaml")
	user := filepath.Join("gen", "user.go")
	writeFile(t, filepath.Join(dir, user), "// Code written by hand.\npackage alpha\n")
	other := filepath.Join("gen", "other.lily.go")
	writeFile(t, filepath.Join(dir, other), header+"\n// Source: other.lily.yaml\n\npackage alpha\n")
	for _, c := range []struct{ output, pkg, left string }{
		{"../gen", "alpha", ""},
		{"../gen", "beta", filepath.Join("gen", "alpha.lily.go")},
		{"../gen/a", "beta", filepath.Join("gen", "beta.lily.go")},
		{"../gen/b", "beta", filepath.Join("gen", "a", "beta.lily.go")},
	} {
		writeFile(t, filepath.Join(dir, name), strings.NewReplacer("output: out", "output: "+c.output, "package: pingmsg", "package: "+c.pkg).Replace(minimal))
		if c.left != "" {
			code, _, stderr := lilygen(t, dir, "check", name)
			if code != exitFindings || !strings.Contains(stderr, c.left+" was generated from "+name+", which no longer generates it") {
				t.Errorf("check with output %s, package %s: exit %d\n%s", c.output, c.pkg, code, stderr)
			}
		}
		if code, _, stderr := lilygen(t, dir, "generate", name); code != exitOK {
			t.Fatalf("generate with output %s, package %s: exit %d\n%s", c.output, c.pkg, code, stderr)
		}
		if _, err := os.Stat(filepath.Join(dir, c.left)); c.left != "" && err == nil {
			t.Errorf("generate with output %s, package %s left %s", c.output, c.pkg, c.left)
		}
		if code, stdout, stderr := lilygen(t, dir, "check", name); code != exitOK {
			t.Errorf("check after generate: exit %d\n%s%s", code, stdout, stderr)
		}
	}
	for _, path := range []string{user, other} {
		if _, err := os.Stat(filepath.Join(dir, path)); err != nil {
			t.Errorf("generate removed %s: %v", path, err)
		}
	}
}

// A generated package copied from another module names a schema of this
// one's file name as its source: generate deletes only the file this schema
// wrote, and says so, and names the copy, whose header (written before
// lilygen recorded the schema's path) proves nothing.
func TestLeftoversOnlyThoseTheSchemaWrote(t *testing.T) {
	dir := shopModule(t)
	writeFile(t, filepath.Join(dir, "messages.lily.yaml"), minimal)
	if code, _, stderr := lilygen(t, dir, "generate", "messages.lily.yaml"); code != exitOK {
		t.Fatalf("generate: exit %d\n%s", code, stderr)
	}
	copied := filepath.Join("internal", "paymentsmsg", "paymentsmsg.lily.go")
	writeFile(t, filepath.Join(dir, copied), header+"\n// lilygen v1.0.0\n// Source: messages.lily.yaml\n\npackage paymentsmsg\n")
	mine := filepath.Join("out", "pingmsg.lily.go")
	writeFile(t, filepath.Join(dir, "messages.lily.yaml"), strings.Replace(minimal, "output: out", "output: moved", 1))
	named := copied + " names messages.lily.yaml as its source but not its path"
	code, _, stderr := lilygen(t, dir, "check", "messages.lily.yaml")
	if code != exitFindings || !strings.Contains(stderr, mine+" was generated from messages.lily.yaml, which no longer generates it") || !strings.Contains(stderr, named) {
		t.Errorf("check: exit %d\n%s", code, stderr)
	}
	code, _, stderr = lilygen(t, dir, "generate", "messages.lily.yaml")
	if code != exitOK || !strings.Contains(stderr, "lilygen: deleted "+mine+", which messages.lily.yaml generated before") || !strings.Contains(stderr, "warning: "+named) {
		t.Errorf("generate: exit %d\n%s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, copied)); err != nil {
		t.Errorf("generate deleted the copied package: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, mine)); err == nil {
		t.Errorf("generate left %s", mine)
	}
}

// A schema renamed, whose output changed too, leaves its old file to no
// schema: check names it as an orphan, and generate names it and leaves
// it alone, since no schema can prove it wrote it.
func TestOrphanOfARenamedSchema(t *testing.T) {
	dir := shopModule(t)
	writeFile(t, filepath.Join(dir, "o2.lily.yaml"), strings.Replace(minimal, "output: out", "output: gen2", 1))
	if code, _, stderr := lilygen(t, dir, "generate", "o2.lily.yaml"); code != exitOK {
		t.Fatalf("generate: exit %d\n%s", code, stderr)
	}
	if err := os.Remove(filepath.Join(dir, "o2.lily.yaml")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "o3.lily.yaml"), strings.Replace(minimal, "output: out", "output: gen3", 1))
	orphan := filepath.Join("gen2", "pingmsg.lily.go")
	want := orphan + " was generated from o2.lily.yaml, which no longer exists"
	if code, _, stderr := lilygen(t, dir, "generate", "o3.lily.yaml"); code != exitOK || !strings.Contains(stderr, "warning: "+want) {
		t.Errorf("generate: exit %d\n%s", code, stderr)
	}
	if code, stdout, stderr := lilygen(t, dir, "check", "o3.lily.yaml"); code != exitFindings || !strings.Contains(stderr, want) || !strings.Contains(stdout, "--- "+orphan+" (on disk)") {
		t.Errorf("check: exit %d\n%s%s", code, stdout, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, orphan)); err != nil {
		t.Errorf("generate deleted the orphan: %v", err)
	}
}

// A schema named that cannot be read (here, not there at all) fails the
// run, and the others are still checked; the files that record it are its
// own, not orphans of the schemas that were read.
func TestCheckLeavesTheFilesOfAnUnreadSchema(t *testing.T) {
	dir := shopModule(t)
	writeFile(t, filepath.Join(dir, "o2.lily.yaml"), strings.Replace(minimal, "output: out", "output: gen2", 1))
	if code, _, stderr := lilygen(t, dir, "generate", "o2.lily.yaml"); code != exitOK {
		t.Fatalf("generate: exit %d\n%s", code, stderr)
	}
	if err := os.Rename(filepath.Join(dir, "o2.lily.yaml"), filepath.Join(dir, "o2.lily.yml")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "o3.lily.yaml"), strings.Replace(minimal, "output: out", "output: gen3", 1))
	code, stdout, stderr := lilygen(t, dir, "check", "o3.lily.yaml", "o2.lily.yaml")
	if missing := filepath.Join("gen3", "pingmsg.lily.go") + " is missing"; code != exitUsage || !strings.Contains(stderr, "o2.lily.yaml: ") || !strings.Contains(stderr, missing) {
		t.Errorf("check: exit %d, want 2 with o2.lily.yaml's error and %s\n%s%s", code, missing, stdout, stderr)
	}
	if orphan := filepath.Join("gen2", "pingmsg.lily.go"); strings.Contains(stdout+stderr, orphan) {
		t.Errorf("check names %s, which records the schema it could not read\n%s%s", orphan, stdout, stderr)
	}
}

// A schema of the same name that cannot be read says nothing of what it
// generates: a file that names the schema's file name as its source, but
// not its path, is still named, with the schema that could not be read.
func TestLeftoversNamedWhileANamesakeCannotBeRead(t *testing.T) {
	dir := shopModule(t)
	writeFile(t, filepath.Join(dir, "ping.lily.yaml"), strings.Replace(minimal, "output: out", "output: gen", 1))
	broken := filepath.Join("testdata", "ping.lily.yaml")
	writeFile(t, filepath.Join(dir, broken), "version: 1\npackage: [\n")
	left := filepath.Join("ordersmsg", "pingmsg.lily.go")
	writeFile(t, filepath.Join(dir, left), header+"\n// lilygen v1.0.0\n// Source: ping.lily.yaml\n\npackage pingmsg\n")
	want := left + " names ping.lily.yaml as its source but not its path"
	for _, args := range [][]string{{"check", "ping.lily.yaml"}, {"generate", "ping.lily.yaml"}} {
		code, _, stderr := lilygen(t, dir, args...)
		if code != map[string]int{"check": exitFindings, "generate": exitOK}[args[0]] || !strings.Contains(stderr, want) || !strings.Contains(stderr, "("+broken+" could not be read") {
			t.Errorf("%s: exit %d\n%s", strings.Join(args, " "), code, stderr)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, left)); err != nil {
		t.Errorf("%s: %v", left, err)
	}
}

// Half edited, a schema of the same name below this one says nothing of what
// it generates, which may lie anywhere: nothing is deleted until it can be
// read, and check names nothing as left over.
func TestLeftoversKeptWhileANamesakeBelowCannotBeRead(t *testing.T) {
	dir := shopModule(t)
	outer, nested := filepath.Join("svc", "ping.lily.yaml"), filepath.Join("svc", "a", "ping.lily.yaml")
	writeFile(t, filepath.Join(dir, outer), strings.Replace(minimal, "output: out", "output: gen", 1))
	writeFile(t, filepath.Join(dir, nested), strings.NewReplacer("output: out", "output: ../b/gen", "package: pingmsg", "package: bee").Replace(minimal))
	if code, _, stderr := lilygen(t, dir, "generate", outer, nested); code != exitOK {
		t.Fatalf("generate: exit %d\n%s", code, stderr)
	}
	theirs := filepath.Join(dir, "svc", "b", "gen", "bee.lily.go")
	writeFile(t, filepath.Join(dir, nested), strings.NewReplacer("output: out", "output: ../b/gen", "package: pingmsg", "package: bee", "type: string", "type: strin").Replace(minimal))
	if code, stdout, stderr := lilygen(t, dir, "check", outer); code != exitOK {
		t.Errorf("check: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, _, stderr := lilygen(t, dir, "generate", outer); code != exitOK {
		t.Fatalf("generate %s: exit %d\n%s", outer, code, stderr)
	}
	if _, err := os.Stat(theirs); err != nil {
		t.Errorf("generating %s removed what %s generated while it could not be read: %v", outer, nested, err)
	}
}

// A file names its source under lilygen's header and version line, or,
// generated before lilygen wrote that line, right under the header; the
// schema's path follows, in a file generated since lilygen records it.
func TestGeneratedBy(t *testing.T) {
	dir := t.TempDir()
	for content, want := range map[string]provenance{
		header + "\n// lilygen v1.2.3\n// Source: a.lily.yaml\n// Schema: ../a.lily.yaml\n\npackage a\n": {"a.lily.yaml", "../a.lily.yaml"},
		"# " + header[3:] + "\n# lilygen v1.2.3\n# Source: e.lily.yaml\n# Schema: \"\\\"e.lily.yaml\"\n": {"e.lily.yaml", `"e.lily.yaml`},
		header + "\n// lilygen v1.2.3\n// Source: a.lily.yaml\n\npackage a\n":                            {"a.lily.yaml", ""},
		header + "\n// Source: b.lily.yaml\n\npackage b\n":                                               {"b.lily.yaml", ""},
		header + "\n// lilygen (devel)\n\npackage c\n":                                                   {},
		"// Code written by hand.\n// Source: d.lily.yaml\npackage d\n":                                  {},
	} {
		path := filepath.Join(dir, "x.lily.go")
		writeFile(t, path, content)
		if got, ok := generatedBy(path); got != want || ok != (want.source != "") {
			t.Errorf("generatedBy of %q = %+v, %v; want %+v", content, got, ok, want)
		}
	}
}

// generate never overwrites a file at its output path that lilygen did not
// generate, or that another schema beside it generated; the file of a schema
// since renamed is replaced.
func TestGenerateLeavesAFileItDidNotWrite(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "ping.lily.yaml"), minimal)
	writeFile(t, filepath.Join(dir, "other.lily.yaml"), "another schema\n")
	target := filepath.Join(dir, "out", "pingmsg.lily.go")
	for own, why := range map[string]string{
		"package pingmsg\n\n// Written by hand.\nfunc Keep() {}\n":   "was not generated by lilygen",
		header + "\n// Source: other.lily.yaml\n\npackage pingmsg\n": "was generated from other.lily.yaml",
	} {
		writeFile(t, target, own)
		code, _, stderr := lilygen(t, dir, "generate", "ping.lily.yaml")
		if code != exitFindings || !strings.Contains(stderr, "out/pingmsg.lily.go exists and "+why) {
			t.Errorf("generate over %q: exit %d, stderr %q", own, code, stderr)
		}
		if got, _ := os.ReadFile(target); string(got) != own {
			t.Errorf("the file was changed:\n%s", got)
		}
	}
	writeFile(t, target, header+"\n// Source: renamed.lily.yaml\n\npackage pingmsg\n")
	if code, _, stderr := lilygen(t, dir, "generate", "ping.lily.yaml"); code != exitOK {
		t.Errorf("generate over the file of a renamed schema: exit %d, stderr %q", code, stderr)
	}
	if p, _ := generatedBy(target); p.source != "ping.lily.yaml" {
		t.Error("the renamed schema's file was not replaced")
	}
}

// A schema whose file name lilygen quotes under its header (it holds a tab)
// owns its output as any other: a schema beside it that writes the same
// file leaves it alone and says whose it is.
func TestGenerateLeavesAFileOfAQuotedSibling(t *testing.T) {
	dir := t.TempDir()
	quoted := "tab\there.lily.yaml"
	writeFile(t, filepath.Join(dir, quoted), minimal)
	writeFile(t, filepath.Join(dir, "ping.lily.yaml"), minimal)
	if code, _, stderr := lilygen(t, dir, "generate", quoted); code != exitOK {
		t.Fatalf("generate %q: exit %d\n%s", quoted, code, stderr)
	}
	target := filepath.Join(dir, "out", "pingmsg.lily.go")
	before, err := os.ReadFile(target)
	if err != nil {
		t.Fatal(err)
	}
	code, _, stderr := lilygen(t, dir, "generate", "ping.lily.yaml")
	if code != exitFindings || !strings.Contains(stderr, `out/pingmsg.lily.go exists and was generated from "tab\there.lily.yaml"`) {
		t.Errorf("generate ping.lily.yaml: exit %d, stderr %q", code, stderr)
	}
	if after, _ := os.ReadFile(target); !bytes.Equal(after, before) {
		t.Errorf("out/pingmsg.lily.go was overwritten:\n%s", after)
	}
	if p, _ := generatedBy(target); p.source != quoted {
		t.Errorf("out/pingmsg.lily.go names %q as its source, want %q", p.source, quoted)
	}
}

// Two schemas in different directories of a module that write one file:
// the second generate leaves the first's file alone and says who owns it,
// rather than overwrite it, and it back again at the next run.
func TestGenerateLeavesAFileAnotherSchemaGeneratesElsewhere(t *testing.T) {
	dir := shopModule(t)
	writeFile(t, filepath.Join(dir, "a.lily.yaml"), strings.Replace(minimal, "output: out", "output: gen", 1))
	writeFile(t, filepath.Join(dir, "sub", "b.lily.yaml"), strings.Replace(minimal, "output: out", "output: ../gen", 1))
	if code, _, stderr := lilygen(t, dir, "generate", "a.lily.yaml"); code != exitOK {
		t.Fatalf("generate a: exit %d\n%s", code, stderr)
	}
	b := filepath.Join("sub", "b.lily.yaml")
	code, _, stderr := lilygen(t, dir, "generate", b)
	if code != exitFindings || !strings.Contains(stderr, "is generated by "+filepath.Join(dir, "a.lily.yaml")) {
		t.Errorf("generate b: exit %d\n%s", code, stderr)
	}
	if p, _ := generatedBy(filepath.Join(dir, "gen", "pingmsg.lily.go")); p.source != "a.lily.yaml" {
		t.Errorf("gen/pingmsg.lily.go names %q as its source, want a.lily.yaml", p.source)
	}
}

// A file generate cannot write (its directory's path runs through a regular
// file) keeps the leftovers it would replace: the old output still builds.
func TestGenerateKeepsLeftoversWhenAWriteFails(t *testing.T) {
	dir := t.TempDir()
	old, before := generatePing(t, dir)
	writeFile(t, filepath.Join(dir, "blocker"), "a regular file\n")
	writeFile(t, filepath.Join(dir, "ping.lily.yaml"), strings.Replace(minimal, "output: out", "output: blocker/gen", 1))
	code, _, stderr := lilygen(t, dir, "generate", "ping.lily.yaml")
	if code != exitFindings || !strings.Contains(stderr, "not a directory") || !strings.Contains(stderr, "out/pingmsg.lily.go is left over, and kept until every file is written") {
		t.Errorf("generate: exit %d\n%s", code, stderr)
	}
	if after, err := os.ReadFile(old); err != nil || !bytes.Equal(after, before) {
		t.Errorf("the old output was changed or deleted (%v)", err)
	}
	// For tools, as JSON Lines on stdout: the kept leftover is a warning.
	code, stdout, stderr := lilygen(t, dir, "generate", "--error-format=json", "ping.lily.yaml")
	var rules []string
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		var d diag
		if err := json.Unmarshal([]byte(line), &d); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		rules = append(rules, d.Rule+"/"+d.Severity)
	}
	if want := []string{outputNotWritten + "/", leftoverKept + "/" + warning}; code != exitFindings || stderr != "" || !slices.Equal(rules, want) {
		t.Errorf("generate --error-format=json: exit %d, rules %q, want %q\n%s%s", code, rules, want, stdout, stderr)
	}
}

// shopModule returns the directory of a new module, example.com/shop,
// which holds its go.mod alone: generate looks for leftovers within it.
func shopModule(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "go.mod"), "module example.com/shop\n\ngo 1.26\n")
	return dir
}

// generatePing generates the minimal schema in dir, as ping.lily.yaml, and
// returns the path of its Go file and what it holds.
func generatePing(t *testing.T, dir string) (string, []byte) {
	t.Helper()
	writeFile(t, filepath.Join(dir, "ping.lily.yaml"), minimal)
	if code, _, stderr := lilygen(t, dir, "generate", "ping.lily.yaml"); code != exitOK {
		t.Fatalf("generate: exit %d\n%s", code, stderr)
	}
	path := filepath.Join(dir, "out", "pingmsg.lily.go")
	content, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, content
}

// A path lilygen prints may come from the command line or from any
// directory of the module: a control character in it is escaped, as in
// schema errors, so that it cannot forge a line or drive the terminal.
func TestMessagesEscapePaths(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "ping.lily.yaml"), minimal)
	writeFile(t, filepath.Join(dir, "o\x1b[2Jut", "pingmsg.lily.go"), header+"\n// Source: ping.lily.yaml\n// Schema: ../ping.lily.yaml\n\npackage pingmsg\n")
	code, stdout, stderr := lilygen(t, dir, "check", "ping.lily.yaml")
	if want := `o\x1b[2Jut/pingmsg.lily.go was generated from ping.lily.yaml`; code != exitFindings || !strings.Contains(stderr, want) ||
		!strings.Contains(stdout, `--- o\x1b[2Jut/pingmsg.lily.go (on disk)`) || strings.Contains(stdout+stderr, "\x1b") {
		t.Errorf("check: exit %d, want 1 and %s\n%s%s", code, want, stdout, stderr)
	}
	code, _, stderr = lilygen(t, dir, "generate", "no\rsuch.lily.yaml")
	if want := `no\rsuch.lily.yaml`; code != exitUsage || !strings.Contains(stderr, want) || strings.Contains(stderr, "\r") {
		t.Errorf("generate: exit %d, want 2 and %s\n%q", code, want, stderr)
	}
	against := filepath.Join(dir, "old\x1b[2J.lily.yaml")
	writeFile(t, against, minimal)
	code, _, stderr = lilygen(t, dir, "breaking", "--against", against, "ping.lily.yaml")
	if want := `0 breaking changes against ` + dir + `/old\x1b[2J.lily.yaml`; code != exitOK || !strings.Contains(stderr, want) || strings.Contains(stderr, "\x1b") {
		t.Errorf("breaking: exit %d, want 0 and %s\n%q", code, want, stderr)
	}
}
