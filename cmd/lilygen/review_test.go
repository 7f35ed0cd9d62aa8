package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/lily-mq/lily/review"
	"github.com/lily-mq/lily/schema"
	"github.com/lily-mq/lily/schema/rules"
)

// git runs git in dir, failing the test on error.
func git(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=lily", "-c", "user.email=lily@example.com"}, args...)...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// commitRepo makes repo a git repository on branch main whose first commit
// holds every file written there so far.
func commitRepo(t *testing.T, repo string) {
	t.Helper()
	git(t, repo, "init", "-q", "-b", "main")
	git(t, repo, "add", ".")
	git(t, repo, "commit", "-q", "-m", "start")
}

// TestBreakingAgainstGitRef commits a schema, changes it in the working tree
// and compares it with the commit, from a subdirectory as go:generate runs.
func TestBreakingAgainstGitRef(t *testing.T) {
	repo := t.TempDir()
	dir := filepath.Join(repo, "svc")
	writeFile(t, filepath.Join(dir, "ping.lily.yaml"), minimal)
	commitRepo(t, repo)

	if code, stdout, stderr := lilygen(t, dir, "breaking", "--against", "main", "ping.lily.yaml"); code != exitOK || stdout != "" {
		t.Errorf("unchanged: exit %d\n%s%s", code, stdout, stderr)
	}
	changed := strings.Replace(minimal, "id: {type: string, required: true}", "id: {type: string, required: true, max_length: 10}", 1)
	writeFile(t, filepath.Join(dir, "ping.lily.yaml"), changed)
	code, stdout, stderr := lilygen(t, dir, "breaking", "ping.lily.yaml", "--against", "main")
	if code != exitFindings || !strings.Contains(stdout, "ping.lily.yaml:9:11: Ping.v1.id narrows its bounds from none to ..10 characters") ||
		!strings.Contains(stdout, "[BOUND-NARROWED]") || !strings.Contains(stderr, "1 breaking change against main") {
		t.Errorf("narrowed: exit %d\n%s%s", code, stdout, stderr)
	}
	code, _, stderr = lilygen(t, dir, "breaking", "--against", "main", "--allow", "BOUND-NARROWED@Ping.v1.id", "ping.lily.yaml")
	if code != exitOK || !strings.Contains(stderr, "0 breaking changes against main (and 1 acknowledged)") {
		t.Errorf("acknowledged: exit %d\n%s", code, stderr)
	}

	// A ref that does not exist is a usage error.
	if code, _, stderr := lilygen(t, dir, "breaking", "--against", "nosuchref", "ping.lily.yaml"); code != exitUsage || !strings.Contains(stderr, "neither a file nor a git commit") {
		t.Errorf("unknown ref: exit %d\n%s", code, stderr)
	}
	// The old revision's schema errors name the ref.
	writeFile(t, filepath.Join(dir, "ping.lily.yaml"), "version: 1\npackage: x\nmesages: {}\n")
	git(t, repo, "commit", "-q", "-am", "broken")
	writeFile(t, filepath.Join(dir, "ping.lily.yaml"), minimal)
	if code, _, stderr := lilygen(t, dir, "breaking", "--against", "HEAD", "ping.lily.yaml"); code != exitUsage || !strings.Contains(stderr, "HEAD:svc/ping.lily.yaml:3:1:") {
		t.Errorf("broken old revision: exit %d\n%s", code, stderr)
	}
	if code, _, stderr := lilygen(t, dir, "breaking", "ping.lily.yaml"); code != exitUsage || !strings.Contains(stderr, "--against names the older revision") {
		t.Errorf("no --against: exit %d\n%s", code, stderr)
	}
}

// A schema outside any git repository can be compared with no commit: the
// error says that, not that the ref is none.
func TestBreakingAgainstGitRefOutsideARepository(t *testing.T) {
	dir := t.TempDir()
	// Git looks for no repository above dir, wherever the temporary
	// directory is.
	t.Setenv("GIT_CEILING_DIRECTORIES", filepath.Dir(dir))
	writeFile(t, filepath.Join(dir, "ping.lily.yaml"), minimal)
	code, _, stderr := lilygen(t, dir, "breaking", "--against", "main", "ping.lily.yaml")
	if want := "lilygen: --against main is not a file, and ping.lily.yaml is not in a git work tree, whose commits it could name ("; code != exitUsage || !strings.HasPrefix(stderr, want) {
		t.Errorf("exit %d, want %d and %s…\n%s", code, exitUsage, want, stderr)
	}
}

// TestBreakingAcknowledgementAcceptsOnlyItsOwnChange follows one
// acknowledgement through the CI job of docs/lilygen.md: it accepts the
// change of the pull request that adds it; once that is merged, a later
// pull request is warned to remove it, not failed, and a later break of the
// same rule and subject is not accepted by it.
func TestBreakingAcknowledgementAcceptsOnlyItsOwnChange(t *testing.T) {
	repo := t.TempDir()
	file := filepath.Join(repo, "ping.lily.yaml")
	writeFile(t, file, minimal)
	commitRepo(t, repo)

	ack := func(reason string) string {
		return "acknowledge:\n  - rule: BOUND-NARROWED\n    subject: Ping.v1.id\n    reason: " + reason + "\nmessages:"
	}
	narrowed := strings.NewReplacer("required: true}", "required: true, max_length: 64}", "messages:", ack("ids are uuids")).Replace(minimal)
	writeFile(t, file, narrowed)
	if code, stdout, stderr := lilygen(t, repo, "breaking", "--against", "main", "ping.lily.yaml"); code != exitOK || !strings.Contains(stdout, "acknowledged by: BOUND-NARROWED@Ping.v1.id at ping.lily.yaml:5:5") || !strings.Contains(stderr, "(and 1 acknowledged)") {
		t.Errorf("the pull request that adds it: exit %d\n%s%s", code, stdout, stderr)
	}
	git(t, repo, "commit", "-q", "-am", "narrow id")

	writeFile(t, file, strings.Replace(narrowed, "required: true, max_length: 64}", "required: true, max_length: 64}\n          note: {type: string, max_length: 9}", 1))
	code, stdout, stderr := lilygen(t, repo, "breaking", "--error-format=github-actions", "--against", "main", "ping.lily.yaml")
	if want := "::warning file=ping.lily.yaml,line=5,col=5,title=INHERITED-ACKNOWLEDGEMENT::acknowledgement BOUND-NARROWED@Ping.v1.id is at main too"; code != exitOK || !strings.HasPrefix(stdout, want) {
		t.Errorf("a later pull request: exit %d, want 0 and %s…\n%s%s", code, want, stdout, stderr)
	}

	again := strings.Replace(narrowed, "max_length: 64}", "max_length: 36}", 1)
	writeFile(t, file, again)
	code, stdout, stderr = lilygen(t, repo, "breaking", "--against", "main", "ping.lily.yaml")
	if code != exitFindings || !strings.Contains(stdout, "[BOUND-NARROWED]") || !strings.Contains(stdout, "note: the acknowledgement BOUND-NARROWED@Ping.v1.id at ping.lily.yaml:5:5 is in the older revision too") {
		t.Errorf("a later break of its rule and subject: exit %d\n%s%s", code, stdout, stderr)
	}
	writeFile(t, file, strings.Replace(again, "ids are uuids", "ids are uuids, 36 characters", 1))
	if code, stdout, stderr := lilygen(t, repo, "breaking", "--against", "main", "ping.lily.yaml"); code != exitOK || !strings.Contains(stderr, "(and 1 acknowledged)") {
		t.Errorf("acknowledged anew, with a reason of its own: exit %d\n%s%s", code, stdout, stderr)
	}
}

func TestErrorFormats(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "bad.lily.yaml"), strings.Replace(minimal, "consumes:", "prefech: 3\n    consumes:", 1))
	code, stdout, stderr := lilygen(t, dir, "check", "--error-format=json", "bad.lily.yaml")
	var d diag
	if code != exitUsage || stderr != "" || json.Unmarshal([]byte(stdout), &d) != nil ||
		d != (diag{File: "bad.lily.yaml", Line: 12, Column: 5, Rule: schema.RuleUnknownKey, Message: `unknown key "prefech"`, Hint: `did you mean "prefetch"?`}) {
		t.Errorf("json: exit %d, %+v\n%s%s", code, d, stdout, stderr)
	}
	code, stdout, _ = lilygen(t, dir, "generate", "bad.lily.yaml", "--error-format", "github-actions")
	if want := "::error file=bad.lily.yaml,line=12,col=5,title=UNKNOWN-KEY::unknown key \"prefech\" (did you mean \"prefetch\"?)\n"; code != exitUsage || stdout != want {
		t.Errorf("github-actions: exit %d\n%s", code, stdout)
	}
	code, _, stderr = lilygen(t, dir, "generate", "bad.lily.yaml")
	if want := "bad.lily.yaml:12:5: unknown key \"prefech\" (did you mean \"prefetch\"?) [UNKNOWN-KEY]\n"; code != exitUsage || stderr != want {
		t.Errorf("text: exit %d\n%s", code, stderr)
	}
	if code, _, stderr := lilygen(t, dir, "lint", "--error-format=xml", "bad.lily.yaml"); code != exitUsage || !strings.Contains(stderr, "want text, json or github-actions") {
		t.Errorf("unknown format: exit %d\n%s", code, stderr)
	}
}

