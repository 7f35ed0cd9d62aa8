package main

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	amqp "github.com/rabbitmq/amqp091-go"
)

// exportCase is two copies whose properties and headers hold what JSON
// cannot carry as it is, failed at at.
func exportCase(at time.Time) (first, second amqp.Publishing) {
	first = lilyCopy("exp-1", "order.placed", "permanent failure: boom", "permanent", "orders", 3, at)
	first.Priority, first.AppId, first.ReplyTo, first.ContentEncoding = 4, "shop", "replies", "identity"
	first.Headers["h-bool"] = true
	first.Headers["h-int8"] = int8(-8)
	first.Headers["h-uint8"] = uint8(200)
	first.Headers["h-int16"] = int16(-1600)
	first.Headers["h-int32"] = int32(-320000)
	first.Headers["h-float64"] = 2.5
	first.Headers["h-bytes"] = []byte{0, 1, 0xff}
	first.Headers["h-bad-utf8"] = "a\xffb"
	first.Headers["h-time"] = at
	first.Headers["h-void"] = nil
	first.Headers["h-decimal"] = amqp.Decimal{Scale: 2, Value: 12345}
	first.Headers["h-table"] = amqp.Table{"k": "v", "n": []any{int64(1), "two"}}
	second = lilyCopy("exp-\xff2", "order.paid", "poison: bad", "poison", "orders", 1, at)
	second.Body = []byte{0xde, 0xad, 0xbe, 0xef}
	// A producer that writes milliseconds where AMQP has seconds: years
	// past 9999, which RFC 3339 cannot write. And header names that are not
	// UTF-8, which a JSON object's keys cannot hold apart.
	millis := time.Unix(at.UnixMilli(), 0)
	second.Timestamp = millis
	second.Headers["h-millis"] = millis
	second.Headers["k\xff"] = "ff"
	second.Headers["k\xfe"] = "fe"
	second.Headers["h-nested"] = amqp.Table{"n\xff": int32(1)}
	return first, second
}

