package main

import (
	"strings"
	"testing"
	"time"
)

// TestPurge: purge refuses without the queue's name as confirmation, and
// with it deletes every ready copy.
func TestPurge(t *testing.T) {
	b := newBroker(t)
	dlq := b.queue("dlq", nil)
	b.publish(dlq, lilyCopy("p1", "t", "permanent failure", "permanent", "src", 1, time.Now()), lilyCopy("p2", "t", "permanent failure", "permanent", "src", 1, time.Now()))

	for _, args := range [][]string{{"purge", dlq}, {"purge", dlq, "-confirm", dlq + "x"}, {"purge", dlq, "-confirm", ""}} {
		r := b.lilydlq(args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, "refusing to purge "+dlq+" without -confirm "+dlq) {
			t.Errorf("%v: exit %d, %q", args, r.code, r.stderr)
		}
	}
	b.assertCounts(dlq, 2)

	r := b.lilydlq("purge", "-confirm", dlq, dlq)
	if r.code != exitOK || r.stdout != dlq+": purged 2 copies\n" {
		t.Errorf("purge: exit %d, %q %q", r.code, r.stdout, r.stderr)
	}
	b.assertCounts(dlq, 0)

	gone := dlq + ".gone"
	if r := b.lilydlq("purge", gone, "-confirm", gone); r.code != exitFailure || !strings.Contains(r.stderr, "no queue named "+gone) {
		t.Errorf("purge of a missing queue: exit %d, %q", r.code, r.stderr)
	}
}

// TestPurgeExpect: with -expect N purge deletes nothing unless the DLQ holds
// exactly N ready copies: an export's count, checked.
func TestPurgeExpect(t *testing.T) {
	b := newBroker(t)
	dlq := b.queue("dlq", nil)
	b.publish(dlq, lilyCopy("p1", "t", "permanent failure", "permanent", "src", 1, time.Now()), lilyCopy("p2", "t", "permanent failure", "permanent", "src", 1, time.Now()))
	if r := b.lilydlq("export", dlq); r.code != exitOK || !strings.Contains(r.stderr, "2 copies written") {
		t.Fatalf("export: exit %d, %q", r.code, r.stderr)
	}
	b.assertCounts(dlq, 2) // the export's copies are back
	// A copy arrives after the export: it was not exported.
	b.publish(dlq, lilyCopy("p3", "t", "permanent failure", "permanent", "src", 1, time.Now()))
	r := b.lilydlq("purge", dlq, "-confirm", dlq, "-expect", "2")
	if r.code != exitFailure || !strings.Contains(r.stderr, "refusing to purge "+dlq+": it holds 3 ready copies, not the 2 of -expect; nothing purged") || r.stdout != "" {
		t.Errorf("purge -expect 2 of 3: exit %d, %q %q", r.code, r.stdout, r.stderr)
	}
	b.assertCounts(dlq, 3)

	if r := b.lilydlq("purge", dlq, "-confirm", dlq, "-expect", "-1"); r.code != exitUsage || !strings.Contains(r.stderr, "want a count, 0 or more") {
		t.Errorf("purge -expect -1: exit %d, %q", r.code, r.stderr)
	}
	r = b.lilydlq("purge", dlq, "-confirm", dlq, "-expect", "3")
	if r.code != exitOK || r.stdout != dlq+": purged 3 copies\n" {
		t.Errorf("purge -expect 3 of 3: exit %d, %q %q", r.code, r.stdout, r.stderr)
	}
	b.assertCounts(dlq, 0)
}
