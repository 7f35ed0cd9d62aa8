package main

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/internal/faults"

	"github.com/lily-mq/lily/envelope"
)

// TestPurge: purge refuses without the queue's name as confirmation, and
// without being told which copies; with -all it deletes every ready copy.
func TestPurge(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	dlq := b.queue("dlq", nil)
	b.publish(dlq, lilyCopy("p1", "t", "permanent failure", "permanent", "src", 1, time.Now()), lilyCopy("p2", "t", "permanent failure", "permanent", "src", 1, time.Now()))

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"purge", dlq, "-all"}, "refusing to purge " + dlq + " without -confirm " + dlq},
		{[]string{"purge", dlq, "-all", "-confirm", dlq + "x"}, "refusing to purge " + dlq + " without -confirm " + dlq},
		{[]string{"purge", dlq, "-all", "-confirm", ""}, "refusing to purge " + dlq + " without -confirm " + dlq},
		// The confirmation alone, as a runbook that said "purge the
		// copies" had it, deleted copies no one had looked at.
		{[]string{"purge", dlq, "-confirm", dlq}, "say which copies: -expect N (the count list or export showed), -all, or -id"},
		{[]string{"purge", dlq, "-confirm", dlq, "-all", "-expect", "2"}, "give one"},
		{[]string{"purge", dlq, "-confirm", dlq, "-id", "p1", "-expect", "1"}, "give one"},
		{[]string{"purge", dlq, "-confirm", dlq, "-all", "-since", "1h"}, "narrow -id: give -id"},
		{[]string{"purge", dlq, "-confirm", dlq, "-every"}, "narrow -id: give -id"},
	} {
		r := b.lilydlq(c.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v: exit %d, %q; want %d, %q", c.args, r.code, r.stderr, exitUsage, c.want)
		}
	}
	b.assertCounts(dlq, 2)

	r := b.lilydlq("purge", "-confirm", dlq, "-all", dlq)
	if r.code != exitOK || r.stdout != dlq+": purged 2 copies\n" {
		t.Errorf("purge: exit %d, %q %q", r.code, r.stdout, r.stderr)
	}
	b.assertCounts(dlq, 0)

	gone := dlq + ".gone"
	if r := b.lilydlq("purge", gone, "-confirm", gone, "-all"); r.code != exitFailure || !strings.Contains(r.stderr, "no queue named "+gone) {
		t.Errorf("purge of a missing queue: exit %d, %q", r.code, r.stderr)
	}
}

// TestPurgeExpect: with -expect N purge deletes nothing unless the DLQ holds
// exactly N ready copies: an export's count, checked.
func TestPurgeExpect(t *testing.T) {
	t.Parallel()
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
	// Nothing to purge: no purge is sent, which a count read wrongly as 0
	// would turn into the loss of what the DLQ holds.
	r = b.lilydlq("purge", dlq, "-confirm", dlq, "-expect", "0")
	if r.code != exitOK || r.stdout != dlq+": holds no ready copies, as -expect 0 says; nothing purged\n" {
		t.Errorf("purge -expect 0 of 0: exit %d, %q %q", r.code, r.stdout, r.stderr)
	}
}