// TestExportRoundTrip: export writes one JSON object per copy, in order,
// from which each copy's properties, typed headers and body come back.
func TestExportRoundTrip(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	dlq := b.queue("dlq", nil)
	at := time.Date(2024, 5, 1, 12, 30, 0, 0, time.UTC)
	first, second := exportCase(at)
	millis := time.Unix(at.UnixMilli(), 0)
	b.publish(dlq, first, second)

	out := filepath.Join(t.TempDir(), "dlq.jsonl")
	r := b.lilydlq("export", dlq, "-o", out)
	if r.code != exitOK {
		t.Fatalf("export: exit %d\n%s", r.code, r.stderr)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	lines := jsonLines(t, out)
	if len(lines) != 2 {
		t.Fatalf("export wrote %d lines, want 2:\n%s", len(lines), data)
	}

	one := lines[0]
	wantProps := map[string]any{
		"message_id": "exp-1", "type": "order.placed", "content_type": "application/json", "content_encoding": "identity",
		"correlation_id": "corr-exp-1", "reply_to": "replies", "app_id": "shop", "priority": 4.0, "delivery_mode": 2.0,
		"timestamp": "2024-05-01T12:30:00Z", "timestamp_unix": float64(at.Unix()),
	}
	if diff := cmp.Diff(wantProps, one["properties"]); diff != "" {
		t.Errorf("properties (-want +got):\n%s", diff)
	}
	h := one["headers"].(map[string]any)
	for name, want := range map[string]any{
		"h-bool":                 map[string]any{"type": "bool", "value": true},
		"h-int8":                 map[string]any{"type": "int8", "value": -8.0},
		"h-uint8":                map[string]any{"type": "uint8", "value": 200.0},
		"h-int16":                map[string]any{"type": "int16", "value": -1600.0},
		"h-int32":                map[string]any{"type": "int32", "value": -320000.0},
		"h-float64":              map[string]any{"type": "float64", "value": 2.5},
		"h-bytes":                map[string]any{"type": "bytes", "value": nil, "base64": "AAH/"},
		"h-bad-utf8":             map[string]any{"type": "string", "value": nil, "base64": "Yf9i"},
		"h-time":                 map[string]any{"type": "timestamp", "value": "2024-05-01T12:30:00Z", "unix": float64(at.Unix())},
		"h-void":                 map[string]any{"type": "void", "value": nil},
		"h-decimal":              map[string]any{"type": "decimal", "value": map[string]any{"scale": 2.0, "value": 12345.0}},
		"x-lily-failure-attempt": map[string]any{"type": "int64", "value": 3.0},
		"h-table": map[string]any{"type": "table", "value": map[string]any{
			"k": map[string]any{"type": "string", "value": "v"},
			"n": map[string]any{"type": "array", "value": []any{
				map[string]any{"type": "int64", "value": 1.0}, map[string]any{"type": "string", "value": "two"},
			}},
		}},
	} {
		if diff := cmp.Diff(want, h[name]); diff != "" {
			t.Errorf("header %s (-want +got):\n%s", name, diff)
		}
	}
	if len(h) != len(first.Headers) {
		t.Errorf("%d headers exported, want %d", len(h), len(first.Headers))
	}
	if one["body_base64"] != "eyJpZCI6ImV4cC0xIn0=" || one["body_text"] != `{"id":"exp-1"}` {
		t.Errorf("body: %v / %v", one["body_base64"], one["body_text"])
	}
	facts := one["facts"].(map[string]any)
	if facts["reason"] != "permanent failure: boom" || facts["source_queue"] != "orders" || facts["kind"] != "permanent" {
		t.Errorf("facts: %v", facts)
	}

	two := lines[1]
	if _, ok := two["body_text"]; ok || two["body_base64"] != "3q2+7w==" {
		t.Errorf("binary body: %v / %v", two["body_base64"], two["body_text"])
	}
	raw := two["properties_base64"].(map[string]any)
	if raw["message_id"] != "ZXhwLf8y" || two["properties"].(map[string]any)["message_id"] != nil {
		t.Errorf("a message id not valid UTF-8: properties %v, base64 %v", two["properties"], raw)
	}
	props := two["properties"].(map[string]any)
	if _, ok := props["timestamp"]; ok || props["timestamp_unix"] != float64(millis.Unix()) {
		t.Errorf("a timestamp past year 9999: properties %v, want it as Unix seconds only", props)
	}
	h2 := two["headers"].(map[string]any)
	if diff := cmp.Diff(map[string]any{"type": "timestamp", "value": nil, "unix": float64(millis.Unix())}, h2["h-millis"]); diff != "" {
		t.Errorf("header h-millis (-want +got):\n%s", diff)
	}
	wantRaw := []any{
		map[string]any{"name_base64": "a/4=", "type": "string", "value": "fe"},
		map[string]any{"name_base64": "a/8=", "type": "string", "value": "ff"},
	}
	if diff := cmp.Diff(wantRaw, two["headers_with_base64_names"]); diff != "" {
		t.Errorf("headers named in bytes that are not UTF-8 (-want +got):\n%s", diff)
	}
	wantNested := map[string]any{"type": "table", "value": map[string]any{}, "base64_names": []any{
		map[string]any{"name_base64": "bv8=", "type": "int32", "value": 1.0},
	}}
	if diff := cmp.Diff(wantNested, h2["h-nested"]); diff != "" {
		t.Errorf("header h-nested (-want +got):\n%s", diff)
	}
	if len(h2)+2 != len(second.Headers) {
		t.Errorf("%d headers exported by name, want %d and 2 by bytes", len(h2), len(second.Headers)-2)
	}
	b.assertCounts(dlq, 2)

	// A failed export leaves an earlier one at the same path as it was.
	if r := b.lilydlq("export", dlq+".missing", "-o", out); r.code != exitFailure {
		t.Fatalf("export of a missing queue: exit %d\n%s", r.code, r.stderr)
	}
	if again, err := os.ReadFile(out); err != nil || !bytes.Equal(again, data) {
		t.Errorf("a failed export changed the earlier file (%v): %d bytes, want %d", err, len(again), len(data))
	}
	if leftover, _ := filepath.Glob(out + ".*"); len(leftover) != 0 {
		t.Errorf("a failed export left %v", leftover)
	}
}

// TestReadBesideAnotherConsumerIsNotWhole: a copy another consumer of the
// DLQ hands back during a read goes to the head of the queue, and is read
// in the place of a ready one, so a read that began beside one proves
// nothing whole, though it counts as many as were ready: export and a dry
// run of redrive -all say so and exit 1; redrive -all refuses to begin (it
// runs alone); nothing is lost.
func TestReadBesideAnotherConsumerIsNotWhole(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	dlq, src := b.queue("dlq", nil), b.queue("src", nil)
	b.publish(dlq, lilyCopy("held", "t", "permanent failure", "permanent", src, 1, time.Now()),
		lilyCopy("ready", "t", "permanent failure", "permanent", src, 1, time.Now()))
	d, other := b.holdHead(dlq)
	if d.MessageId != "held" {
		t.Fatalf("the other reader holds %q", d.MessageId)
	}
	r := b.lilydlq("export", dlq)
	if r.code != exitFailure || !strings.Contains(r.stderr, "lilydlq export: incomplete: 1 copies written of the 1 ready when the read began, beside 1 other consumer(s)") {
		t.Errorf("export: exit %d, want %d\n%s", r.code, exitFailure, r.stderr)
	}
	r = b.lilydlq("redrive", dlq, "-all", "-dry-run")
	if r.code != exitFailure || !strings.Contains(r.stderr, "lilydlq redrive: incomplete: 1 of the 1 copies ready when the read began were read, beside 1 other consumer(s)") {
		t.Errorf("redrive -dry-run: exit %d, want %d\n%s%s", r.code, exitFailure, r.stdout, r.stderr)
	}
	r = b.lilydlq("redrive", dlq, "-all")
	if r.code != exitFailure || r.stdout != "" || !strings.Contains(r.stderr, "lilydlq redrive: refusing to redrive beside 1 other consumer(s) of "+dlq) {
		t.Errorf("redrive: exit %d, want %d\n%s%s", r.code, exitFailure, r.stdout, r.stderr)
	}
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}
	b.assertCounts(dlq, 2)
	b.assertCounts(src, 0)
}

