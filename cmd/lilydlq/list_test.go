package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lily-mq/lily/wire"
	amqp "github.com/rabbitmq/amqp091-go"
)

// TestListGroupsByReason: list counts the copies of each reason, shows the
// facts of each, and prints hostile strings only sanitized.
func TestListGroupsByReason(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	dlq := b.queue("dlq", nil)
	at := time.Now().Add(-time.Hour)
	var msgs []amqp.Publishing
	for i := range 5 {
		msgs = append(msgs, lilyCopy(fmt.Sprintf("perm-%d", i), "order.placed", "permanent failure: card declined", "permanent", "orders", 1, at))
	}
	for i := range 3 {
		msgs = append(msgs, lilyCopy(fmt.Sprintf("exh-%d", i), "order.paid", "retryable failure on attempt 3 of 3: timeout", "retryable", "payments", 3, at))
	}
	hostile := lilyCopy("evil-\x1b[2J", "order.\x1b[31mred\xff\xfe", "poison: \x1b]0;owned\x07 title", "poison", "orders", 1, at)
	msgs = append(msgs, hostile)
	b.publish(dlq, msgs...)

	r := b.lilydlq("list", dlq)
	if r.code != exitOK {
		t.Fatalf("list: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, c := range []byte{0x1b, 0x07, 0xff, 0xfe} {
		if strings.IndexByte(r.stdout+r.stderr, c) >= 0 {
			t.Errorf("list printed the raw byte %#x:\n%s", c, r.stdout)
		}
	}
	for _, want := range []string{
		"9 copies read (9 ready when the read began), 3 reasons",
		"permanent failure: card declined (5)",
		"retryable failure on attempt 3 of 3: timeout (3)",
		`poison: \x1b]0;owned\x07 title (1)`,
		`evil-\x1b[2J`, `order.\x1b[31mred\xff\xfe`,
		"perm-4", "exh-2", "payments", at.UTC().Truncate(time.Second).Format(time.RFC3339),
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("list output lacks %q:\n%s", want, r.stdout)
		}
	}

	b.assertCounts(dlq, 9) // the first list's copies are back
	r = b.lilydlq("list", dlq, "-json", "-sample", "2")
	if r.code != exitOK {
		t.Fatalf("list -json: exit %d\n%s", r.code, r.stderr)
	}
	var l listing
	if err := json.Unmarshal([]byte(r.stdout), &l); err != nil {
		t.Fatalf("list -json: %v\n%s", err, r.stdout)
	}
	got := map[string]int{}
	for _, g := range l.Groups {
		got[g.Reason] = g.Count
		if len(g.Sample) != min(2, g.Count) {
			t.Errorf("reason %q: %d sampled, want %d", g.Reason, len(g.Sample), min(2, g.Count))
		}
	}
	want := map[string]int{"permanent failure: card declined": 5, "retryable failure on attempt 3 of 3: timeout": 3, `poison: \x1b]0;owned\x07 title`: 1}
	if fmt.Sprint(got) != fmt.Sprint(want) || l.Read != 9 || l.Ready != 9 {
		t.Errorf("list -json: %d read of %d, groups %v; want 9 of 9, %v", l.Read, l.Ready, got, want)
	}
	if g := l.Groups[0]; g.Sample[0].ID != "perm-0" || g.Sample[0].Kind != "permanent" || g.Sample[0].Attempt != "1" || g.Sample[0].Queue != "orders" || g.Sample[0].Version != "2" {
		t.Errorf("first sample: %+v", g.Sample[0])
	}
	b.assertCounts(dlq, 9)
}

