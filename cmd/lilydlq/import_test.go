package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/envelope"
)

// TestImportRoundTrip: export, purge, import the file back, export again:
// the two exports are the same, but for what import says it leaves behind
// (x-lily-handoff-id, which the publisher writes anew, and CC).
func TestImportRoundTrip(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	dlq, other := b.queue("dlq", nil), b.queue("other", nil)
	at := time.Date(2024, 5, 1, 12, 30, 0, 0, time.UTC)
	first, second := exportCase(at)
	third := lilyCopy("exp-3", "order.shipped", "retryable failure on attempt 3 of 3: timeout", "retryable", "orders", 3, at)
	third.DeliveryMode = amqp.Transient
	third.Headers["h-uint16"] = uint16(65000)
	third.Headers["h-uint32"] = uint32(4000000000)
	third.Headers["h-int64"] = int64(math.MinInt64)
	third.Headers["h-float32"] = float32(1.25)
	third.Headers["h-empty-bytes"] = []byte{}
	third.Headers["h-empty-array"] = []any{}
	third.Headers["h-array"] = []any{amqp.Table{"deep": []any{uint8(7), nil}}, "\x1b[31m"}
	third.Headers["CC"] = []any{other}
	third.Body = nil
	b.publish(dlq, first, second, third)
	if got := b.take(other); len(got) != 1 {
		t.Fatalf("%s holds %d, want the copy its CC sent", other, len(got))
	}

	dir := t.TempDir()
	before, after := filepath.Join(dir, "before.jsonl"), filepath.Join(dir, "after.jsonl")
	b.exportAndEmpty(dlq, before, 3)
	r := b.lilydlq("import", "-to", dlq, before)
	if r.code != exitOK || !strings.Contains(r.stdout, "imported line 1 of 3, exp-1 (order.placed) -> "+dlq) ||
		!strings.Contains(r.stdout, before+": imported 3 of 3 lines to "+dlq+" (0 skipped)") {
		t.Fatalf("import: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	b.assertCounts(dlq, 3)
	b.assertCounts(other, 0)
	if r := b.lilydlq("export", dlq, "-o", after); r.code != exitOK {
		t.Fatalf("export after the import: exit %d\n%s", r.code, r.stderr)
	}
	was, is := jsonLines(t, before), jsonLines(t, after)
	if len(was) != 3 || len(is) != 3 {
		t.Fatalf("exported %d lines, then %d; want 3 and 3", len(was), len(is))
	}
	for i := range was {
		for _, x := range []map[string]any{was[i], is[i]} {
			h := x["headers"].(map[string]any)
			if id, _ := h[envelope.HeaderHandoffID].(map[string]any); id == nil {
				t.Errorf("line %d: no %s", i+1, envelope.HeaderHandoffID)
			}
			delete(h, envelope.HeaderHandoffID)
		}
		delete(was[i]["headers"].(map[string]any), "CC")
		if diff := cmp.Diff(was[i], is[i]); diff != "" {
			t.Errorf("line %d, exported, purged, imported and exported again (-before +after):\n%s", i+1, diff)
		}
	}
}

// TestImportStops: a file with a line that is not an export's, a
// quarantined copy's, one the publisher would refuse or one whose x-death
// the broker's dead-lettering cannot read, is refused before anything is
// published; an import
// stops at the first line the broker does not take and says where it
// stands; -skip goes on from there.
func TestImportStops(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	dlq := b.queue("dlq", nil)
	var msgs []amqp.Publishing
	for _, id := range []string{"i-1", "i-2", "i-3"} {
		msgs = append(msgs, lilyCopy(id, "t", "permanent failure", "permanent", "src", 1, time.Now()))
	}
	b.publish(dlq, msgs...)
	dir := t.TempDir()
	file := filepath.Join(dir, "dlq.jsonl")
	b.exportAndEmpty(dlq, file, 3)
	lines := jsonLines(t, file)

	bad := filepath.Join(dir, "bad.jsonl")
	write(t, bad, lines[0], map[string]any{"queue": dlq, "something": "else"}, lines[2])
	mode3 := filepath.Join(dir, "mode3.jsonl")
	lines[1]["properties"].(map[string]any)["delivery_mode"] = 3
	write(t, mode3, lines[0], lines[1], lines[2])
	lines[1]["properties"].(map[string]any)["delivery_mode"] = 2
	// A hand-edited x-death that would crash the broker's dead-lettering.
	xdeath := filepath.Join(dir, "x-death.jsonl")
	headers := lines[1]["headers"].(map[string]any)
	headers["x-death"] = map[string]any{"type": "array", "value": []any{map[string]any{"type": "string", "value": "x"}}}
	write(t, xdeath, lines[0], lines[1], lines[2])
	delete(headers, "x-death")
	quarantined := filepath.Join(dir, "quarantined.jsonl")
	lines[1]["facts"].(map[string]any)["quarantined"] = "header tables or arrays nested deeper than 32"
	write(t, quarantined, lines[0], lines[1], lines[2])
	for f, want := range map[string]string{
		bad:         bad + `, line 2: not a line of an export: json: unknown field "something"; nothing was imported`,
		mode3:       mode3 + ", line 2: not publishable: delivery_mode: 3, not 1 (transient), 2 (persistent) or 0 (none)",
		xdeath:      xdeath + ", line 2: not publishable: headers: x-death: entry 0 is a string, not a table: RabbitMQ's dead-lettering cannot read it, and would crash the queue that dead-letters the message",
		quarantined: quarantined + ", line 2: a quarantined copy (header tables or arrays nested deeper than 32): its headers were not exported",
	} {
		if r := b.lilydlq("import", "-to", dlq, f); r.code != exitFailure || !strings.Contains(r.stderr, want) || r.stdout != "" {
			t.Errorf("import %s: exit %d, want %d and %q\n%s%s", f, r.code, exitFailure, want, r.stdout, r.stderr)
		}
	}
	b.assertCounts(dlq, 0)

	gone := dlq + ".gone"
	r := b.lilydlq("import", "-to", gone, file)
	if r.code != exitFailure || !strings.Contains(r.stderr, "line 1 of 3, i-1 (t) -> "+gone+": lily: returned") ||
		!strings.Contains(r.stderr, "it is not in "+gone+": the lines before it are, it and those after it were not imported; run again with -skip 0") {
		t.Errorf("import to a missing queue: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	r = b.lilydlq("import", "-to", dlq, "-skip", "1", file)
	if r.code != exitOK || !strings.Contains(r.stdout, file+": imported 2 of 3 lines to "+dlq+" (1 skipped)") {
		t.Errorf("import -skip 1: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	b.assertCounts(dlq, 2)
	if got := ids(b.take(dlq)); !slices.Equal(got, []string{"i-2", "i-3"}) {
		t.Errorf("the DLQ holds %v", got)
	}
	if r := b.lilydlq("import", "-to", dlq, "-skip", "4", file); r.code != exitFailure || !strings.Contains(r.stderr, "-skip 4: "+file+" has 3 lines") {
		t.Errorf("import -skip 4: exit %d\n%s", r.code, r.stderr)
	}
}

// TestImportUnconfirmed: a line whose confirm does not come within -step
// ends the import, which says the line may be in the queue and how to go on
// either way. The proxy holds the confirm 8 s; -step 3s, not less, so that
// each step before the publish (dial, channel, confirm mode) fits in one on
// a loaded machine.
func TestImportUnconfirmed(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	dlq := b.queue("dlq", nil)
	b.publish(dlq, lilyCopy("u-1", "t", "permanent failure", "permanent", "src", 1, time.Now()), lilyCopy("u-2", "t", "permanent failure", "permanent", "src", 1, time.Now()))
	file := filepath.Join(t.TempDir(), "dlq.jsonl")
	b.exportAndEmpty(dlq, file, 2)
	slow := newSlowLink(t, b)
	slow.holdAfterPublish(8 * time.Second)
	r := slow.lilydlq("import", "-to", dlq, "-step", "3s", file)
	for _, want := range []string{"line 1 of 2, u-1 (t) -> " + dlq + ": lily: unconfirmed", "it may be in " + dlq + " or not", "run again with -skip 1 if it is there, -skip 0 if not", "raise -step (3s)"} {
		if r.code != exitFailure || !strings.Contains(r.stderr, want) {
			t.Errorf("import: exit %d, want %d, saying %q\n%s%s", r.code, exitFailure, want, r.stdout, r.stderr)
		}
	}
	// The broker had it: the line stopped at is there, the next is not.
	b.assertCounts(dlq, 1)
	if got := ids(b.take(dlq)); !slices.Equal(got, []string{"u-1"}) {
		t.Errorf("the DLQ holds %v", got)
	}
}

// TestImportCheckStops: an interrupt during the check of a regular file
// ends it before its next line, where the check had read a large file to its
// end first; nothing is imported, exit 1.
func TestImportCheckStops(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "large.jsonl")
	const lines = 200_000
	line := []byte(`{"queue":"q.dlq","properties":{"message_id":"m"},"body_base64":"AA=="}` + "\n")
	if err := os.WriteFile(path, bytes.Repeat(line, lines), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancelCause(t.Context())
	checked := 0
	_, _, err := openChecked(ctx, path, func(int, amqp.Publishing) error {
		if checked++; checked == 10 {
			cancel(interrupted("interrupt signal received"))
		}
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "stopped (interrupt signal received) while checking") || checked != 10 {
		t.Errorf("cancelled at line 10 of %d: %d lines checked, %v", lines, checked, err)
	}

	var out, errs bytes.Buffer
	if code := run(ctx, []string{"import", "-to", "q", path, "-url", "amqp://127.0.0.1:1/"}, &out, &errs); code != exitFailure ||
		!strings.Contains(errs.String(), "stopped (interrupt signal received) while checking") || !strings.Contains(errs.String(), "nothing was imported") {
		t.Errorf("import, cancelled: exit %d, stderr %q", code, errs.String())
	}
}

// TestImportUsage: -to is required, and import names a file.
func TestImportUsage(t *testing.T) {
	t.Parallel()
	for want, args := range map[string][]string{
		"-to is required":                                  {"import", "f.jsonl"},
		"name one file":                                    {"import", "-to", "q"},
		"-skip must not be negative":                       {"import", "-to", "q", "-skip", "-1", "f.jsonl"},
		"-step must be positive, at most":                  {"import", "-to", "q", "-step", "0s", "f.jsonl"},
		"-to names a direct reply-to address, not a queue": {"import", "-to", "amq.rabbitmq.reply-to.g1h2AA1yZXBseUA5.8aE0ilzreJ", "f.jsonl"},
		"-to names a re-drive's lock":                      {"import", "-to", "lilydlq.redrive.orders.dlq", "f.jsonl"},
	} {
		var out, errs bytes.Buffer
		if code := run(t.Context(), append(args, "-url", "amqp://127.0.0.1:1/"), &out, &errs); code != exitUsage || !strings.Contains(errs.String(), want) {
			t.Errorf("%v: exit %d, %q; want %d, %q", args, code, errs.String(), exitUsage, want)
		}
	}
}

// jsonLines reads a file of JSON lines.
func jsonLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var lines []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("%s, line %d: %v", path, len(lines)+1, err)
		}
		lines = append(lines, m)
	}
	return lines
}

// write writes each value as a JSON line of path.
func write(t *testing.T, path string, lines ...map[string]any) {
	t.Helper()
	var buf bytes.Buffer
	for _, l := range lines {
		if err := json.NewEncoder(&buf).Encode(l); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestImportOutputFailsAtTheSummary: an import whose stdout fails at its
// summary, once every line is in the queue, exits 1 and writes the summary
// to stderr instead, with why, once (before: exit 0, stderr empty).
func TestImportOutputFailsAtTheSummary(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	dlq := b.queue("dlq", nil)
	b.publish(dlq, lilyCopy("m-1", "t", "permanent failure", "permanent", "src", 1, time.Now()), lilyCopy("m-2", "t", "permanent failure", "permanent", "src", 1, time.Now()))
	file := filepath.Join(t.TempDir(), "dlq.jsonl")
	b.exportAndEmpty(dlq, file, 2)
	written := 0 // the lines imported, before the summary
	for i, id := range []string{"m-1", "m-2"} {
		written += len(fmt.Sprintf("imported line %d of 2, %s (t) -> %s\n", i+1, id, dlq))
	}
	r := b.lilydlqTo(&failingWriter{left: written, err: syscall.EPIPE}, "import", "-to", dlq, file)
	if r.code != exitFailure || !strings.Contains(r.stderr, "lilydlq import: "+file+": imported 2 of 2 lines to "+dlq) ||
		strings.Count(r.stderr, "lilydlq import: its output was closed (broken pipe)") != 1 {
		t.Errorf("import with its output closed at the summary: exit %d, stderr:\n%s", r.code, r.stderr)
	}
	b.assertCounts(dlq, 2)
}

// exportAndEmpty exports the n copies of dlq to file, then purges them,
// and wants the DLQ empty: an import's file, and its queue to fill again.
func (b *broker) exportAndEmpty(dlq, file string, n int) {
	b.t.Helper()
	if r := b.lilydlq("export", dlq, "-o", file); r.code != exitOK {
		b.t.Fatalf("export: exit %d\n%s", r.code, r.stderr)
	}
	if r := b.lilydlq("purge", dlq, "-confirm", dlq, "-expect", strconv.Itoa(n)); r.code != exitOK {
		b.t.Fatalf("purge: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	b.assertCounts(dlq, 0)
}