// TestExportIncomplete: an export that writes fewer copies than were ready
// when it began says so and exits 1: here a copy expired behind the head
// (counted ready, never delivered), and an export cancelled at once.
func TestExportIncomplete(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	dlq := b.queue("dlq", nil)
	expiring := lilyCopy("expiring", "t", "permanent failure", "permanent", "src", 1, time.Now())
	expiring.Expiration = "1"
	b.publish(dlq, lilyCopy("stays", "t", "permanent failure", "permanent", "src", 1, time.Now()), expiring)

	// Written to a file: the file is not made, and what was written is
	// beside it.
	out := filepath.Join(t.TempDir(), "dlq.jsonl")
	r := b.lilydlq("export", dlq, "-o", out)
	if r.code != exitFailure || !strings.Contains(r.stderr, "lilydlq export: incomplete: 1 copies written of the 2 ready when the read began") ||
		!strings.Contains(r.stderr, "what was written is in "+out+".incomplete") {
		t.Errorf("export: exit %d, want %d\n%s", r.code, exitFailure, r.stderr)
	}
	if _, err := os.Stat(out); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("an incomplete export made %s (%v)", out, err)
	}
	written, err := os.ReadFile(out + ".incomplete")
	if lines := exportLines(t, string(written)); err != nil || len(lines) != 1 || lines[0].Facts.ID != "stays" {
		t.Errorf("export wrote %+v (%v)", lines, err)
	}
	b.assertCounts(dlq, 1)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r = b.lilydlqContext(ctx, "export", dlq)
	if r.code != exitFailure || !strings.Contains(r.stderr, "lilydlq export: incomplete: stopped after 0 of the 1 copies ready when the read began") || r.stdout != "" {
		t.Errorf("a cancelled export: exit %d, want %d\n%s", r.code, exitFailure, r.stderr)
	}
	b.assertCounts(dlq, 1)

	r = b.lilydlq("export", dlq)
	if r.code != exitOK || r.stderr != "lilydlq export: 1 copies written (1 ready when the read began)\n" {
		t.Errorf("a complete export: exit %d, %q", r.code, r.stderr)
	}
}