// TestListLeavesTheDLQAsItWas: list takes nothing, and the broker puts every
// copy back in its place: on a classic DLQ through more than 32 windows, on
// a quorum DLQ through up to 32, where each read adds one to each copy's
// x-delivery-count.
func TestListLeavesTheDLQAsItWas(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, kind string
		copies     int
		window     string
	}{
		{"classic 43 windows", "classic", 300, "7"},
		{"quorum 1 window", "quorum", 300, "1000"},
		{"quorum 30 windows", "quorum", 300, "10"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newBroker(t)
			var args amqp.Table
			if c.kind == "quorum" {
				args = amqp.Table{"x-queue-type": "quorum"}
			}
			dlq := b.queue("dlq", args)
			var want []string
			var msgs []amqp.Publishing
			for i := range c.copies {
				id := fmt.Sprintf("m-%04d", i)
				want = append(want, id)
				msgs = append(msgs, lilyCopy(id, "t", "permanent failure", "permanent", "src", 1, time.Now()))
			}
			b.publish(dlq, msgs...)

			const reads = 2
			for n := range reads {
				r := b.lilydlq("list", dlq, "-json", "-window", c.window)
				if r.code != exitOK {
					t.Fatalf("list %d: exit %d\n%s", n+1, r.code, r.stderr)
				}
				var l listing
				if err := json.Unmarshal([]byte(r.stdout), &l); err != nil {
					t.Fatal(err)
				}
				if l.Read != c.copies || l.Groups[0].Count != c.copies {
					t.Errorf("list %d: read %d, counted %d; want %d", n+1, l.Read, l.Groups[0].Count, c.copies)
				}
				// The first read saw no count; the second, the first's.
				if wantMax := int64(n); c.kind == "quorum" && l.MaxDeliveryCount != wantMax {
					t.Errorf("list %d: max x-delivery-count %d, want %d", n+1, l.MaxDeliveryCount, wantMax)
				}
				if c.kind == "quorum" && n > 0 && !strings.Contains(r.stderr, "x-delivery-count (up to 2 after this read)") {
					t.Errorf("list %d: no note of the delivery count:\n%s", n+1, r.stderr)
				}
				// Past 32 windows the read warns, of any DLQ: it cannot
				// tell a classic one.
				if warned := strings.Contains(r.stderr, "warning: the read used"); warned != (l.Windows > 32) {
					t.Errorf("list %d: %d windows, warned %t:\n%s", n+1, l.Windows, warned, r.stderr)
				}
				b.assertCounts(dlq, c.copies)
			}
			got := b.take(dlq)
			if !slices.Equal(ids(got), want) {
				t.Errorf("order after %d lists: %v..., want %v...", reads, ids(got)[:10], want[:10])
			}
			for _, d := range got {
				n, ok := wire.HeaderInt(d.Headers[headerDeliveryCount])
				switch {
				case c.kind == "classic" && ok:
					t.Fatalf("%s: x-delivery-count %d on a classic queue", d.MessageId, n)
				case c.kind == "quorum" && n != reads:
					t.Fatalf("%s: x-delivery-count %v, want %d (one per list)", d.MessageId, d.Headers[headerDeliveryCount], reads)
				}
			}
		})
	}
}

// TestListQuorumManyWindowsKeepsEveryCopy: beyond 32 windows a quorum DLQ
// gets every copy back, but not in its order (measured on 3.10.8; the test
// asserts the copies, and logs the order).
func TestListQuorumManyWindowsKeepsEveryCopy(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	dlq := b.queue("dlq", amqp.Table{"x-queue-type": "quorum"})
	var want []string
	var msgs []amqp.Publishing
	for i := range 330 {
		id := fmt.Sprintf("m-%04d", i)
		want = append(want, id)
		msgs = append(msgs, lilyCopy(id, "t", "permanent failure", "permanent", "src", 1, time.Now()))
	}
	b.publish(dlq, msgs...)
	r := b.lilydlq("list", dlq, "-window", "10")
	if r.code != exitOK {
		t.Fatalf("list: exit %d\n%s", r.code, r.stderr)
	}
	if want := "warning: the read used 33 windows of 10 copies: if the DLQ is a quorum queue, it put the copies of more than 32 windows back out of their order (a classic queue keeps it); read a quorum DLQ with -window 11 or more"; !strings.Contains(r.stderr, want) {
		t.Errorf("list of 33 windows: stderr lacks %q:\n%s", want, r.stderr)
	}
	b.assertCounts(dlq, 330)
	got := ids(b.take(dlq))
	t.Logf("33 windows: order kept: %t", slices.Equal(got, want))
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("copies after the list: %d, want the %d published", len(got), len(want))
	}
}