func TestEscapeWorkflowCommands(t *testing.T) {
	if got := escapeProperty("a,b:c%d\ne"); got != "a%2Cb%3Ac%25d%0Ae" {
		t.Errorf("escapeProperty: %s", got)
	}
	if got := escapeData("a,b:c%d\r\ne"); got != "a,b:c%25d%0D%0Ae" {
		t.Errorf("escapeData: %s", got)
	}
}

// An annotation's file names a file escaped as the message is: an included
// file's name drove the terminal (an ANSI escape, an OSC title, a carriage
// return) and forged a legacy command in the Actions log. A printable name
// is given as it is.
func TestAnnotationFileIsEscaped(t *testing.T) {
	dir := t.TempDir()
	const evil = "x\x1b]0;pwned\a\x1b[2J\r\u202e##[warning]forged.yaml"
	writeFile(t, filepath.Join(dir, evil), "version: 1\nprefech: 3\n")
	writeFile(t, filepath.Join(dir, "s.lily.yaml"), strings.Replace(minimal, "version: 1\n", "version: 1\ninclude: [\""+strings.NewReplacer("\x1b", `\e`, "\a", `\a`, "\r", `\r`).Replace(evil)+"\"]\n", 1))
	code, stdout, stderr := lilygen(t, dir, "lint", "--error-format=github-actions", "s.lily.yaml")
	want := `::error file=x\x1b]0;pwned\a\x1b[2J\r\u202e##\[warning]forged.yaml,line=2,col=1,title=UNKNOWN-KEY::unknown key "prefech"`
	if code != exitUsage || !strings.Contains(stdout, want) || strings.ContainsAny(stdout, "\x1b\a\r\u202e") {
		t.Errorf("exit %d, want %s\n%q%s", code, want, stdout, stderr)
	}
	writeFile(t, filepath.Join(dir, "plain é.yaml"), "version: 1\nprefech: 3\n")
	writeFile(t, filepath.Join(dir, "s.lily.yaml"), strings.Replace(minimal, "version: 1\n", "version: 1\ninclude: [plain é.yaml]\n", 1))
	if _, stdout, _ := lilygen(t, dir, "lint", "--error-format=github-actions", "s.lily.yaml"); !strings.Contains(stdout, "::error file=plain é.yaml,line=2,col=1,") {
		t.Errorf("a printable name changed:\n%s", stdout)
	}
}