// TestPurgeExpectAfterList: the operator lists one poison copy; a failure
// arrives after the list. purge -expect with the count the list showed
// deletes nothing.
func TestPurgeExpectAfterList(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	dlq := b.queue("dlq", nil)
	b.publish(dlq, lilyCopy("poison-1", "t", "poison envelope: message_id not printable ASCII", "poison", "src", 1, time.Now()))
	if r := b.lilydlq("list", dlq); r.code != exitOK || !strings.Contains(r.stdout, "1 copies read") {
		t.Fatalf("list: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	b.assertCounts(dlq, 1)
	b.publish(dlq, lilyCopy("order-77", "t", "permanent failure", "permanent", "src", 1, time.Now()))
	r := b.lilydlq("purge", dlq, "-confirm", dlq, "-expect", "1")
	if r.code != exitFailure || !strings.Contains(r.stderr, "it holds 2 ready copies, not the 1 of -expect; nothing purged") {
		t.Errorf("purge -expect 1 of 2: exit %d, %q %q", r.code, r.stdout, r.stderr)
	}
	b.assertCounts(dlq, 2)
}

// TestPurgeIDs: -id deletes the copies with the ids chosen, whatever they
// are (a quarantined copy, which redrive cannot move, and the copy of a
// poison message among them), and hands every other back in its order; an
// id no copy carries is reported, exit 1.
func TestPurgeIDs(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	dlq := b.queue("dlq", nil)
	poisoned := lilyCopy("poison-1", "t", "poison envelope: message_id not printable ASCII", "poison", "src", 1, time.Now())
	poisoned.Headers[envelope.HeaderPoisonCopy] = true
	deep := deepCopy("deep-1", "src")
	b.refusedByTheClient(deep)
	b.publish(dlq,
		lilyCopy("before", "t", "permanent failure", "permanent", "src", 1, time.Now()),
		deep,
		poisoned,
		lilyCopy("after", "t", "permanent failure", "permanent", "src", 1, time.Now()),
	)
	r := b.lilydlq("purge", dlq, "-confirm", dlq, "-id", "deep-1", "-id", "poison-1")
	if r.code != exitOK {
		t.Errorf("purge -id: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{"deleted deep-1 (order.placed): quarantined: header tables", "deleted poison-1 (t): poison envelope", dlq + ": deleted 2 copies (4 read, 4 ready when the read began)"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("purge -id lacks %q:\n%s", want, r.stdout)
		}
	}
	b.assertCounts(dlq, 2)
	// The client decodes what is left: the quarantined copy is gone.
	if got := ids(b.take(dlq)); !slices.Equal(got, []string{"before", "after"}) {
		t.Errorf("the DLQ holds %v", got)
	}

	b.publish(dlq, lilyCopy("here", "t", "permanent failure", "permanent", "src", 1, time.Now()))
	r = b.lilydlq("purge", dlq, "-confirm", dlq, "-id", "here", "-id", "nowhere")
	if r.code != exitFailure || !strings.Contains(r.stdout, "deleted here (t)") || !strings.Contains(r.stderr, "no copy with id nowhere in "+dlq+"\n") {
		t.Errorf("purge -id of a missing id: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	b.assertCounts(dlq, 0)
}

// TestPurgeIDOfTwoCopies: after an unconfirmed re-drive the DLQ can hold a
// message's copy twice, the one left behind and the one of its next failure,
// under one id. purge -id then deletes neither (deleting both lost the
// message's only record), lists them and exits 1; narrowed by -until, it
// deletes the earlier alone; -every deletes each copy chosen. On a quorum DLQ
// too, whose copies are ACKed after their window's consumer was cancelled.
func TestPurgeIDOfTwoCopies(t *testing.T) {
	t.Parallel()
	for _, typ := range []string{"classic", "quorum"} {
		t.Run(typ, func(t *testing.T) {
			b := newBroker(t)
			dlq := b.queue("dlq", amqp.Table{"x-queue-type": typ})
			later := time.Now().Truncate(time.Second)
			earlier := later.Add(-time.Hour)
			b.publish(dlq,
				lilyCopy("order-42", "t", "old attempt", "permanent", "src", 1, earlier),
				lilyCopy("other", "t", "permanent failure", "permanent", "src", 1, earlier),
				lilyCopy("order-42", "t", "after redrive", "permanent", "src", 1, later),
			)
			// Windows of 1: the copies chosen are held by consumers
			// cancelled before the ACK.
			r := b.lilydlq("purge", "-confirm", dlq, "-id", "order-42", "-window", "1", dlq)
			if r.code != exitFailure || strings.Contains(r.stdout, "deleted order-42") || !strings.Contains(r.stdout, dlq+": deleted 0 copies (3 read, 3 ready when the read began)") {
				t.Errorf("purge -id of two copies: exit %d, want %d, nothing deleted\n%s%s", r.code, exitFailure, r.stdout, r.stderr)
			}
			for _, want := range []string{
				"2 copies carry the id order-42",
				earlier.UTC().Format(time.RFC3339) + "  t  old attempt",
				later.UTC().Format(time.RFC3339) + "  t  after redrive",
				"nothing deleted. Choose one with -since, -until",
			} {
				if !strings.Contains(r.stderr, want) {
					t.Errorf("purge -id of two copies lacks %q:\n%s", want, r.stderr)
				}
			}
			b.assertCounts(dlq, 3)

			// Narrowed: the copy that failed before the later one's time.
			r = b.lilydlq("purge", "-confirm", dlq, "-id", "order-42", "-until", later.UTC().Format(time.RFC3339), "-window", "1", dlq)
			if r.code != exitOK || !strings.Contains(r.stdout, "deleted order-42 (t): old attempt\n") || strings.Contains(r.stdout, "after redrive") {
				t.Errorf("purge -id -until: exit %d\n%s%s", r.code, r.stdout, r.stderr)
			}
			b.assertCounts(dlq, 2)
			got := b.take(dlq)
			if len(got) != 2 || got[0].MessageId != "other" || got[1].MessageId != "order-42" || got[1].Headers[envelope.HeaderFailureReason] != "after redrive" {
				t.Errorf("the DLQ holds %v: want other, then order-42 after redrive", ids(got))
			}

			b.publish(dlq,
				lilyCopy("dup", "t", "poison envelope", "poison", "src", 1, earlier),
				lilyCopy("dup", "t", "poison envelope", "poison", "src", 1, later),
				lilyCopy("kept", "t", "permanent failure", "permanent", "src", 1, later),
			)
			r = b.lilydlq("purge", "-confirm", dlq, "-id", "dup", "-every", dlq)
			if r.code != exitOK || strings.Count(r.stdout, "deleted dup (t)") != 2 || !strings.Contains(r.stdout, "deleted 2 copies") {
				t.Errorf("purge -id -every: exit %d\n%s%s", r.code, r.stdout, r.stderr)
			}
			b.assertCounts(dlq, 1)
			// A criterion that leaves an id's copies unchosen deletes nothing
			// of it, and says so.
			r = b.lilydlq("purge", "-confirm", dlq, "-id", "kept", "-reason", "other", dlq)
			if r.code != exitFailure || !strings.Contains(r.stderr, "no copy with id kept matches the other criteria given") {
				t.Errorf("purge -id -reason that chooses none: exit %d\n%s%s", r.code, r.stdout, r.stderr)
			}
			b.assertCounts(dlq, 1)
		})
	}
}

// TestPurgeIDIncomplete: a purge -id whose read was not whole deletes
// nothing. Beside another consumer holding the older of two copies of an id,
// the read sees the id once; deleting that copy lost the only record of the
// message's second failure (before: it was deleted, then purge said
// incomplete, exit 1). A read that stops short for want of copies (one
// expired behind the head) deletes nothing either.
func TestPurgeIDIncomplete(t *testing.T) {
	t.Parallel()
	for _, typ := range []string{"classic", "quorum"} {
		t.Run(typ, func(t *testing.T) {
			b := newBroker(t)
			dlq := b.queue("dlq", amqp.Table{"x-queue-type": typ})
			b.publish(dlq,
				lilyCopy("order-42", "t", "old attempt", "permanent", "src", 1, time.Now()),
				lilyCopy("other", "t", "permanent failure", "permanent", "src", 1, time.Now()),
				lilyCopy("order-42", "t", "after redrive", "permanent", "src", 1, time.Now()),
			)
			d, other := b.holdHead(dlq)
			if d.Headers[envelope.HeaderFailureReason] != "old attempt" {
				t.Fatalf("the other reader holds %q (%v)", d.MessageId, d.Headers[envelope.HeaderFailureReason])
			}
			r := b.lilydlq("purge", "-confirm", dlq, "-id", "order-42", dlq)
			if r.code != exitFailure || strings.Contains(r.stdout, "deleted order-42") || !strings.Contains(r.stdout, dlq+": deleted 0 copies") ||
				!strings.Contains(r.stderr, "lilydlq purge: incomplete: 2 of the 2 copies ready when the read began were read, beside 1 other consumer(s): nothing deleted") {
				t.Errorf("purge -id beside another consumer: exit %d, want %d, nothing deleted\n%s%s", r.code, exitFailure, r.stdout, r.stderr)
			}
			if err := other.Close(); err != nil {
				t.Fatal(err)
			}
			b.assertCounts(dlq, 3)
		})
	}
	t.Run("fewer than ready", func(t *testing.T) {
		b := newBroker(t)
		dlq := b.queue("dlq", nil)
		expiring := lilyCopy("expiring", "t", "permanent failure", "permanent", "src", 1, time.Now())
		expiring.Expiration = "1"
		b.publish(dlq, lilyCopy("stays", "t", "permanent failure", "permanent", "src", 1, time.Now()), expiring)
		r := b.lilydlq("purge", "-confirm", dlq, "-id", "stays", "-id", "expiring", "-wait", "1s", dlq)
		if r.code != exitFailure || strings.Contains(r.stdout, "deleted stays") ||
			!strings.Contains(r.stderr, "lilydlq purge: no copy with id expiring among the copies read of "+dlq+"\n") ||
			!strings.Contains(r.stderr, "lilydlq purge: incomplete: 1 of the 2 copies ready when the read began were read, beside 0 other consumer(s): nothing deleted") {
			t.Errorf("purge -id of a read cut short: exit %d, want %d, nothing deleted\n%s%s", r.code, exitFailure, r.stdout, r.stderr)
		}
		if got := ids(b.take(dlq)); !slices.Equal(got, []string{"stays"}) {
			t.Errorf("the DLQ holds %v", got)
		}
	})
}

// TestPurgeOutputFailed: a purge -id whose stdout fails at its first write,
// after the read, still deletes the chosen copies; it exits 1 and says on
// stderr, once, why, and how many it deleted (before: exit 0, stderr empty).
func TestPurgeOutputFailed(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	dlq := b.queue("dlq", nil)
	for _, id := range []string{"c-00", "c-01", "c-02"} {
		b.publish(dlq, lilyCopy(id, "t", "permanent failure", "permanent", "src", 1, time.Now()))
	}
	r := b.lilydlqTo(&failingWriter{err: syscall.EPIPE}, "purge", "-confirm", dlq, "-id", "c-01", "-id", "c-02", dlq)
	if r.code != exitFailure || !strings.Contains(r.stderr, "lilydlq purge: "+dlq+": deleted 2 copies (3 read") ||
		strings.Count(r.stderr, "lilydlq purge: its output was closed (broken pipe)") != 1 {
		t.Errorf("purge -id with its output closed: exit %d, stderr:\n%s", r.code, r.stderr)
	}
	b.assertCounts(dlq, 1)
	if got := ids(b.take(dlq)); !slices.Equal(got, []string{"c-00"}) {
		t.Errorf("the DLQ holds %v", got)
	}
}

// TestPurgeIDConsumerBegunMidRead: a consumer that begins during a purge -id
// and holds the second copy of its id, while as many new copies arrive as it
// holds, leaves a read that counts as many copies as were ready and saw the
// id once (before: it deleted that copy, "deleted 1 copies (602 read, 602
// ready ...)", exit 0, and the DLQ kept the other). The purge deletes
// nothing and exits 1: on a classic DLQ its exclusive consumers refuse the
// other one, on a quorum DLQ it counts the other and stops. An export so
// (before: exit 0, a file without that copy) says incomplete, exit 1. A
// redrive -id so moves nothing, exit 1.
func TestPurgeIDConsumerBegunMidRead(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ typ, cmd string }{{"classic", "purge"}, {"quorum", "purge"}, {"quorum", "export"}, {"quorum", "redrive"}} {
		typ := c.typ
		t.Run(c.cmd+"/"+typ, func(t *testing.T) {
			b := newBroker(t)
			dlq, src := b.queue("dlq", amqp.Table{"x-queue-type": typ}), b.queue("src", nil)
			now := time.Now()
			msgs := []amqp.Publishing{lilyCopy("dup", "t", "old attempt", "permanent", src, 1, now.Add(-time.Hour))}
			for i := range 600 {
				if i == 300 {
					msgs = append(msgs, lilyCopy("dup", "t", "after redrive", "permanent", src, 1, now))
				}
				msgs = append(msgs, lilyCopy(fmt.Sprintf("f-%03d", i), "t", "filler", "permanent", src, 1, now))
			}
			b.publish(dlq, msgs...)
			done := make(chan result, 1)
			go func() {
				switch c.cmd {
				case "export":
					done <- b.lilydlq("export", "-o", filepath.Join(t.TempDir(), "dlq.jsonl"), "-window", "1", "-wait", "15s", dlq)
					return
				case "redrive":
					done <- b.lilydlq("redrive", "-id", "dup", "-window", "1", "-wait", "15s", dlq)
					return
				}
				done <- b.lilydlq("purge", "-confirm", dlq, "-id", "dup", "-window", "1", "-wait", "15s", dlq)
			}()
			count := b.channel()
			for end := time.Now().Add(deadline); ; {
				q, err := count.QueueDeclarePassive(dlq, true, false, false, false, nil)
				if err != nil {
					t.Fatal(err)
				}
				if q.Consumers > 0 {
					break
				}
				if time.Now().After(end) {
					t.Fatal("the purge never began to consume")
				}
			}
			// A service begins on the DLQ and holds 400 copies; as many new
			// failures arrive.
			service := b.channel()
			if err := service.Qos(400, 0, false); err != nil {
				t.Fatal(err)
			}
			var held int
			if dels, err := service.Consume(dlq, "service", false, false, false, false, nil); err == nil {
				for timeout := time.After(2 * time.Second); ; {
					select {
					case _, ok := <-dels:
						if ok {
							held++
							continue
						}
					case <-timeout:
					}
					break
				}
			}
			var more []amqp.Publishing
			for i := range held {
				more = append(more, lilyCopy(fmt.Sprintf("new-%03d", i), "t", "new", "permanent", src, 1, now))
			}
			b.publish(dlq, more...)
			r := <-done
			if r.code != exitFailure || strings.Contains(r.stdout, "deleted dup") || strings.Contains(r.stdout, "moved dup") || c.cmd == "export" && !strings.Contains(r.stderr, "incomplete") {
				t.Errorf("%s beside a consumer begun during it (holding %d): exit %d, want %d, nothing deleted\n%s%s", c.cmd, held, r.code, exitFailure, r.stdout, r.stderr)
			}
			_ = service.Close()
			b.assertCounts(dlq, 602+held)
			n := 0
			for _, d := range b.take(dlq) {
				if d.MessageId == "dup" {
					n++
				}
			}
			if n != 2 {
				t.Errorf("the DLQ holds %d copies of dup, want 2", n)
			}
			b.assertCounts(src, 0)
		})
	}
}

// TestPurgeIDSaysDeletedOnlyOnceACKed: a proxy cuts a purge -id's
// connections right after the broker's cancel-ok of its last window, as
// its ACKs begin. A copy stdout says was deleted is one whose ACK was sent:
// as many "deleted" lines as the summary's count (before: a line for each
// copy chosen, then ACKs that failed, "deleted 0 copies").
func TestPurgeIDSaysDeletedOnlyOnceACKed(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	link := newSlowLink(t, b)
	dlq := b.queue("dlq", nil)
	args := []string{"purge", "-confirm", dlq, dlq}
	for i := range 20 {
		id := fmt.Sprintf("gone-%02d", i)
		b.publish(dlq, lilyCopy(id, "t", "permanent failure", "permanent", "src", 1, time.Now()))
		args = append(args, "-id", id)
	}
	link.proxy.Intercept(func(f faults.Frame) faults.Action {
		if f.Dir == faults.ToClient && f.Is(faults.BasicCancelOk) {
			return faults.CutAfter
		}
		return faults.Forward
	})
	r := link.lilydlq(args...)
	t.Logf("the cut purge said:\n%s%s", r.stdout, r.stderr)
	var taken int
	if _, after, ok := strings.Cut(r.stdout, dlq+": deleted "); ok {
		_, _ = fmt.Sscanf(after, "%d copies", &taken)
	}
	if lines := strings.Count(r.stdout, "deleted gone-"); r.code != exitFailure || lines != taken {
		t.Errorf("exit %d, want %d; %d copies said deleted, %d ACKed", r.code, exitFailure, lines, taken)
	}
	// Every copy not said deleted is still in the DLQ, once, when the broker
	// has seen the connection gone and handed back what it held; one said
	// deleted may be too, its ACK cut off with the connection.
	for end := time.Now().Add(deadline); ; time.Sleep(time.Second) {
		if _, unacked := queueCounts(t, dlq); unacked == 0 {
			break
		} else if time.Now().After(end) {
			t.Fatalf("%s still holds %d copies unacknowledged", dlq, unacked)
		}
	}
	left := map[string]int{}
	for _, id := range ids(b.take(dlq)) {
		left[id]++
	}
	for i := range 20 {
		id := fmt.Sprintf("gone-%02d", i)
		if said := strings.Contains(r.stdout, "deleted "+id+" "); left[id] > 1 || !said && left[id] != 1 {
			t.Errorf("%s: said deleted %t, %d left in the DLQ", id, said, left[id])
		}
	}
}