// TestReadersWhoseOutputCloses: list, show and redrive -dry-run whose
// stdout's reader goes (| head) stop quietly, exit 0: they change nothing.
// export says it is incomplete and exits 1: a purge may rely on its count.
// Another write error fails list and a dry run.
func TestReadersWhoseOutputCloses(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	dlq := b.queue("dlq", nil)
	var msgs []amqp.Publishing
	for i := range 30 {
		msgs = append(msgs, lilyCopy(fmt.Sprintf("c-%02d", i%3), "t", fmt.Sprintf("reason %d", i), "permanent", "src", 1, time.Now()))
	}
	b.publish(dlq, msgs...)
	for _, c := range []struct {
		args []string
		err  error
		code int
		say  string
	}{
		{[]string{"list", dlq}, syscall.EPIPE, exitOK, ""},
		{[]string{"list", "-json", dlq}, syscall.EPIPE, exitOK, ""},
		{[]string{"show", "-id", "c-01", "-n", "5", dlq}, syscall.EPIPE, exitOK, ""},
		{[]string{"show", "-json", "-id", "c-01", "-n", "5", dlq}, syscall.EPIPE, exitOK, ""},
		{[]string{"export", dlq}, syscall.EPIPE, exitFailure, "lilydlq export: incomplete: stopped after"},
		{[]string{"list", dlq}, syscall.ENOSPC, exitFailure, "lilydlq list: no space left on device"},
		// A dry run moves nothing: it is read as list is.
		{[]string{"redrive", "-dry-run", "-all", dlq}, syscall.EPIPE, exitOK, ""},
		{[]string{"redrive", "-dry-run", "-all", dlq}, syscall.ENOSPC, exitFailure, "lilydlq redrive: its output failed (no space left on device)"},
	} {
		r := b.lilydlqTo(&failingWriter{left: 100, err: c.err}, c.args...)
		if r.code != c.code || c.say == "" && r.stderr != "" || !strings.Contains(r.stderr, c.say) || strings.Count(r.stderr, "its output") > 1 {
			t.Errorf("%s, its output failing with %v: exit %d, stderr:\n%s\nwant exit %d, saying %q once", strings.Join(c.args[:len(c.args)-1], " "), c.err, r.code, r.stderr, c.code, c.say)
		}
	}
	b.assertCounts(dlq, 30)
}

// failingWriter takes left bytes, then fails with err.
type failingWriter struct {
	left int
	err  error
}

func (w *failingWriter) Write(p []byte) (int, error) {
	if len(p) > w.left {
		n := w.left
		w.left = 0
		return n, w.err
	}
	w.left -= len(p)
	return len(p), nil
}

// TestReadStopsBeforeTheDeliveryLimit: a quorum DLQ with a delivery limit
// drops a copy once a read returns it past the limit (measured on 3.10.8:
// with x-delivery-limit 2, list four times, the fourth read nothing). A read
// of copies that carry x-delivery-count warns, naming the danger; with
// -delivery-limit the read that returns a copy at the limit stops there and
// exits 1, and the copies are still in the DLQ. A re-drive that moves every
// copy returns none, and moves them out.
func TestReadStopsBeforeTheDeliveryLimit(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	dlq := b.queue("dlq", amqp.Table{"x-queue-type": "quorum", "x-delivery-limit": int64(3)})
	parking := b.queue("parking", nil)
	b.publish(dlq, lilyCopy("q-1", "t", "permanent failure", "permanent", "src", 1, time.Now()),
		lilyCopy("q-2", "t", "permanent failure", "permanent", "src", 1, time.Now()))
	if r := b.lilydlq("list", "-delivery-limit", "3", dlq); r.code != exitOK {
		t.Fatalf("first list: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	b.assertCounts(dlq, 2)
	r := b.lilydlq("show", "-id", "q-2", dlq)
	if r.code != exitOK || !strings.Contains(r.stderr, "lilydlq show: warning: copies carry x-delivery-count (up to 2 after this read)") ||
		!strings.Contains(r.stderr, "drops or dead-letters a copy") {
		t.Errorf("show without -delivery-limit: exit %d, want a warning\n%s", r.code, r.stderr)
	}
	b.assertCounts(dlq, 2)
	r = b.lilydlq("list", "-delivery-limit", "3", dlq)
	if r.code != exitFailure || !strings.Contains(r.stderr, "stopped: q-1 (t) carries x-delivery-count 2: this read returns it at 3, the delivery limit -delivery-limit gives") {
		t.Errorf("third list: exit %d, want %d, stopped\n%s%s", r.code, exitFailure, r.stdout, r.stderr)
	}
	b.assertCounts(dlq, 2)
	if r := b.lilydlq("redrive", "-all", "-to", parking, "-delivery-limit", "3", dlq); r.code != exitOK {
		t.Errorf("redrive -all -to: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	b.assertCounts(dlq, 0)
	b.assertCounts(parking, 2)
}