func TestInit(t *testing.T) {
	demo, err := filepath.Abs(filepath.Join("..", "..", "examples", "orders", "orders.lily.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if code, _, stderr := lilygen(t, dir, "init", "orders.lily.yaml"); code != exitOK {
		t.Fatalf("init: exit %d\n%s", code, stderr)
	}
	// The starter schema is clean: it generates, and lint has nothing to say.
	for _, cmd := range []string{"generate", "lint"} {
		if code, stdout, stderr := lilygen(t, dir, cmd, "orders.lily.yaml"); code != exitOK || stdout+stderr != "" {
			t.Errorf("%s of the starter schema: exit %d\n%s%s", cmd, code, stdout, stderr)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "ordersmsg", "ordersmsg.lily.go")); err != nil {
		t.Errorf("package ordersmsg: %v", err)
	}
	if code, _, stderr := lilygen(t, dir, "init", "orders.lily.yaml"); code != exitUsage || !strings.Contains(stderr, "never overwrites") {
		t.Errorf("second init: exit %d\n%s", code, stderr)
	}
	if code, _, stderr := lilygen(t, dir, "init", "-package", "billing", "b.lily.yaml"); code != exitOK {
		t.Errorf("init -package: exit %d\n%s", code, stderr)
	} else if f, err := schema.Load(filepath.Join(dir, "b.lily.yaml")); err != nil {
		t.Errorf("init -package: %v", err)
	} else if f.Package != "billing" || f.Output != "billing" {
		t.Errorf("init -package: package %q, output %q; want billing for both", f.Package, f.Output)
	} else if len(f.Queues) != 1 || f.Queues[0].Name != "billing.events" || f.Queues[0].DLQ != "billing.events.dlq" {
		t.Errorf("init -package billing: want the queue billing.events and its DLQ billing.events.dlq")
	}
	// On a broker the demo has used, no queue of the starter's topology may
	// meet one of the demo's (a quorum orders met its classic orders: 406).
	demoQueues := topologyQueues(t, dir, demo)
	for _, file := range []string{"orders.lily.yaml", "b.lily.yaml"} {
		for q := range topologyQueues(t, dir, file) {
			if demoQueues[q] {
				t.Errorf("%s declares %s, one of the orders demo's queues", file, q)
			}
		}
	}
}

// init refuses a package that generation refuses, or one that would write
// YAML into the starter, as a usage error, and writes nothing.
func TestInitRefusesABadPackage(t *testing.T) {
	dir := t.TempDir()
	for _, pkg := range []string{"Bad-Pkg", "type", "9lives", "okmsg # a comment", "okmsg\nacknowledge: []"} {
		code, _, stderr := lilygen(t, dir, "init", "--package", pkg, "x.lily.yaml")
		if code != exitUsage || !strings.Contains(stderr, "is not a lower-case Go package name") {
			t.Errorf("init --package %q: exit %d\n%s", pkg, code, stderr)
		}
		if _, err := os.Stat(filepath.Join(dir, "x.lily.yaml")); err == nil {
			t.Fatalf("init --package %q wrote x.lily.yaml", pkg)
		}
	}
}

// The starter file is what init writes for its own package, so the names
// init fills in are the ones it holds.
func TestStarterHoldsTheNamesInitFillsIn(t *testing.T) {
	if got := fillStarter(starterPackage); got != starter {
		t.Errorf("init -package %s does not write the starter as it is", starterPackage)
	}
	if q := queueFor(starterPackage); q != starterQueue {
		t.Errorf("queueFor(%q) = %q, the starter names %q", starterPackage, q, starterQueue)
	}
	for pkg, want := range map[string]string{"billing": "billing.events", "billingmsg": "billing.events", "msg": "msg.events"} {
		if got := queueFor(pkg); got != want {
			t.Errorf("queueFor(%q) = %q, want %q", pkg, got, want)
		}
	}
}

// topologyQueues is the set of queue names lilygen topology gives a schema.
func topologyQueues(t *testing.T, dir, file string) map[string]bool {
	t.Helper()
	code, stdout, stderr := lilygen(t, dir, "topology", "--rabbitmq", "3", file)
	if code != exitOK {
		t.Fatalf("topology %s: exit %d\n%s", file, code, stderr)
	}
	var defs struct{ Queues []struct{ Name string } }
	if err := json.Unmarshal([]byte(stdout), &defs); err != nil {
		t.Fatalf("topology %s: %v", file, err)
	}
	names := map[string]bool{}
	for _, q := range defs.Queues {
		names[q.Name] = true
	}
	if len(names) == 0 {
		t.Fatalf("topology %s: no queues", file)
	}
	return names
}

func TestPackageFor(t *testing.T) {
	for name, want := range map[string]string{"orders.lily.yaml": "ordersmsg", "dir/Billing-V2.lily.yaml": "billingv2msg", "2x.yaml": "app2xmsg"} {
		if got := packageFor(name); got != want {
			t.Errorf("packageFor(%q) = %q, want %q", name, got, want)
		}
	}
}

// TestBreakingAgainstGitRefFollowsARename compares a schema the ref has under
// another path with the file git finds it renamed from, and says so; one the
// ref has under no path is compared with nothing, and that is said too.
func TestBreakingAgainstGitRefFollowsARename(t *testing.T) {
	repo := t.TempDir()
	writeFile(t, filepath.Join(repo, "svc", "ping.lily.yaml"), minimal)
	commitRepo(t, repo)

	dir := filepath.Join(repo, "billing")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	git(t, repo, "mv", "svc/ping.lily.yaml", "billing/pings.lily.yaml")
	writeFile(t, filepath.Join(dir, "pings.lily.yaml"), strings.Replace(minimal, "required: true}", "required: true, max_length: 10}", 1))
	code, stdout, stderr := lilygen(t, dir, "breaking", "--against", "main", "pings.lily.yaml")
	if code != exitFindings || !strings.Contains(stdout, "pings.lily.yaml:9:11: Ping.v1.id narrows its bounds from none to ..10 characters") ||
		!strings.Contains(stderr, "pings.lily.yaml: not at main; compared with main:svc/ping.lily.yaml, which git finds it renamed from") {
		t.Errorf("renamed: exit %d\n%s%s", code, stdout, stderr)
	}

	writeFile(t, filepath.Join(dir, "new.lily.yaml"), strings.NewReplacer("Ping", "Pong", "pings", "pongs").Replace(minimal))
	code, stdout, stderr = lilygen(t, dir, "breaking", "--against", "main", "new.lily.yaml")
	if code != exitOK || stdout != "" || !strings.Contains(stderr, "new.lily.yaml: not at main, not compared (new, or moved") ||
		!strings.Contains(stderr, "0 breaking changes against main (and 1 schema not compared)") {
		t.Errorf("new: exit %d\n%s%s", code, stdout, stderr)
	}
	// For tools, and as an annotation on the pull request.
	msg := "not at main, not compared (new, or moved where git finds no rename from a file there, and holding nothing moved from another schema of this run): only what it shares with the other schemas of this run is checked"
	code, stdout, _ = lilygen(t, dir, "breaking", "--error-format=github-actions", "--against", "main", "new.lily.yaml")
	if want := "::warning file=new.lily.yaml,title=SCHEMA-NOT-COMPARED::" + msg + "\n"; code != exitOK || stdout != want {
		t.Errorf("new, github-actions: exit %d\n%s\nwant exit 0 and\n%s", code, stdout, want)
	}
	code, stdout, _ = lilygen(t, dir, "breaking", "--error-format=json", "--against", "main", "new.lily.yaml")
	var d diag
	if err := json.Unmarshal([]byte(stdout), &d); code != exitOK || err != nil ||
		d != (diag{File: "new.lily.yaml", Rule: "SCHEMA-NOT-COMPARED", Message: msg, Severity: "warning"}) {
		t.Errorf("new, json: exit %d, %v\n%s", code, err, stdout)
	}
}

// TestBreakingComparesANewQueueWithAnotherSchemas compares a queue new to a
// schema, here one the ref does not have, with the queue of its name that
// another schema of the run holds: RabbitMQ refuses the second
// declaration, and each consumer would dead-letter the other's messages.
func TestBreakingComparesANewQueueWithAnotherSchemas(t *testing.T) {
	repo := t.TempDir()
	a := strings.Replace(minimal, "  pings:\n", "  rv-x:\n", 1)
	writeFile(t, filepath.Join(repo, "a.lily.yaml"), a)
	commitRepo(t, repo)

	b := strings.NewReplacer("pingmsg", "refundmsg", "output: out", "output: refunds", "Ping", "Refund", "  pings:\n", "  rv-x:\n    type: quorum\n").Replace(minimal)
	writeFile(t, filepath.Join(repo, "b.lily.yaml"), b)
	code, stdout, stderr := lilygen(t, repo, "breaking", "--against", "main", "a.lily.yaml", "b.lily.yaml")
	if code != exitFindings || !strings.Contains(stdout, `b.lily.yaml:11:3: queue "rv-x" is new here, and a.lily.yaml declares it too, differently`) ||
		!strings.Contains(stdout, "[DECLARED-DIFFERENTLY]") || !strings.Contains(stdout, "(Refund version 1 only here, Ping version 1 only there)") ||
		!strings.Contains(stdout, "[QUEUE-SHARED]") || !strings.Contains(stderr, "2 breaking changes against main (and 1 schema not compared)") {
		t.Errorf("exit %d\n%s%s", code, stdout, stderr)
	}
}

// TestBreakingJudgesTheAcknowledgementsOfASchemaNotCompared takes every
// acknowledgement of a schema the ref does not have for new: one with a
// subject acknowledges nothing this change does, one without stands.
func TestBreakingJudgesTheAcknowledgementsOfASchemaNotCompared(t *testing.T) {
	repo := t.TempDir()
	writeFile(t, filepath.Join(repo, "README"), "a repository without the schema\n")
	commitRepo(t, repo)

	policy := "acknowledge:\n  - rule: HANDLER-METHOD-ADDED\n    reason: handlers embed Unimplemented\nmessages:"
	writeFile(t, filepath.Join(repo, "ping.lily.yaml"), strings.Replace(minimal, "messages:", policy, 1))
	if code, stdout, stderr := lilygen(t, repo, "breaking", "--against", "main", "ping.lily.yaml"); code != exitOK || stdout != "" || !strings.Contains(stderr, "(and 1 schema not compared)") {
		t.Errorf("a standing policy: exit %d\n%s%s", code, stdout, stderr)
	}
	withSubject := strings.Replace(policy, "messages:", "  - rule: FIELD-REMOVED\n    subject: Ping.v1.gift\n    reason: gift is gone\nmessages:", 1)
	writeFile(t, filepath.Join(repo, "ping.lily.yaml"), strings.Replace(minimal, "messages:", withSubject, 1))
	code, stdout, stderr := lilygen(t, repo, "breaking", "--against", "main", "ping.lily.yaml")
	if want := "ping.lily.yaml:7:5: acknowledgement FIELD-REMOVED@Ping.v1.gift is new since main"; code != exitFindings || stdout != "" || !strings.Contains(stderr, want) {
		t.Errorf("an acknowledgement with a subject: exit %d, want 1 and %s…\n%s%s", code, want, stdout, stderr)
	}
}

// TestBreakingAgainstGitRefReadsIncludes reads the files a schema includes at
// the ref too, not from the working tree.
func TestBreakingAgainstGitRefReadsIncludes(t *testing.T) {
	repo := t.TempDir()
	writeFile(t, filepath.Join(repo, "ping.lily.yaml"), "version: 1\npackage: pingmsg\ninclude: [shared/common.lily.yaml]\nqueues:\n  pings:\n    consumes: [{message: Ping}]\n")
	common := "version: 1\nmessages:\n  Ping:\n    versions:\n      1:\n        fields:\n          id: {type: string, required: true}\n"
	writeFile(t, filepath.Join(repo, "shared", "common.lily.yaml"), common)
	commitRepo(t, repo)

	writeFile(t, filepath.Join(repo, "shared", "common.lily.yaml"), strings.Replace(common, "required: true}", "required: true, max_length: 9}", 1))
	code, stdout, stderr := lilygen(t, repo, "breaking", "--against", "main", "ping.lily.yaml")
	if code != exitFindings || !strings.Contains(stdout, "shared/common.lily.yaml:7:11: Ping.v1.id narrows its bounds from none to ..9 characters") {
		t.Errorf("exit %d\n%s%s", code, stdout, stderr)
	}
}

// An include of the older revision that lies above the repository's root
// has no revision at the ref: breaking refuses it, as the working tree's,
// rather than read what the temporary checkout's parent directory holds
// under that name.
func TestBreakingAgainstGitRefRefusesAnIncludeOutsideTheRepository(t *testing.T) {
	top, tmp := t.TempDir(), t.TempDir()
	t.Setenv("TMPDIR", tmp)
	repo := filepath.Join(top, "repo")
	common := "version: 1\nmessages:\n  Ping:\n    versions:\n      1:\n        fields:\n          id: {type: string, required: true}\n"
	writeFile(t, filepath.Join(top, "outside.lily.yaml"), common)
	// Whoever can write to the temporary directory could plant this.
	writeFile(t, filepath.Join(tmp, "outside.lily.yaml"), strings.Replace(common, "required: true}", "required: true, max_length: 9}", 1))
	writeFile(t, filepath.Join(repo, "ping.lily.yaml"), "version: 1\npackage: pingmsg\ninclude: [../outside.lily.yaml]\nqueues:\n  pings:\n    consumes: [{message: Ping}]\n")
	commitRepo(t, repo)

	code, stdout, stderr := lilygen(t, repo, "breaking", "--against", "main", "ping.lily.yaml")
	for _, want := range []string{
		"main:ping.lily.yaml:3:11: include \"../outside.lily.yaml\" is outside the repository [BAD-INCLUDE]\n",
		"\nping.lily.yaml:3:11: include \"../outside.lily.yaml\" is outside the repository [BAD-INCLUDE]\n",
	} {
		if code != exitUsage || stdout != "" || !strings.Contains(stderr, want) {
			t.Errorf("exit %d, want 2 and %s\n%s%s", code, want, stdout, stderr)
		}
	}
}

// The files a schema includes from elsewhere in the repository, above its
// own directory, are read at the ref as in the working tree.
func TestBreakingAgainstGitRefReadsIncludesAboveTheSchema(t *testing.T) {
	repo := t.TempDir()
	writeFile(t, filepath.Join(repo, "svc", "ping.lily.yaml"), "version: 1\npackage: pingmsg\ninclude: [../shared/common.lily.yaml]\nqueues:\n  pings:\n    consumes: [{message: Ping}]\n")
	common := "version: 1\nmessages:\n  Ping:\n    versions:\n      1:\n        fields:\n          id: {type: string, required: true}\n"
	writeFile(t, filepath.Join(repo, "shared", "common.lily.yaml"), common)
	commitRepo(t, repo)

	writeFile(t, filepath.Join(repo, "shared", "common.lily.yaml"), strings.Replace(common, "required: true}", "required: true, max_length: 9}", 1))
	code, stdout, stderr := lilygen(t, filepath.Join(repo, "svc"), "breaking", "--against", "main", "ping.lily.yaml")
	if code != exitFindings || !strings.Contains(stdout, "shared/common.lily.yaml:7:11: Ping.v1.id narrows its bounds from none to ..9 characters") {
		t.Errorf("exit %d\n%s%s", code, stdout, stderr)
	}
}

// symlink makes a symbolic link at at, below dir, holding to.
func symlink(t *testing.T, dir, to, at string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, at)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(to, filepath.Join(dir, at)); err != nil {
		t.Fatal(err)
	}
}

