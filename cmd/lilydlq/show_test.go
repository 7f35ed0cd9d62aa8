package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestShow: show finds a copy by its id and prints its properties, every
// header (nested ones too) and its body, sanitized and bounded, and leaves
// the DLQ as it was.
func TestShow(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	dlq := b.queue("dlq", nil)
	at := time.Now().Add(-time.Minute)
	text := lilyCopy("text-1", "order.placed", "permanent failure: no such sku", "permanent", "orders", 2, at)
	text.Headers["nested"] = amqp.Table{"list": []any{int32(7), "a\x1b[31mb"}}
	text.Body = []byte("{\"note\": \"café\"}\nline two")
	bin := lilyCopy("bin-1", "order.\x1b[1mbold", "poison: body is not JSON", "poison", "orders", 1, at)
	bin.Body = append([]byte{0x00, 0x1b, '[', '2', 'J', 0xff}, make([]byte, 5000)...)
	b.publish(dlq, lilyCopy("other", "x", "permanent failure", "permanent", "orders", 1, at), text, bin)

	r := b.lilydlq("show", dlq, "-id", "text-1")
	if r.code != exitOK {
		t.Fatalf("show: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{
		"reason:        permanent failure: no such sku", "kind:          permanent", "source queue:  orders",
		"message_id:       text-1", "correlation_id:   corr-text-1", "content_type:     application/json",
		"x-lily-failure-attempt: 2 (int64)", "x-user-header: kept (string)",
		"nested: (table, 1)", "list: (array, 2)", "[0] 7 (int32)", `[1] a\x1b[31mb (string)`,
		"body (26 bytes)\n  {\"note\": \"café\"}\n  line two\n",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("show lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "other") {
		t.Errorf("show printed another copy:\n%s", r.stdout)
	}

	// Each command reads only once the last one's copies are back.
	b.assertCounts(dlq, 3)
	r = b.lilydlq("show", dlq, "-id", "bin-1", "-body", "64")
	if r.code != exitOK {
		t.Fatalf("show: exit %d\n%s", r.code, r.stderr)
	}
	for _, c := range []byte{0x1b, 0x00, 0xff} {
		if strings.IndexByte(r.stdout, c) >= 0 {
			t.Errorf("show printed the raw byte %#x:\n%q", c, r.stdout)
		}
	}
	for _, want := range []string{`order.\x1b[1mbold`, "body (5006 bytes, the first 64 shown)\n  00000000  00 1b 5b 32 4a ff 00 00"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("show lacks %q:\n%s", want, r.stdout)
		}
	}

	b.assertCounts(dlq, 3)
	r = b.lilydlq("show", dlq, "-id", "missing")
	if r.code != exitFailure || !strings.Contains(r.stderr, "no copy with id missing in "+dlq+" (3 copies read)") {
		t.Errorf("show of a missing id: exit %d, %q", r.code, r.stderr)
	}
	b.assertCounts(dlq, 3)
	if got := ids(b.take(dlq)); strings.Join(got, " ") != "other text-1 bin-1" {
		t.Errorf("DLQ after show: %v", got)
	}
}

// TestShowBodyCannotForgeLines: a text body whose lines read as show's own
// (a "copy 2" block with its facts) is printed with every line indented, so
// that each line at the margin is show's: a body cannot pass for another
// copy. A hex dump is indented alike.
func TestShowBodyCannotForgeLines(t *testing.T) {
	t.Parallel()
	forged := "{}\ncopy 2\n  reason: handled: nothing to see\n  kind: retryable\n  source queue: orders\n\nproperties"
	for _, body := range []string{forged, forged + "\n", forged + "\x00"} {
		d := &amqp.Delivery{MessageId: "m-1", Body: []byte(body)}
		var out strings.Builder
		if err := printCopy(&out, d, factsOf(d, ""), 1, 4096); err != nil {
			t.Fatal(err)
		}
		var margin []string
		for line := range strings.Lines(out.String()) {
			if !strings.HasPrefix(line, " ") {
				margin = append(margin, strings.TrimSuffix(line, "\n"))
			}
		}
		want := []string{"copy 1", "properties", "headers (0)", fmt.Sprintf("body (%d bytes)", len(body))}
		if !slices.Equal(margin, want) {
			t.Errorf("show of body %q: lines at the margin %q, want %q; printed:\n%s", body, margin, want, out.String())
		}
	}
}

// TestShowMissingBesideAnotherConsumer: a copy another consumer holds is not
// read, so show, not finding its id, says only that none of the copies read
// carries it (before: "no copy with id held in <dlq>", which it may hold).
func TestShowMissingBesideAnotherConsumer(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	dlq := b.queue("dlq", nil)
	b.publish(dlq, lilyCopy("held", "t", "permanent failure", "permanent", "src", 1, time.Now()),
		lilyCopy("ready", "t", "permanent failure", "permanent", "src", 1, time.Now()))
	if d, other := b.holdHead(dlq); d.MessageId != "held" {
		t.Fatalf("the other reader holds %q", d.MessageId)
	} else {
		defer other.Close()
	}
	r := b.lilydlq("show", "-id", "held", dlq)
	if r.code != exitFailure || !strings.Contains(r.stderr, "lilydlq show: no copy with id held among the copies read of "+dlq+" (1 copies read)") {
		t.Errorf("show beside another consumer: exit %d, want %d\n%s", r.code, exitFailure, r.stderr)
	}
}