// A schema whose files at the ref are reached through symbolic links (an
// include that is one, one below a directory that is one, the root schema
// itself) is read there through them, as in the working tree: unchanged,
// it compares clean, with breaking and doc alike; changed, the change is
// found.
func TestBreakingAgainstGitRefFollowsSymbolicLinks(t *testing.T) {
	types := "version: 1\nmessages:\n  Ping:\n    versions:\n      1:\n        fields:\n          id: {type: string, required: true}\n"
	narrowed := strings.Replace(types, "required: true}", "required: true, max_length: 9}", 1)
	root := "version: 1\npackage: pingmsg\ninclude: [%s]\nqueues:\n  pings:\n    consumes: [{message: Ping}]\n"
	for _, c := range []struct {
		name, include string
		links         [][2]string // to, at
	}{
		{"an include that is a link", "types.lily.yaml", [][2]string{{"shared/types.yaml", "types.lily.yaml"}}},
		{"an include below a directory link", "sh/types.yaml", [][2]string{{"shared", "sh"}}},
		// The .. a link holds is taken where the directory before it leads,
		// as the kernel takes it: x is deep/real, not real, which is none.
		{"a link's .. after a directory link", "x/types.yaml", [][2]string{{"deep/down", "svc"}, {"svc/../real", "x"}, {"../shared", "deep/real"}}},
		{"a chain of links", "a.yaml", [][2]string{{"b.yaml", "a.yaml"}, {"sh/types.yaml", "b.yaml"}, {"shared", "sh"}}},
		// Into the work tree, as the working tree's parser follows it: to
		// the file's revision at the ref.
		{"an absolute link", "abs.yaml", [][2]string{{"REPO/shared/types.yaml", "abs.yaml"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			repo := t.TempDir()
			writeFile(t, filepath.Join(repo, "ping.lily.yaml"), fmt.Sprintf(root, c.include))
			writeFile(t, filepath.Join(repo, "shared", "types.yaml"), types)
			writeFile(t, filepath.Join(repo, "deep", "down", "README"), "")
			for _, l := range c.links {
				symlink(t, repo, strings.Replace(l[0], "REPO", repo, 1), l[1])
			}
			commitRepo(t, repo)
			// Lint findings aside (exit 1), the working tree reads it.
			if code, stdout, stderr := lilygen(t, repo, "lint", "ping.lily.yaml"); code == exitUsage {
				t.Fatalf("the working tree: exit %d\n%s%s", code, stdout, stderr)
			}
			if code, stdout, stderr := lilygen(t, repo, "breaking", "--against", "main", "ping.lily.yaml"); code != exitOK || stdout != "" {
				t.Errorf("unchanged: exit %d\n%s%s", code, stdout, stderr)
			}
			if code, _, stderr := lilygen(t, repo, "doc", "--against", "main", "ping.lily.yaml"); code != exitOK {
				t.Errorf("doc, unchanged: exit %d\n%s", code, stderr)
			}
			writeFile(t, filepath.Join(repo, "shared", "types.yaml"), narrowed)
			want := c.include + ":7:11: Ping.v1.id narrows its bounds from none to ..9 characters"
			if code, stdout, stderr := lilygen(t, repo, "breaking", "--against", "main", "ping.lily.yaml"); code != exitFindings || !strings.Contains(stdout, want) {
				t.Errorf("changed: exit %d, want 1 and %s\n%s%s", code, want, stdout, stderr)
			}
		})
	}
}

// A root schema that is a symbolic link at the ref is compared with the
// file it leads to there, after the change replaces the link with the
// file too.
func TestBreakingAgainstGitRefReadsARootSchemaThatIsALink(t *testing.T) {
	repo := t.TempDir()
	writeFile(t, filepath.Join(repo, "svc", "real.yaml"), minimal)
	symlink(t, repo, filepath.Join("svc", "real.yaml"), "ping.lily.yaml")
	commitRepo(t, repo)
	if code, stdout, stderr := lilygen(t, repo, "breaking", "--against", "main", "ping.lily.yaml"); code != exitOK || stdout != "" {
		t.Errorf("unchanged: exit %d\n%s%s", code, stdout, stderr)
	}
	if err := os.Remove(filepath.Join(repo, "ping.lily.yaml")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(repo, "ping.lily.yaml"), minimal)
	if code, stdout, stderr := lilygen(t, repo, "breaking", "--against", "main", "ping.lily.yaml"); code != exitOK || stdout != "" {
		t.Errorf("the link replaced by its file: exit %d\n%s%s", code, stdout, stderr)
	}
	writeFile(t, filepath.Join(repo, "ping.lily.yaml"), strings.Replace(minimal, "required: true}", "required: true, max_length: 9}", 1))
	code, stdout, stderr := lilygen(t, repo, "breaking", "--against", "main", "ping.lily.yaml")
	if code != exitFindings || !strings.Contains(stdout, "ping.lily.yaml:9:11: Ping.v1.id narrows its bounds from none to ..9 characters") {
		t.Errorf("the link replaced by a file changed: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, _, stderr := lilygen(t, repo, "doc", "--against", "main", "ping.lily.yaml"); code != exitOK {
		t.Errorf("doc: exit %d\n%s", code, stderr)
	}
}

// A symbolic link at the ref that leads outside the repository, as an
// include or as the root schema, is refused there as in the working tree,
// and nothing of what it leads to is read; so is one into .git, git's own.
func TestBreakingAgainstGitRefRefusesALinkOutsideTheRepository(t *testing.T) {
	top := t.TempDir()
	repo := filepath.Join(top, "repo")
	writeFile(t, filepath.Join(top, "secrets.env"), "API_TOKEN=ghp_abcdefghijklmnopqrstuvwxyz\n")
	writeFile(t, filepath.Join(repo, "ping.lily.yaml"), strings.Replace(minimal, "output: out\n", "output: out\ninclude: [up/secrets.env, g/config]\n", 1))
	symlink(t, repo, "..", "up")
	symlink(t, repo, ".git", "g")
	symlink(t, repo, filepath.Join(top, "secrets.env"), "pong.lily.yaml")
	commitRepo(t, repo)

	code, stdout, stderr := lilygen(t, repo, "breaking", "--against", "main", "ping.lily.yaml")
	for _, want := range []string{
		"main:ping.lily.yaml:4:11: include \"up/secrets.env\" is outside the repository [BAD-INCLUDE]\n",
		"\nping.lily.yaml:4:11: include \"up/secrets.env\" is outside the repository [BAD-INCLUDE]\n",
		"main:ping.lily.yaml:4:27: include \"g/config\" is in a .git directory, git's own, which is not read: its config may hold a credential [BAD-INCLUDE]\n",
	} {
		if code != exitUsage || !strings.Contains(stderr, want) || strings.Contains(stdout+stderr, "ghp_") {
			t.Errorf("an include: exit %d, want 2 and %s\n%s%s", code, want, stdout, stderr)
		}
	}
	code, stdout, stderr = lilygen(t, repo, "breaking", "--against", "main", "pong.lily.yaml")
	if want := "lilygen: main:pong.lily.yaml: a link to a file outside the repository, which is not read\n"; code != exitUsage || !strings.Contains(stderr, want) || strings.Contains(stdout+stderr, "ghp_") {
		t.Errorf("the root schema: exit %d, want 2 and %s\n%s%s", code, want, stdout, stderr)
	}
}

// check refuses an include outside the repository, and quotes nothing of
// it: a pull request's schema, checked in CI, would otherwise print the
// start of any file the runner can read in the job's annotations.
func TestCheckRefusesAnIncludeOutsideTheRepository(t *testing.T) {
	top := t.TempDir()
	repo := filepath.Join(top, "repo")
	writeFile(t, filepath.Join(top, "secrets.env"), "API_TOKEN=ghp_abcdefghijklmnopqrstuvwxyz\n")
	writeFile(t, filepath.Join(repo, "ping.lily.yaml"), "version: 1\npackage: pingmsg\ninclude: [../secrets.env]\nmessages:\n  Ping: {versions: {1: {}}}\n")
	commitRepo(t, repo)

	code, stdout, stderr := lilygen(t, repo, "check", "--error-format=github-actions", "ping.lily.yaml")
	want := "::error file=ping.lily.yaml,line=3,col=11,title=BAD-INCLUDE::include \"../secrets.env\" is outside the repository\n"
	if code != exitUsage || stdout != want || strings.Contains(stdout+stderr, "ghp_") {
		t.Errorf("exit %d, want 2 and %s\n%s%s", code, want, stdout, stderr)
	}
}

// topology needs --rabbitmq when a queue is quorum: RabbitMQ 3 and 4 need
// its "no delivery limit" written differently, and a guess for 4 would
// leave a quorum DLQ with the default limit of 20.
func TestTopologyNeedsTheVersionForQuorumQueues(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "classic.lily.yaml"), minimal)
	writeFile(t, filepath.Join(dir, "quorum.lily.yaml"), strings.Replace(minimal, "  pings:\n", "  pings:\n    type: quorum\n", 1))
	if code, _, stderr := lilygen(t, dir, "topology", "classic.lily.yaml"); code != exitOK {
		t.Errorf("topology of classic queues: exit %d\n%s", code, stderr)
	}
	code, _, stderr := lilygen(t, dir, "topology", "quorum.lily.yaml")
	if code != exitUsage || !strings.Contains(stderr, "--rabbitmq is required") {
		t.Errorf("topology of a quorum queue without --rabbitmq: exit %d\n%s", code, stderr)
	}
	if code, _, stderr := lilygen(t, dir, "topology", "--rabbitmq", "4", "quorum.lily.yaml"); code != exitOK {
		t.Errorf("topology --rabbitmq 4: exit %d\n%s", code, stderr)
	}
}

// Findings quote schema text, enum values among it: in text, a control
// character in it is escaped, so that it cannot forge a line or drive the
// terminal.
func TestFindingsPrintControlCharactersEscaped(t *testing.T) {
	var b strings.Builder
	textFormat.findings(&b, []review.Finding{{
		Rule: "ENUM-NARROWED", Category: rules.Wire, File: "s\x1b.yaml", Line: 1, Column: 2, Subject: "A.v1.s",
		Message: "values narrow from a, b\x1b[2J\nfake.yaml:1:1: x to a", Migration: "keep b\x1b[2J",
	}}, nil)
	want := string(rules.Wire) + ": " + rules.Wire.Describe() + "\n" +
		`s\x1b.yaml:1:2: values narrow from a, b\x1b[2J\nfake.yaml:1:1: x to a [ENUM-NARROWED]` + "\n" +
		"\tmigration: keep b\\x1b[2J\n\tacknowledge: --allow ENUM-NARROWED@A.v1.s\n"
	if got := b.String(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// A breaking change an acknowledgement accepts is printed after the others,
// with its category, migration, note and what accepts it.
func TestAcknowledgedFindingsPrinted(t *testing.T) {
	var b strings.Builder
	textFormat.findings(&b, nil, []review.Finding{{
		Rule: "QUEUE-REMOVED", Category: rules.Inflight, File: "a.lily.yaml", Line: 1, Column: 1, Subject: "pings",
		Message: `queue "pings" is no longer consumed`, Migration: "drain it", Note: "moved from b.lily.yaml",
		AcknowledgedBy: "QUEUE-REMOVED@pings at a.lily.yaml:4:5",
	}})
	want := "ACKNOWLEDGED: accepted breaking changes, each with what accepts it: check that it accepts no more than its author meant\n" +
		"a.lily.yaml:1:1: INFLIGHT: queue \"pings\" is no longer consumed [QUEUE-REMOVED]\n" +
		"\tmigration: drain it\n\tacknowledged by: QUEUE-REMOVED@pings at a.lily.yaml:4:5\n\tnote: moved from b.lily.yaml\n"
	if got := b.String(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// An older revision whose shared enum has a value over the 256 bytes
// lilygen takes now is compared as it is, the type whole: shortening the
// value is reported as the enum's change, not as the fields that use the
// type removed.
func TestBreakingComparesARevisionWithALongEnumValue(t *testing.T) {
	dir := t.TempDir()
	schema := func(value string) string {
		return strings.NewReplacer("messages:\n", "types:\n  Kind: {type: enum, values: [a, "+value+"]}\nmessages:\n",
			"id: {type: string, required: true}", "kind: {type: Kind, required: true}").Replace(minimal)
	}
	writeFile(t, filepath.Join(dir, "old.lily.yaml"), schema(strings.Repeat("x", 300)))
	writeFile(t, filepath.Join(dir, "ping.lily.yaml"), schema("b"))
	code, stdout, stderr := lilygen(t, dir, "breaking", "--against", "old.lily.yaml", "ping.lily.yaml")
	if code != exitFindings || !strings.Contains(stderr, "old.lily.yaml:5:34: warning: the older revision, compared as it is, breaks a limit lilygen sets now: enum value") ||
		!strings.Contains(stdout, "--allow BOUND-NARROWED@Ping.v1.kind") || strings.Contains(stdout, "FIELD-REMOVED") {
		t.Errorf("exit %d\n%s%s", code, stdout, stderr)
	}
}

// An older revision that lilygen accepted before it set a limit the
// revision breaks (four string headers without max_length: the typed
// headers' room) is compared as it is, its problem warned of: the change
// that bounds the headers is reported, and passes once acknowledged, as
// docs/schema.md advises.
func TestBreakingComparesARevisionBeyondANewerLimit(t *testing.T) {
	repo := t.TempDir()
	file := filepath.Join(repo, "ping.lily.yaml")
	unbounded := strings.Replace(minimal, "required: true}\n", "required: true}\n        headers:\n"+
		"          x-a: {type: string}\n          x-b: {type: string}\n          x-c: {type: string}\n          x-d: {type: string}\n", 1)
	writeFile(t, file, unbounded)
	commitRepo(t, repo)

	bounded := strings.ReplaceAll(unbounded, "{type: string}", "{type: string, max_length: 100}")
	writeFile(t, file, bounded)
	code, stdout, stderr := lilygen(t, repo, "breaking", "--against", "main", "ping.lily.yaml")
	if want := "main:ping.lily.yaml:10:9: warning: the older revision, compared as it is, breaks a limit lilygen sets now: PingV1's typed headers at their bounds take 16396 bytes"; code != exitFindings ||
		strings.Count(stdout, "[BOUND-NARROWED]") != 4 || !strings.Contains(stderr, want) || !strings.Contains(stderr, "4 breaking changes against main") {
		t.Errorf("the headers bounded: exit %d, want 1, 4 BOUND-NARROWED and %s…\n%s%s", code, want, stdout, stderr)
	}
	// doc's page, on stdout, stays whole: the warning goes to stderr.
	code, stdout, stderr = lilygen(t, repo, "doc", "--error-format=json", "--against", "main", "ping.lily.yaml")
	if code != exitOK || !strings.HasPrefix(stdout, "# ") || strings.Contains(stdout, "OUT-OF-RANGE") || !strings.Contains(stderr, `"rule":"OUT-OF-RANGE"`) {
		t.Errorf("doc's page: exit %d, want 0, the page alone on stdout and the warning on stderr\n%s%s", code, stdout, stderr)
	}
	var ack strings.Builder
	ack.WriteString("acknowledge:\n")
	for _, h := range []string{"x-a", "x-b", "x-c", "x-d"} {
		ack.WriteString("  - rule: BOUND-NARROWED\n    subject: Ping.v1.headers." + h + "\n    reason: no producer sends more\n")
	}
	writeFile(t, file, strings.Replace(bounded, "messages:", ack.String()+"messages:", 1))
	if code, stdout, stderr := lilygen(t, repo, "breaking", "--against", "main", "ping.lily.yaml"); code != exitOK || !strings.Contains(stderr, "(and 4 acknowledged)") {
		t.Errorf("acknowledged: exit %d\n%s%s", code, stdout, stderr)
	}
	// The older revision's own errors still fail the run.
	writeFile(t, file, strings.Replace(unbounded, "type: string}\n", "type: strin}\n", 1))
	git(t, repo, "commit", "-q", "-am", "broken")
	writeFile(t, file, bounded)
	if code, _, stderr := lilygen(t, repo, "breaking", "--against", "main", "ping.lily.yaml"); code != exitUsage || !strings.Contains(stderr, "[UNKNOWN-TYPE]") {
		t.Errorf("a broken older revision: exit %d\n%s", code, stderr)
	}
}

// A schema git cannot read at the ref (its object missing, as from a
// partial clone that cannot fetch it) is a git failure, exit 2, not a
// schema the ref does not have, which would pass unchecked as
// SCHEMA-NOT-COMPARED.
func TestBreakingAgainstGitRefFailsWhenGitCannotRead(t *testing.T) {
	repo := t.TempDir()
	writeFile(t, filepath.Join(repo, "ping.lily.yaml"), minimal)
	commitRepo(t, repo)
	out, err := exec.Command("git", "-C", repo, "rev-parse", "main:ping.lily.yaml").Output()
	if err != nil {
		t.Fatal(err)
	}
	blob := strings.TrimSpace(string(out))
	if err := os.Remove(filepath.Join(repo, ".git", "objects", blob[:2], blob[2:])); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := lilygen(t, repo, "breaking", "--against", "main", "ping.lily.yaml")
	if code != exitUsage || strings.Contains(stdout+stderr, "not compared") || !strings.Contains(stderr, "lilygen: git ") {
		t.Errorf("exit %d, want 2 and git's error\n%s%s", code, stdout, stderr)
	}
}

// A repository of SHA-256 object ids holds trees whose entries name their
// objects by longer ids: breaking reads a schema, its include below a
// directory, and a schema deleted since there as it reads SHA-1 ones.
func TestBreakingAgainstGitRefInASHA256Repository(t *testing.T) {
	repo := t.TempDir()
	dir := filepath.Join(repo, "svc")
	writeFile(t, filepath.Join(dir, "ping.lily.yaml"), "version: 1\npackage: pingmsg\ninclude: [shared/common.lily.yaml]\nqueues:\n  pings:\n    consumes: [{message: Ping}]\n")
	common := "version: 1\nmessages:\n  Ping:\n    versions:\n      1:\n        fields:\n          id: {type: string, required: true}\n"
	writeFile(t, filepath.Join(dir, "shared", "common.lily.yaml"), common)
	writeFile(t, filepath.Join(dir, "pong.lily.yaml"), strings.NewReplacer("Ping", "Pong", "pings", "pongs", "pingmsg", "pongmsg").Replace(minimal))
	git(t, repo, "init", "-q", "-b", "main", "--object-format=sha256")
	git(t, repo, "add", ".")
	git(t, repo, "commit", "-q", "-m", "start")
	git(t, repo, "rm", "-q", "svc/pong.lily.yaml")

	writeFile(t, filepath.Join(dir, "shared", "common.lily.yaml"), strings.Replace(common, "required: true}", "required: true, max_length: 9}", 1))
	code, stdout, stderr := lilygen(t, dir, "breaking", "--against", "main", "ping.lily.yaml")
	if code != exitFindings || !strings.Contains(stdout, "shared/common.lily.yaml:7:11: Ping.v1.id narrows its bounds from none to ..9 characters") ||
		!strings.Contains(stdout, `pong.lily.yaml:1:1: queue "pongs" is no longer consumed`) ||
		!strings.Contains(stderr, "lilygen: pong.lily.yaml: gone from the working tree since main, and no schema named is compared with main:svc/pong.lily.yaml") {
		t.Errorf("exit %d\n%s%s", code, stdout, stderr)
	}
}

// TestBreakingAgainstGitRefFindsDeletedSchemasBelowItsDirectory reports
// what a schema deleted since the ref held, below the directory breaking
// runs in only; one the working tree still has as a root schema is
// compared as if named.
func TestBreakingAgainstGitRefFindsDeletedSchemasBelowItsDirectory(t *testing.T) {
	repo := t.TempDir()
	pongs := strings.NewReplacer("Ping", "Pong", "pings", "pongs", "pingmsg", "pongmsg").Replace(minimal)
	writeFile(t, filepath.Join(repo, "svc", "ping.lily.yaml"), minimal)
	writeFile(t, filepath.Join(repo, "svc", "pong.lily.yaml"), pongs)
	writeFile(t, filepath.Join(repo, "other", "ping.lily.yaml"), minimal)
	commitRepo(t, repo)
	git(t, repo, "rm", "-q", "svc/ping.lily.yaml", "other/ping.lily.yaml")

	dir := filepath.Join(repo, "svc")
	code, stdout, stderr := lilygen(t, dir, "breaking", "--against", "main", "pong.lily.yaml")
	if code != exitFindings || !strings.Contains(stdout, `ping.lily.yaml:1:1: queue "pings" is no longer consumed`) || strings.Contains(stdout, "other") ||
		!strings.Contains(stderr, "lilygen: ping.lily.yaml: gone from the working tree since main, and no schema named is compared with main:svc/ping.lily.yaml") ||
		!strings.Contains(stderr, "(and 1 schema gone)") {
		t.Errorf("deleted below: exit %d\n%s%s", code, stdout, stderr)
	}
	git(t, repo, "checkout", "-q", "main", "--", ".")
	if code, stdout, stderr := lilygen(t, dir, "breaking", "--against", "main", "pong.lily.yaml"); code != exitOK || stdout != "" || !strings.Contains(stderr, "(and 1 schema not named, compared)") {
		t.Errorf("kept, not named: exit %d\n%s%s", code, stdout, stderr)
	}
	// Kept without its package (included by none here), it is a root
	// schema no longer, which the CI job does not name: gone as one.
	demoted := strings.Replace(minimal, "package: pingmsg\n", "", 1)
	writeFile(t, filepath.Join(dir, "ping.lily.yaml"), demoted)
	code, stdout, stderr = lilygen(t, dir, "breaking", "--against", "main", "pong.lily.yaml")
	if code != exitFindings || !strings.Contains(stdout, `ping.lily.yaml:1:1: queue "pings" is no longer consumed`) ||
		!strings.Contains(stderr, "lilygen: ping.lily.yaml: a root schema no longer (it has no package: another schema includes it, or none does) since main, and no schema named is compared with main:svc/ping.lily.yaml") {
		t.Errorf("kept without its package: exit %d\n%s%s", code, stdout, stderr)
	}
	outside := t.TempDir()
	if code, _, stderr := lilygen(t, outside, "breaking", "--against", "main", filepath.Join(dir, "pong.lily.yaml")); code != exitUsage || !strings.Contains(stderr, "which is in no git work tree") {
		t.Errorf("run outside the repository: exit %d\n%s", code, stderr)
	}
}

// TestBreakingAgainstAFileNamedLikeTheRef refuses an --against that names
// both a file of the working tree and a git revision: a pull request could
// otherwise add a file at origin/main, its own schema, and be compared
// with that instead of the base branch. ./origin/main names the file, a
// full ref the revision.
func TestBreakingAgainstAFileNamedLikeTheRef(t *testing.T) {
	repo := t.TempDir()
	file := filepath.Join(repo, "ping.lily.yaml")
	writeFile(t, file, minimal)
	commitRepo(t, repo)
	git(t, repo, "update-ref", "refs/remotes/origin/main", "HEAD")
	narrowed := strings.Replace(minimal, "required: true}", "required: true, max_length: 10}", 1)
	writeFile(t, file, narrowed)
	writeFile(t, filepath.Join(repo, "origin", "main"), narrowed)

	for _, cmd := range []string{"breaking", "doc"} {
		code, stdout, stderr := lilygen(t, repo, cmd, "--against", "origin/main", "ping.lily.yaml")
		if want := "lilygen " + cmd + ": --against origin/main names both the file origin/main and the git revision refs/remotes/origin/main: write ./origin/main for the file, or refs/remotes/origin/main for the revision\n"; code != exitUsage || stdout != "" || stderr != want {
			t.Errorf("%s, both: exit %d, want %d and %s%s%s", cmd, code, exitUsage, want, stdout, stderr)
		}
	}
	if code, stdout, stderr := lilygen(t, repo, "breaking", "--against", "./origin/main", "ping.lily.yaml"); code != exitOK || stdout != "" || !strings.Contains(stderr, "0 breaking changes against ./origin/main") {
		t.Errorf("./origin/main, the file: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, stdout, stderr := lilygen(t, repo, "breaking", "--against", "refs/remotes/origin/main", "ping.lily.yaml"); code != exitFindings || !strings.Contains(stdout, "[BOUND-NARROWED]") {
		t.Errorf("refs/remotes/origin/main, the revision: exit %d\n%s%s", code, stdout, stderr)
	}
	if err := os.RemoveAll(filepath.Join(repo, "origin")); err != nil {
		t.Fatal(err)
	}
	if code, stdout, stderr := lilygen(t, repo, "breaking", "--against", "origin/main", "ping.lily.yaml"); code != exitFindings || !strings.Contains(stdout, "[BOUND-NARROWED]") {
		t.Errorf("origin/main, a revision alone: exit %d\n%s%s", code, stdout, stderr)
	}
}

// TestBreakingComparesRootSchemasNotNamed compares a root schema at the ref
// that the working tree still has, but the run does not name (the CI job's
// git grep '^package:' misses a quoted package key), as if named; and one
// replaced by a symbolic link to a schema named as gone: what the schema
// named holds now is compared there, the rest reported removed.
func TestBreakingComparesRootSchemasNotNamed(t *testing.T) {
	repo := t.TempDir()
	pongs := strings.NewReplacer("Ping", "Pong", "pings", "pongs", "pingmsg", "pongmsg").Replace(minimal)
	writeFile(t, filepath.Join(repo, "ping.lily.yaml"), minimal)
	writeFile(t, filepath.Join(repo, "pong.lily.yaml"), pongs)
	commitRepo(t, repo)

	quoted := strings.NewReplacer("package: pingmsg", `"package": pingmsg`, "required: true}", "required: true, max_length: 10}").Replace(minimal)
	writeFile(t, filepath.Join(repo, "ping.lily.yaml"), quoted)
	code, stdout, stderr := lilygen(t, repo, "breaking", "--against", "main", "pong.lily.yaml")
	if code != exitFindings || !strings.Contains(stdout, "ping.lily.yaml:9:11: Ping.v1.id narrows its bounds from none to ..10 characters") ||
		!strings.Contains(stderr, "lilygen: ping.lily.yaml: a root schema at main and now, but not named: compared with main:ping.lily.yaml as if named") ||
		!strings.Contains(stderr, "(and 1 schema not named, compared)") {
		t.Errorf("a quoted package key: exit %d\n%s%s", code, stdout, stderr)
	}

	// pong.lily.yaml now holds Ping and its queue: the link's content.
	both := strings.NewReplacer(
		"messages:\n", "messages:\n  Ping:\n    versions:\n      1:\n        fields:\n          id: {type: string, required: true}\n",
		"queues:\n", "queues:\n  pings:\n    consumes:\n      - message: Ping\n").Replace(pongs)
	writeFile(t, filepath.Join(repo, "pong.lily.yaml"), both)
	if err := os.Remove(filepath.Join(repo, "ping.lily.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("pong.lily.yaml", filepath.Join(repo, "ping.lily.yaml")); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = lilygen(t, repo, "breaking", "--against", "main", "pong.lily.yaml")
	if code != exitOK || stdout != "" ||
		!strings.Contains(stderr, "lilygen: ping.lily.yaml: a symbolic link now, or below one, since main, and no schema named is compared with main:ping.lily.yaml") ||
		!strings.Contains(stderr, `lilygen: queue "pings" moved from main:ping.lily.yaml to pong.lily.yaml`) ||
		!strings.Contains(stderr, "(and 1 schema gone)") {
		t.Errorf("a link to a schema named, which holds all it did: exit %d\n%s%s", code, stdout, stderr)
	}
	writeFile(t, filepath.Join(repo, "pong.lily.yaml"), pongs)
	code, stdout, stderr = lilygen(t, repo, "breaking", "--against", "main", "pong.lily.yaml")
	if code != exitFindings || !strings.Contains(stdout, `ping.lily.yaml:1:1: queue "pings" is no longer consumed`) || !strings.Contains(stdout, "[MESSAGE-REMOVED]") {
		t.Errorf("a link to a schema named, which holds none of it: exit %d\n%s%s", code, stdout, stderr)
	}
}

// TestOutputForgesNoWorkflowCommand moves a queue whose name is a legacy
// workflow command to another schema and changes it: no line lilygen prints,
// in any format and of any command (a review page and an AsyncAPI document
// among them), on stdout or stderr, holds ##[ or starts with :: (after
// whitespace), which the GitHub Actions runner would read as a command, but
// the annotations of github-actions, whose messages are escaped as text is
// all the same.
func TestOutputForgesNoWorkflowCommand(t *testing.T) {
	const name = "##[stop-commands]tok"
	schemaOf := func(pkg, queue, typ string) string {
		s := strings.NewReplacer("pingmsg", pkg, "output: out", "output: "+pkg, "  pings:\n", "  pings:\n    type: classic\n").Replace(minimal)
		if queue != "" {
			s += fmt.Sprintf("  %q:\n    type: %s\n    consumes:\n      - message: Ping\n", queue, typ)
		}
		return s
	}
	repo := t.TempDir()
	writeFile(t, filepath.Join(repo, "a.lily.yaml"), schemaOf("amsg", name, "classic"))
	writeFile(t, filepath.Join(repo, "b.lily.yaml"), schemaOf("bmsg", "", ""))
	commitRepo(t, repo)
	writeFile(t, filepath.Join(repo, "a.lily.yaml"), schemaOf("amsg", "", ""))
	writeFile(t, filepath.Join(repo, "b.lily.yaml"), schemaOf("bmsg", name, "quorum"))

	check := func(args []string, want string) {
		t.Helper()
		code, stdout, stderr := lilygen(t, repo, args...)
		if !strings.Contains(stdout+stderr, want) {
			t.Errorf("%s: exit %d, no %q in\n%s%s", args, code, want, stdout, stderr)
		}
		own := slices.Contains(args, "--error-format=github-actions")
		for out, text := range map[string]string{"stdout": stdout, "stderr": stderr} {
			for _, l := range strings.Split(text, "\n") {
				v2 := strings.HasPrefix(strings.TrimLeftFunc(l, unicode.IsSpace), "::")
				if own && out == "stdout" && regexp.MustCompile(`^::(error|warning|notice) file=`).MatchString(l) {
					// v2, which the runner reads first; its properties
					// escape each colon, so the next :: starts the message.
					if _, msg, _ := strings.Cut(l[2:], "::"); strings.Contains(msg, "##[") {
						t.Errorf("%s: an annotation's message holds ##[: %s", args, l)
					}
					continue
				}
				if v2 || strings.Contains(l, "##[") {
					t.Errorf("%s: %s line read as a workflow command: %s", args, out, l)
				}
			}
		}
	}
	for _, format := range []string{"text", "json", "github-actions"} {
		check([]string{"breaking", "--error-format=" + format, "--against", "main", "a.lily.yaml", "b.lily.yaml"}, `lilygen: queue "##\[stop-commands]tok" moved from main:a.lily.yaml`)
	}
	check([]string{"breaking", "--against", "main", "a.lily.yaml", "b.lily.yaml"}, `--allow QUEUE-TYPE-CHANGED@##\[stop-commands]tok`)
	check([]string{"breaking", "--error-format=json", "--against", "main", "a.lily.yaml", "b.lily.yaml"}, `##\u005bstop-commands]tok`)
	check([]string{"topology", "--rabbitmq", "4", "b.lily.yaml"}, `"name": "##\u005bstop-commands]tok"`)
	check([]string{"doc", "b.lily.yaml"}, "### `##\\[stop-commands]tok`")
	check([]string{"doc", "--against", "main", "a.lily.yaml", "b.lily.yaml"}, "### `##\\[stop-commands]tok`")
	check([]string{"asyncapi", "b.lily.yaml"}, `address: "##\x5bstop-commands]tok"`)
	check([]string{"lint", "b.lily.yaml"}, "")
	check([]string{"check", "b.lily.yaml"}, "")
	// A schema error, a file and a flag named like a command.
	writeFile(t, filepath.Join(repo, "::warning::c.lily.yaml"), "version: 1\npackage: cmsg\n\"##[error]y\": 1\n")
	check([]string{"lint", "::warning::c.lily.yaml"}, `\::warning::c.lily.yaml:3:1: unknown key "##\[error]y"`)
	check([]string{"lint", "--error-format=github-actions", "::warning::c.lily.yaml"}, `::unknown key "##\[error]y"`)
	check([]string{"lint", "##[stop-commands]c.lily.yaml"}, `##\[stop-commands]c.lily.yaml`)
	check([]string{"lint", "-##[stop-commands]c", "b.lily.yaml"}, `-##\[stop-commands]c`)
	check([]string{"##[stop-commands]c"}, `unknown command "##\[stop-commands]c"`)
}

// TestMachineFormatsShowTheSchemaAsWritten changes a default to one that
// writes, after a newline, the lines of a finding's annotation (short
// enough to be quoted whole): in
// github-actions, whose %0A the pull request shows as a line break, it must
// read as the default it is, escaped as text escapes it, and quoted; in json,
// the message keeps its value, but no character a terminal or the Actions
// log acts on is printed as itself.
func TestMachineFormatsShowTheSchemaAsWritten(t *testing.T) {
	dir := t.TempDir()
	withDefault := func(def string) string {
		return strings.Replace(minimal, "required: true}", "required: true}\n          s: {type: string, default: "+def+"}\n          e: {type: enum, values: [a, "+def+"]}", 1)
	}
	writeFile(t, filepath.Join(dir, "old.lily.yaml"), withDefault(`"x"`))
	forged := `"x\nmigration: ok\nacknowledged by: me\e\u202e"`
	writeFile(t, filepath.Join(dir, "s.lily.yaml"), withDefault(forged))
	const value = "x\nmigration: ok\nacknowledged by: me\x1b\u202e"
	const shown = `"x\nmigration: ok\nacknowledged by: me\x1b\u202e"`

	code, stdout, stderr := lilygen(t, dir, "breaking", "--error-format=github-actions", "--against", "old.lily.yaml", "s.lily.yaml")
	if want := "::error file=s.lily.yaml,line=10,col=11,title=DEFAULT-CHANGED::INFLIGHT: Ping.v1.s changes its default from \"x\" to " + shown + ": messages already queued without it read differently%0Amigration: keep the default"; code != exitFindings || !strings.Contains(stdout, want) {
		t.Errorf("github-actions: exit %d, want %s…\n%s%s", code, want, stdout, stderr)
	}
	if strings.ContainsAny(stdout, "\x1b\u202e") || strings.Contains(stdout, "%0Amigration: ok%0A") {
		t.Errorf("github-actions prints the default as itself:\n%s", stdout)
	}

	code, stdout, stderr = lilygen(t, dir, "breaking", "--error-format=json", "--against", "old.lily.yaml", "s.lily.yaml")
	if code != exitFindings || strings.ContainsFunc(stdout, func(r rune) bool { return r != '\n' && !unicode.IsPrint(r) }) {
		t.Errorf("json: exit %d, a character not printable printed as itself:\n%q%s", code, stdout, stderr)
	}
	var found bool
	for _, l := range strings.Split(strings.TrimSpace(stdout), "\n") {
		var d diag
		if err := json.Unmarshal([]byte(l), &d); err != nil {
			t.Fatalf("json: %v: %s", err, l)
		}
		found = found || d.Rule == rules.DefaultChanged.ID && strings.Contains(d.Message, strconv.Quote(value))
	}
	if !found {
		t.Errorf("json: no DEFAULT-CHANGED quoting the default's value:\n%s", stdout)
	}
}

// fullWriter fails every write, as stdout redirected to /dev/full does.
type fullWriter struct{}

func (fullWriter) Write([]byte) (int, error) { return 0, errors.New("no space left on device") }

// A command whose output is the point of it fails when stdout cannot take
// that output, as doc does: a pipeline or a redirection that lost the page,
// document or definitions must not go on as if it had them.
func TestOutputThatCannotBeWrittenFails(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "ping.lily.yaml"), minimal)
	t.Chdir(dir)
	for _, args := range [][]string{
		{"doc", "ping.lily.yaml"},
		{"asyncapi", "ping.lily.yaml"},
		{"topology", "ping.lily.yaml"},
	} {
		var stderr strings.Builder
		code := run(args, fullWriter{}, &stderr)
		if want := "lilygen " + args[0] + ": no space left on device\n"; code != exitUsage || stderr.String() != want {
			t.Errorf("%s to a full stdout: exit %d, want %d and %s%s", args, code, exitUsage, want, &stderr)
		}
	}
}
