package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/internal/faults"
	"github.com/lily-mq/lily/internal/frame"
	"github.com/lily-mq/lily/wire"
)

// dlqCase is a DLQ of six copies from two source queues, of three types,
// with three reasons and failure times an hour or so apart.
type dlqCase struct {
	b                 *broker
	dlq, orders, pays string
	now               time.Time
}

func newDLQCase(t *testing.T) *dlqCase {
	b := newBroker(t)
	c := &dlqCase{b: b, dlq: b.queue("dlq", nil), orders: b.queue("orders", nil), pays: b.queue("payments", nil), now: time.Now()}
	const declined = "permanent failure: card declined"
	b.publish(c.dlq,
		lilyCopy("a1", "order.placed", declined, "permanent", c.orders, 1, c.now.Add(-3*time.Hour)),
		lilyCopy("a2", "order.placed", declined, "permanent", c.orders, 1, c.now.Add(-2*time.Hour)),
		lilyCopy("b1", "order.paid", "retryable failure on attempt 3 of 3: timeout", "retryable", c.pays, 3, c.now.Add(-time.Hour)),
		lilyCopy("b2", "order.paid", declined+" twice", "permanent", c.pays, 1, c.now.Add(-30*time.Minute)),
		lilyCopy("c1", "order.placed", "unsupported: order.placed v3 as application/json has no route", "unsupported", c.orders, 1, c.now.Add(-10*time.Minute)),
		lilyCopy("c2", "order.shipped", declined, "permanent", c.pays, 1, c.now.Add(-5*time.Minute)),
	)
	return c
}

// TestRedriveSelections: each selection moves exactly its copies, each to
// its own source queue, and leaves the others in the DLQ in their order.
func TestRedriveSelections(t *testing.T) {
	t.Parallel()
	all := []string{"a1", "a2", "b1", "b2", "c1", "c2"}
	source := map[string]string{"a1": "orders", "a2": "orders", "c1": "orders", "b1": "payments", "b2": "payments", "c2": "payments"}
	for _, c := range []struct {
		name  string
		args  func(c *dlqCase) []string
		moved []string
	}{
		{"ids", func(*dlqCase) []string { return []string{"-id", "a1", "-id", "b1", "-id", "c2"} }, []string{"a1", "b1", "c2"}},
		{"reason exact", func(*dlqCase) []string { return []string{"-reason", "permanent failure: card declined"} }, []string{"a1", "a2", "c2"}},
		{"reason substring", func(*dlqCase) []string { return []string{"-reason-contains", "card declined"} }, []string{"a1", "a2", "b2", "c2"}},
		{"type", func(*dlqCase) []string { return []string{"-type", "order.paid"} }, []string{"b1", "b2"}},
		{"window as durations", func(*dlqCase) []string { return []string{"-since", "150m", "-until", "45m"} }, []string{"a2", "b1"}},
		{"window as times", func(c *dlqCase) []string {
			return []string{"-since", c.now.Add(-65 * time.Minute).Format(time.RFC3339), "-until", c.now.Add(-7 * time.Minute).Format(time.RFC3339)}
		}, []string{"b1", "b2", "c1"}},
		{"type and reason", func(*dlqCase) []string { return []string{"-type", "order.placed", "-reason-contains", "card"} }, []string{"a1", "a2"}},
		{"all, limit 4", func(*dlqCase) []string { return []string{"-all", "-limit", "4"} }, []string{"a1", "a2", "b1", "b2"}},
		{"all", func(*dlqCase) []string { return []string{"-all"} }, all},
	} {
		t.Run(c.name, func(t *testing.T) {
			dc := newDLQCase(t)
			r := dc.b.lilydlq(append([]string{"redrive", dc.dlq}, c.args(dc)...)...)
			if r.code != exitOK {
				t.Fatalf("redrive: exit %d\n%s%s", r.code, r.stdout, r.stderr)
			}
			if want := fmt.Sprintf("moved %d of %d chosen", len(c.moved), len(c.moved)); !strings.Contains(r.stdout, want) {
				t.Errorf("redrive output lacks %q:\n%s", want, r.stdout)
			}
			var wantOrders, wantPays, wantLeft []string
			for _, id := range all {
				switch {
				case !slices.Contains(c.moved, id):
					wantLeft = append(wantLeft, id)
				case source[id] == "orders":
					wantOrders = append(wantOrders, id)
				default:
					wantPays = append(wantPays, id)
				}
			}
			dc.b.assertCounts(dc.dlq, len(wantLeft))
			dc.b.assertCounts(dc.orders, len(wantOrders))
			dc.b.assertCounts(dc.pays, len(wantPays))
			for q, want := range map[string][]string{dc.dlq: wantLeft, dc.orders: wantOrders, dc.pays: wantPays} {
				if got := ids(dc.b.take(q)); !slices.Equal(got, want) {
					t.Errorf("%s holds %v, want %v", q, got, want)
				}
			}
		})
	}
}

// TestRedriveRewritesHeaders: a re-driven copy keeps its body, properties and
// own headers, loses the failure facts and the old handoff id, starts again
// at attempt 1 (or keeps its attempt with -keep-attempt), and says it was
// re-driven, from which DLQ, how often.
func TestRedriveRewritesHeaders(t *testing.T) {
	t.Parallel()
	for _, keep := range []bool{false, true} {
		t.Run(fmt.Sprintf("keep-attempt %t", keep), func(t *testing.T) {
			b := newBroker(t)
			dlq, src := b.queue("dlq", nil), b.queue("src", nil)
			at := time.Now().Add(-time.Hour)
			once := lilyCopy("again", "order.placed", "permanent failure", "permanent", src, 3, at)
			once.Headers[envelope.HeaderRedriven] = int64(1)
			once.Headers[envelope.HeaderRedrivenFrom] = "older.dlq"
			b.publish(dlq, lilyCopy("first", "order.placed", "permanent failure", "permanent", src, 3, at), once)
			args := []string{"redrive", dlq, "-all"}
			if keep {
				args = append(args, "-keep-attempt")
			}
			if r := b.lilydlq(args...); r.code != exitOK {
				t.Fatalf("redrive: exit %d\n%s%s", r.code, r.stdout, r.stderr)
			}
			b.assertCounts(dlq, 0)
			got := b.take(src)
			if len(got) != 2 {
				t.Fatalf("source holds %d, want 2", len(got))
			}
			for i, d := range got {
				wantAttempt := int64(1)
				if keep {
					wantAttempt = 3 // the copy's own: the attempt that failed
				}
				if n, _ := wire.HeaderInt(d.Headers[envelope.HeaderAttempt]); n != wantAttempt {
					t.Errorf("%s: x-lily-attempt %v, want %d", d.MessageId, d.Headers[envelope.HeaderAttempt], wantAttempt)
				}
				if n, _ := wire.HeaderInt(d.Headers[envelope.HeaderRedriven]); n != int64(i+1) {
					t.Errorf("%s: x-lily-redriven %v, want %d", d.MessageId, d.Headers[envelope.HeaderRedriven], i+1)
				}
				if d.Headers[envelope.HeaderRedrivenFrom] != dlq {
					t.Errorf("%s: x-lily-redriven-from %v, want %s", d.MessageId, d.Headers[envelope.HeaderRedrivenFrom], dlq)
				}
				for k := range d.Headers {
					if strings.HasPrefix(k, envelope.HeaderFailurePrefix) {
						t.Errorf("%s: header %s kept", d.MessageId, k)
					}
				}
				if id, _ := d.Headers[envelope.HeaderHandoffID].(string); id == "" || id == "handoff-"+d.MessageId {
					t.Errorf("%s: x-lily-handoff-id %q: want the publisher's own, not the copy's", d.MessageId, id)
				}
				if d.Headers["x-user-header"] != "kept" || d.Headers[envelope.HeaderVersion] != int64(2) {
					t.Errorf("%s: own headers %v", d.MessageId, d.Headers)
				}
				if d.Type != "order.placed" || d.ContentType != "application/json" || d.CorrelationId != "corr-"+d.MessageId ||
					d.DeliveryMode != amqp.Persistent || !d.Timestamp.Equal(at.Truncate(time.Second)) || string(d.Body) != `{"id":"`+d.MessageId+`"}` {
					t.Errorf("%s: properties or body changed: %+v", d.MessageId, d)
				}
			}
		})
	}
}

// TestRedriveToAMissingQueue: a copy whose source queue does not exist is
// returned by the broker and stays in the DLQ; the others move; the exit
// code says not everything moved. A dry run says so first, with the same
// exit code (before: "would move lost-queue (t) -> ...", exit 0).
func TestRedriveToAMissingQueue(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	dlq, src := b.queue("dlq", nil), b.queue("src", nil)
	gone := src + ".gone"
	b.publish(dlq,
		lilyCopy("lost-queue", "t", "permanent failure", "permanent", gone, 1, time.Now()),
		lilyCopy("fine", "t", "permanent failure", "permanent", src, 1, time.Now()),
		lilyCopy("lost-too", "t", "permanent failure", "permanent", gone, 1, time.Now()),
	)
	r := b.lilydlq("redrive", dlq, "-all", "-dry-run")
	if r.code != exitFailure {
		t.Errorf("redrive -dry-run: exit %d, want %d\n%s", r.code, exitFailure, r.stdout)
	}
	for _, want := range []string{
		"would not move lost-queue (t) -> " + gone + ": no queue named " + gone + "; it stays in the DLQ\n",
		"would move fine (t) -> " + src + ": permanent failure\n",
		"would not move lost-too (t) -> " + gone + ": no queue named " + gone + "; it stays in the DLQ\n",
		"would move 1 of 3 chosen (3 read, 3 ready when the read began); 2 not moved, still in the DLQ\n",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("redrive -dry-run output lacks %q:\n%s", want, r.stdout)
		}
	}
	b.assertCounts(dlq, 3)
	b.assertCounts(src, 0)
	r = b.lilydlq("redrive", dlq, "-id", "lost-queue", "-id", "fine")
	if r.code != exitFailure {
		t.Errorf("redrive: exit %d, want %d\n%s", r.code, exitFailure, r.stdout)
	}
	for _, want := range []string{"not moved lost-queue (t) -> " + gone + ": lily: returned", "it stays in the DLQ", "moved fine (t) -> " + src, "moved 1 of 2 chosen", "1 not moved, still in the DLQ"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("redrive output lacks %q:\n%s", want, r.stdout)
		}
	}
	b.assertCounts(dlq, 2)
	b.assertCounts(src, 1)
	if got := ids(b.take(dlq)); !slices.Equal(got, []string{"lost-queue", "lost-too"}) {
		t.Errorf("DLQ holds %v", got)
	}
}

// TestRedriveDryRun: a dry run prints what would move and moves nothing.
func TestRedriveDryRun(t *testing.T) {
	t.Parallel()
	dc := newDLQCase(t)
	r := dc.b.lilydlq("redrive", dc.dlq, "-reason-contains", "card declined", "-dry-run")
	if r.code != exitOK {
		t.Fatalf("redrive -dry-run: exit %d\n%s", r.code, r.stderr)
	}
	for _, want := range []string{"would move a1 (order.placed) -> " + dc.orders + ": permanent failure: card declined", "would move b2 (order.paid) -> " + dc.pays, "would move 4 of 4 chosen (6 read"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("dry run output lacks %q:\n%s", want, r.stdout)
		}
	}
	dc.b.assertCounts(dc.dlq, 6)
	dc.b.assertCounts(dc.orders, 0)
	dc.b.assertCounts(dc.pays, 0)
	if got := ids(dc.b.take(dc.dlq)); !slices.Equal(got, []string{"a1", "a2", "b1", "b2", "c1", "c2"}) {
		t.Errorf("DLQ after a dry run: %v", got)
	}
}

// TestRedriveRate: -rate N spaces the publishes 1/N s apart, the first at
// once: moving n copies takes at least (n-1)/N s. Only that lower bound is
// asserted (a slow machine only adds to it), and where every copy went.
func TestRedriveRate(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	dlq, src := b.queue("dlq", nil), b.queue("src", nil)
	const copies, rate = 12, 20
	var msgs []amqp.Publishing
	for i := range copies {
		msgs = append(msgs, lilyCopy(fmt.Sprintf("r-%03d", i), "t", "permanent failure", "permanent", src, 1, time.Now()))
	}
	b.publish(dlq, msgs...)
	start := time.Now()
	r := b.lilydlq("redrive", dlq, "-all", "-rate", fmt.Sprint(rate))
	ran := time.Since(start)
	if r.code != exitOK {
		t.Fatalf("redrive: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if least := (copies - 1) * time.Second / rate; ran < least {
		t.Errorf("moved %d at -rate %d in %v: want at least %v", copies, rate, ran, least)
	}
	b.assertCounts(dlq, 0)
	b.assertCounts(src, copies)
}

// TestRedriveNacked: a copy whose queue refuses it (full, with overflow
// reject-publish: the broker NACKs the publish) stays in the DLQ, not ACKed;
// the source keeps what it held; the exit code is 1.
func TestRedriveNacked(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	dlq := b.queue("dlq", nil)
	full := b.queue("full", amqp.Table{"x-max-length": int32(1), "x-overflow": "reject-publish"})
	b.publish(full, amqp.Publishing{MessageId: "already-there"})
	b.publish(dlq, lilyCopy("refused", "t", "permanent failure", "permanent", full, 1, time.Now()))
	r := b.lilydlq("redrive", dlq, "-all")
	if r.code != exitFailure {
		t.Errorf("redrive: exit %d, want %d\n%s%s", r.code, exitFailure, r.stdout, r.stderr)
	}
	for _, want := range []string{"not moved refused (t) -> " + full + ": lily: nacked", "it stays in the DLQ", "moved 0 of 1 chosen", "1 not moved"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("redrive lacks %q:\n%s", want, r.stdout)
		}
	}
	b.assertCounts(dlq, 1)
	b.assertCounts(full, 1)
	if got := ids(b.take(full)); !slices.Equal(got, []string{"already-there"}) {
		t.Errorf("the full queue holds %v", got)
	}
	got := b.take(dlq)
	if len(got) != 1 || got[0].MessageId != "refused" || got[0].Headers[envelope.HeaderFailureQueue] != full {
		t.Errorf("the DLQ holds %v", ids(got))
	}

	// With reject-publish-dlx the broker also dead-letters the refused
	// publish, here into the DLQ read: the message is there twice, the
	// untouched copy with its facts and the refused one, and the run says
	// it may be.
	dlx := b.queue("dlx", amqp.Table{"x-max-length": int32(1), "x-overflow": "reject-publish-dlx", "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
	b.publish(dlx, amqp.Publishing{MessageId: "already-there"})
	b.publish(dlq, lilyCopy("refused", "t", "permanent failure", "permanent", dlx, 1, time.Now()))
	r = b.lilydlq("redrive", dlq, "-all")
	if r.code != exitFailure || !strings.Contains(r.stdout, "the refused copy is in its DLQ too") {
		t.Errorf("redrive to a reject-publish-dlx queue: exit %d, want %d\n%s%s", r.code, exitFailure, r.stdout, r.stderr)
	}
	b.assertCounts(dlq, 2)
	got = b.take(dlq)
	if len(got) != 2 || got[0].Headers[envelope.HeaderFailureQueue] != dlx || got[1].Headers[envelope.HeaderRedriven] == nil {
		t.Errorf("the DLQ holds %v, want the copy with its facts, then the refused one", got)
	}
}

// TestRedriveAcksOnlyAfterTheConfirm: a relay holds back the broker's confirm
// of a re-drive's publish. The copy is then in its queue, and still in the
// DLQ, not ACKed; the connections cut there, it stays in both, never in
// neither.
func TestRedriveAcksOnlyAfterTheConfirm(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	dlq, src := b.queue("dlq", nil), b.queue("src", nil)
	b.publish(dlq, lilyCopy("held", "t", "permanent failure", "permanent", src, 1, time.Now()))
	relay := newRelay(t, b.url, nil, true)
	done := make(chan result, 1)
	go func() {
		var out, errs bytes.Buffer
		code := run(context.Background(), []string{"redrive", dlq, "-all", "-url", "amqp://guest:guest@127.0.0.1:" + relay.port() + "/"}, &out, &errs)
		done <- result{out.String(), errs.String(), code}
	}()
	select {
	case <-relay.published:
	case r := <-done:
		t.Fatalf("the re-drive ended before it published: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	case <-time.After(deadline):
		t.Fatal("no publish through the relay")
	}
	waitFor(t, "the copy to reach its queue", func() bool { return b.ready(src) == 1 })
	// Held by the re-drive (or, had its confirm wait timed out, handed back):
	// in the DLQ either way.
	if ready, unacked := queueCounts(t, dlq); ready+unacked != 1 {
		t.Errorf("with the confirm held back the DLQ has %d ready, %d unacked: the copy was ACKed before its confirm", ready, unacked)
	}
	relay.cut()
	select {
	case r := <-done:
		t.Logf("the cut re-drive said:\n%s%s", r.stdout, r.stderr)
		if r.code != exitFailure || !strings.Contains(r.stderr, "it stays in the DLQ and may be in "+src+" too") {
			t.Errorf("the cut re-drive: exit %d, want %d, saying where the copy may be", r.code, exitFailure)
		}
	case <-time.After(deadline):
		t.Fatal("the re-drive did not end after its connections were cut")
	}
	b.assertCounts(dlq, 1)
	b.assertCounts(src, 1)
	if got := ids(b.take(dlq)); !slices.Equal(got, []string{"held"}) {
		t.Errorf("the DLQ holds %v", got)
	}
}

// TestRedriveWaitsOutASlowConfirm: over a slow link a confirm can come
// later than the runtime's 5 s step. A proxy holds back what the broker
// sends from the moment the re-drive publishes, for 8 s: with the default
// -step the copy moves; with -step 3s the run ends unconfirmed, the copy in
// the DLQ and in its queue, and says what a second run would do. (3 s, not
// less: each step before the publish must fit in one on a loaded machine.)
func TestRedriveWaitsOutASlowConfirm(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	slow := newSlowLink(t, b)
	dlq, src := b.queue("dlq", nil), b.queue("src", nil)
	b.publish(dlq, lilyCopy("slow", "t", "permanent failure", "permanent", src, 1, time.Now()))
	slow.holdAfterPublish(8 * time.Second)
	if r := slow.lilydlq("redrive", dlq, "-all"); r.code != exitOK || !strings.Contains(r.stdout, "moved slow (t) -> "+src) {
		t.Errorf("redrive with the default -step: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	b.assertCounts(dlq, 0)
	b.assertCounts(src, 1)

	b.publish(dlq, lilyCopy("slower", "t", "permanent failure", "permanent", src, 1, time.Now()))
	slow.holdAfterPublish(8 * time.Second)
	r := slow.lilydlq("redrive", dlq, "-all", "-step", "3s")
	for _, want := range []string{"no confirm in time", "it stays in the DLQ and may be in " + src + " too: running again would send it twice", "raise -step (3s)"} {
		if r.code != exitFailure || !strings.Contains(r.stderr, want) {
			t.Errorf("redrive -step 3s: exit %d, want %d, saying %q\n%s%s", r.code, exitFailure, want, r.stdout, r.stderr)
		}
	}
	b.assertCounts(dlq, 1)
	b.assertCounts(src, 2)
	if got := ids(b.take(src)); !slices.Equal(got, []string{"slow", "slower"}) {
		t.Errorf("the source holds %v", got)
	}
}

// slowLink is a proxy in front of the test's broker that can hold back
// what the broker sends.
type slowLink struct {
	t     *testing.T
	proxy *faults.Proxy
	url   string
}

func newSlowLink(t *testing.T, b *broker) *slowLink {
	t.Helper()
	proxy, url, err := faults.ListenFor(b.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	return &slowLink{t: t, proxy: proxy, url: url}
}

// holdAfterPublish stalls the broker's side of every connection through the
// proxy at the next publish, before that publish is passed on, for held:
// its confirm comes no sooner.
func (s *slowLink) holdAfterPublish(held time.Duration) {
	var once sync.Once
	s.proxy.Intercept(func(f faults.Frame) faults.Action {
		if f.Dir == faults.ToBroker && f.Is(faults.BasicPublish) {
			once.Do(func() {
				s.proxy.Stall(faults.ToClient)
				time.AfterFunc(held, s.proxy.Resume)
			})
		}
		return faults.Forward
	})
}

// lilydlq runs the command through the proxy.
func (s *slowLink) lilydlq(args ...string) result {
	var out, errs bytes.Buffer
	code := run(context.Background(), append(args, "-url", s.url), &out, &errs)
	return result{out.String(), errs.String(), code}
}

// slowRedriveOfHalf publishes n copies from src to dlq, every other one
// with the reason "permanent failure: move", and starts a re-drive of those,
// paced at 2 a second in windows of 2 (the copies to move take seconds, time
// for what a test does beside it on a loaded machine); it returns once two
// have moved, with the channel the re-drive's result comes on.
func slowRedriveOfHalf(t *testing.T, b *broker, dlq, src, prefix string, n int) chan result {
	t.Helper()
	var msgs []amqp.Publishing
	for i := range n {
		reason := "permanent failure: keep"
		if i%2 == 0 {
			reason = "permanent failure: move"
		}
		msgs = append(msgs, lilyCopy(fmt.Sprintf("%s%02d", prefix, i), "t", reason, "permanent", src, 1, time.Now()))
	}
	b.publish(dlq, msgs...)
	done := make(chan result, 1)
	go func() {
		done <- b.lilydlq("redrive", dlq, "-reason", "permanent failure: move", "-rate", "2", "-window", "2")
	}()
	waitFor(t, "the re-drive to move a copy", func() bool { return b.ready(src) >= 2 })
	return done
}

// TestRedriveRunsAlone: a second re-drive of a DLQ started during a first
// is refused at its start (the first holds the re-drive lock), and the first
// runs to its end: it does not take its own earlier windows, which on a
// quorum DLQ still count as consumers while they hold the copies they kept,
// for another re-drive. Each copy ends in one place, once. The first keeps
// half the copies, so that it reads in many windows.
func TestRedriveRunsAlone(t *testing.T) {
	t.Parallel()
	for _, typ := range []string{"classic", "quorum"} {
		t.Run(typ, func(t *testing.T) {
			b := newBroker(t)
			dlq, src := b.queue("dlq", amqp.Table{"x-queue-type": typ}), b.queue("src", nil)
			const copies = 20
			first := slowRedriveOfHalf(t, b, dlq, src, "alone-", copies)
			second := b.lilydlq("redrive", dlq, "-reason", "permanent failure: move")
			one := <-first
			if second.code != exitFailure || !strings.Contains(second.stderr, "refusing to redrive: another redrive of "+dlq+" is running") || second.stdout != "" {
				t.Errorf("the second re-drive: exit %d, want %d, refused at its start\n%s%s", second.code, exitFailure, second.stdout, second.stderr)
			}
			if one.code != exitOK || !strings.Contains(one.stdout, "moved 10 of 10 chosen (20 read, 20 ready when the read began)") {
				t.Errorf("the first re-drive: exit %d, want %d, moving all ten\n%s%s", one.code, exitOK, one.stdout, one.stderr)
			}
			b.assertCounts(src, copies/2)
			b.assertCounts(dlq, copies/2)
			moved, left := ids(b.take(src)), ids(b.take(dlq))
			var wantMoved, wantLeft []string
			for i := range copies {
				if i%2 == 0 {
					wantMoved = append(wantMoved, fmt.Sprintf("alone-%02d", i))
				} else {
					wantLeft = append(wantLeft, fmt.Sprintf("alone-%02d", i))
				}
			}
			if !slices.Equal(moved, wantMoved) || !slices.Equal(left, wantLeft) {
				t.Errorf("the source holds %v, the DLQ %v: want %v and %v", moved, left, wantMoved, wantLeft)
			}
		})
	}
}

// TestRedriveQuorumPastTheFirstWindow: a selective re-drive of a quorum DLQ
// reads past its first window, whose consumer, cancelled, still counts while
// it holds the copies it kept, and moves the one copy chosen.
func TestRedriveQuorumPastTheFirstWindow(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	dlq, src := b.queue("dlq", amqp.Table{"x-queue-type": "quorum"}), b.queue("src", nil)
	const copies = 10
	var msgs []amqp.Publishing
	var kept []string
	for i := range copies {
		id := fmt.Sprintf("m-%d", i)
		msgs = append(msgs, lilyCopy(id, "t", "permanent failure", "permanent", src, 1, time.Now()))
		if i != copies-1 {
			kept = append(kept, id)
		}
	}
	b.publish(dlq, msgs...)
	// Windows of 3: the last copy is read in the fourth.
	r := b.lilydlq("redrive", dlq, "-id", "m-9", "-window", "3")
	if r.code != exitOK || !strings.Contains(r.stdout, "moved m-9 (t) -> "+src) || !strings.Contains(r.stdout, "moved 1 of 1 chosen (10 read, 10 ready when the read began)") {
		t.Errorf("redrive -id m-9: exit %d, want %d\n%s%s", r.code, exitOK, r.stdout, r.stderr)
	}
	b.assertCounts(dlq, copies-1)
	b.assertCounts(src, 1)
	if got := ids(b.take(src)); !slices.Equal(got, []string{"m-9"}) {
		t.Errorf("the source holds %v, want [m-9]", got)
	}
	if got := ids(b.take(dlq)); !slices.Equal(got, kept) {
		t.Errorf("the DLQ holds %v, want %v", got, kept)
	}
}

// TestRedriveLimitHandsBackAtOnce: a re-drive cut short by -limit on a
// quorum DLQ of more than a window returns only once the DLQ counts none of
// its consumers and holds every copy it kept, ready (a quorum queue hands a
// closed channel's copies back after the close-ok); an export run at once
// after it reads the DLQ whole; and the copy the broker sent to fill the
// slot the ACK freed is not put behind the others.
func TestRedriveLimitHandsBackAtOnce(t *testing.T) {
	t.Parallel()
	for _, window := range []string{"64", "2"} {
		t.Run("window"+window, func(t *testing.T) {
			b := newBroker(t)
			dlq, src := b.queue("dlq", amqp.Table{"x-queue-type": "quorum"}), b.queue("src", nil)
			const copies = 130
			var msgs []amqp.Publishing
			var want []string
			for i := range copies {
				id := fmt.Sprintf("m-%03d", i)
				msgs = append(msgs, lilyCopy(id, "t", "permanent failure", "permanent", src, 1, time.Now()))
				want = append(want, id)
			}
			b.publish(dlq, msgs...)
			// Counted at once on a channel already open: the next command
			// dials first, which may hide the lag here and not on a slower
			// machine.
			ch := b.channel()
			defer ch.Close()
			r := b.lilydlq("redrive", dlq, "-all", "-limit", "1", "-window", window)
			q, err := ch.QueueDeclarePassive(dlq, true, false, false, false, nil)
			if err != nil {
				t.Fatal(err)
			}
			if r.code != exitOK || !strings.Contains(r.stdout, "moved m-000 (t) -> "+src) {
				t.Errorf("redrive -all -limit 1: exit %d, want %d, moving m-000\n%s%s", r.code, exitOK, r.stdout, r.stderr)
			}
			if q.Messages != copies-1 || q.Consumers != 0 {
				t.Errorf("after redrive -all -limit 1: the DLQ has %d ready, %d consumer(s); want %d, none", q.Messages, q.Consumers, copies-1)
			}
			r = b.lilydlq("export", dlq, "-o", filepath.Join(t.TempDir(), "dlq.jsonl"))
			if r.code != exitOK || !strings.Contains(r.stderr, fmt.Sprintf("%d copies written (%d ready when the read began)", copies-1, copies-1)) {
				t.Errorf("export at once after: exit %d, want %d\n%s%s", r.code, exitOK, r.stdout, r.stderr)
			}
			b.assertCounts(dlq, copies-1)
			if got := ids(b.take(dlq)); !slices.Equal(got, want[1:]) {
				t.Errorf("the DLQ holds %v, want %v", got, want[1:])
			}
			if got := ids(b.take(src)); !slices.Equal(got, want[:1]) {
				t.Errorf("the source holds %v, want [m-000]", got)
			}
		})
	}
}

// TestRedriveStopsForAnotherConsumer: a consumer that is not a re-drive and
// begins on a quorum DLQ during a re-drive (a quorum queue does not enforce
// the exclusive consumer) stops it at its next window's start, though its
// own cancelled windows count as consumers there too. Each copy ends in one
// place, once.
func TestRedriveStopsForAnotherConsumer(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	dlq, src := b.queue("dlq", amqp.Table{"x-queue-type": "quorum"}), b.queue("src", nil)
	const copies = 20
	first := slowRedriveOfHalf(t, b, dlq, src, "other-", copies)
	ch := b.channel()
	if err := ch.Qos(1, 0, false); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.Consume(dlq, "", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	r := <-first
	if r.code != exitFailure || !strings.Contains(r.stderr, "stopped: 1 other consumer(s) of "+dlq+" began during the redrive") {
		t.Errorf("redrive beside another consumer: exit %d, want %d, stopped\n%s%s", r.code, exitFailure, r.stdout, r.stderr)
	}
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every copy back in a queue", func() bool { return b.ready(src)+b.ready(dlq) == copies })
	moved, left := ids(b.take(src)), ids(b.take(dlq))
	all := slices.Sorted(slices.Values(append(slices.Clone(moved), left...)))
	if len(slices.Compact(all)) != copies || len(moved) == copies/2 {
		t.Errorf("the source holds %v, the DLQ %v: want each of the %d copies once, not all chosen moved", moved, left, copies)
	}
}

// TestRedriveStopsForAConsumerBegunInItsWindow: a re-drive of every copy
// takes each copy it reads, so it reads in one window throughout; a plain
// consumer that begins on a quorum DLQ during it is counted within that
// window, and the re-drive stops (before: it read on beside the consumer to
// its end and counted nothing). Every copy is in the DLQ or the source, once.
func TestRedriveStopsForAConsumerBegunInItsWindow(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	dlq, src := b.queue("dlq", amqp.Table{"x-queue-type": "quorum"}), b.queue("src", nil)
	const copies = 40
	var msgs []amqp.Publishing
	for i := range copies {
		msgs = append(msgs, lilyCopy(fmt.Sprintf("w-%02d", i), "t", "permanent failure", "permanent", src, 1, time.Now()))
	}
	b.publish(dlq, msgs...)
	done := make(chan result, 1)
	// At 10 a second the run lasts 4 s: several counts after the consumer
	// begins.
	go func() { done <- b.lilydlq("redrive", dlq, "-all", "-rate", "10") }()
	waitFor(t, "the re-drive to move a copy", func() bool { return b.ready(src) >= 2 })
	ch := b.channel()
	if err := ch.Qos(1, 0, false); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.Consume(dlq, "", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.code != exitFailure || !strings.Contains(r.stderr, "stopped: 1 other consumer(s) of "+dlq+" began during the redrive") {
		t.Errorf("redrive beside a consumer begun in its window: exit %d, want %d, stopped\n%s%s", r.code, exitFailure, r.stdout, r.stderr)
	}
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every copy back in a queue", func() bool { return b.ready(src)+b.ready(dlq) == copies })
	moved, left := ids(b.take(src)), ids(b.take(dlq))
	all := slices.Sorted(slices.Values(append(slices.Clone(moved), left...)))
	if len(slices.Compact(all)) != copies || len(left) == 0 {
		t.Errorf("the source holds %v, the DLQ %v: want each of the %d copies once, not all moved", moved, left, copies)
	}
}

// TestRedriveRefusesTheDLQAsSource: a copy whose source queue is the DLQ
// being read is not sent there (it would go round, and lose its failure
// facts), nor one whose source is the re-drive's own lock (deleted with its
// connection, and the copy with it); each stays, reported, and the others
// move.
func TestRedriveRefusesTheDLQAsSource(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	dlq, src := b.queue("dlq", nil), b.queue("src", nil)
	b.publish(dlq,
		lilyCopy("loop", "t", "permanent failure", "permanent", dlq, 1, time.Now()),
		lilyCopy("fine", "t", "permanent failure", "permanent", src, 1, time.Now()),
		// Its own lock, which its connection's end deletes, and what went
		// there with it.
		lilyCopy("lock", "t", "permanent failure", "permanent", lockName(dlq), 1, time.Now()),
	)
	r := b.lilydlq("redrive", dlq, "-all")
	if r.code != exitFailure {
		t.Errorf("redrive: exit %d, want %d\n%s%s", r.code, exitFailure, r.stdout, r.stderr)
	}
	for _, want := range []string{"not moved loop (t): its destination is the DLQ itself", "not moved lock (t): its destination is a re-drive's lock", "moved fine (t) -> " + src, "moved 1 of 3 chosen", "2 not moved"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("redrive lacks %q:\n%s", want, r.stdout)
		}
	}
	b.assertCounts(dlq, 2)
	b.assertCounts(src, 1)
	got := b.take(dlq)
	if len(got) != 2 || got[0].MessageId != "loop" || got[1].MessageId != "lock" || got[0].Headers[envelope.HeaderFailureReason] != "permanent failure" {
		t.Errorf("the DLQ holds %v: want loop and lock, with their failure facts", ids(got))
	}
}

// TestRedriveRefusesADirectReplyAddress: a copy whose source is a direct
// reply-to address (a requester's channel, gone here) is not sent there: the
// publish would go without mandatory, the broker would drop it unreported,
// and the ACK would delete the only copy. It stays, reported, exit 1; the
// others move.
func TestRedriveRefusesADirectReplyAddress(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	dlq, src := b.queue("dlq", nil), b.queue("src", nil)
	addr := b.replyAddress()
	b.publish(dlq,
		lilyCopy("reply", "t", "permanent failure", "permanent", addr, 1, time.Now()),
		lilyCopy("fine", "t", "permanent failure", "permanent", src, 1, time.Now()),
	)
	for _, dry := range []bool{true, false} {
		args := []string{"redrive", dlq, "-all"}
		if dry {
			args = append(args, "-dry-run")
		}
		r := b.lilydlq(args...)
		if r.code != exitFailure || !strings.Contains(r.stdout, "not moved reply (t): its destination is a direct reply-to address, not a queue") || !strings.Contains(r.stdout, "1 of 2 chosen") {
			t.Errorf("redrive (dry run %t): exit %d, want %d\n%s%s", dry, r.code, exitFailure, r.stdout, r.stderr)
		}
	}
	b.assertCounts(dlq, 1)
	b.assertCounts(src, 1)
	if got := b.take(dlq); len(got) != 1 || got[0].MessageId != "reply" || got[0].Headers[envelope.HeaderFailureQueue] != addr {
		t.Errorf("the DLQ holds %v: want reply, with its failure facts", ids(got))
	}
}

// replyAddress is the direct reply-to address of a requester whose channel
// has since closed: what a request's reply_to carries, as the broker wrote
// it.
func (b *broker) replyAddress() string {
	b.t.Helper()
	requests := b.queue("requests", nil)
	ch := b.channel()
	defer ch.Close()
	if _, err := ch.Consume("amq.rabbitmq.reply-to", "", true, false, false, false, nil); err != nil {
		b.t.Fatalf("consume the reply-to pseudo-queue: %v", err)
	}
	if err := ch.Publish("", requests, false, false, amqp.Publishing{ReplyTo: "amq.rabbitmq.reply-to", Body: []byte("request")}); err != nil {
		b.t.Fatalf("publish a request: %v", err)
	}
	waitFor(b.t, "the request", func() bool { return b.ready(requests) == 1 })
	got := b.take(requests)
	if len(got) != 1 || !frame.DirectReply("", got[0].ReplyTo) {
		b.t.Fatalf("the request came as %v", got)
	}
	return got[0].ReplyTo
}

// TestRedriveKeepsPoisonCopies: the copy of a poison message keeps only its
// sanitized identity and body, and the guard refuses it again: it stays,
// reported, and the others move; -to moves it where the operator says.
func TestRedriveKeepsPoisonCopies(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	dlq, src, parking := b.queue("dlq", nil), b.queue("src", nil), b.queue("parking", nil)
	poisoned := lilyCopy("poison-1", "t", "poison envelope: message_id not printable ASCII", "poison", src, 1, time.Now())
	poisoned.Headers[envelope.HeaderPoisonCopy] = true
	// An earlier Lily's poison copy: its kind, no mark.
	unmarked := lilyCopy("poison-0", "t", "poison envelope: message_id not printable ASCII", "poison", src, 1, time.Now())
	b.publish(dlq, unmarked, poisoned, lilyCopy("fine", "t", "permanent failure", "permanent", src, 1, time.Now()))
	r := b.lilydlq("redrive", dlq, "-all")
	for _, want := range []string{"not moved poison-0 (t): it is the copy of a poison message", "not moved poison-1 (t): it is the copy of a poison message", "moved fine (t) -> " + src} {
		if r.code != exitFailure || !strings.Contains(r.stdout, want) {
			t.Errorf("redrive: exit %d, lacks %q\n%s%s", r.code, want, r.stdout, r.stderr)
		}
	}
	b.assertCounts(dlq, 2)
	b.assertCounts(src, 1)
	r = b.lilydlq("redrive", dlq, "-id", "poison-1", "-to", parking)
	if r.code != exitOK {
		t.Errorf("redrive -to: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	b.assertCounts(dlq, 1)
	if got := b.take(parking); len(got) != 1 || got[0].MessageId != "poison-1" || got[0].Headers[envelope.HeaderPoisonCopy] != true {
		t.Errorf("%s holds %v, want poison-1 still marked", parking, ids(got))
	}
}

// TestRedriveMissingID: an -id no copy carries is reported, and the exit code
// is 1; the ids found move.
func TestRedriveMissingID(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	dlq, src := b.queue("dlq", nil), b.queue("src", nil)
	b.publish(dlq, lilyCopy("here", "t", "permanent failure", "permanent", src, 1, time.Now()))
	r := b.lilydlq("redrive", dlq, "-id", "here", "-id", "nowhere")
	if r.code != exitFailure || !strings.Contains(r.stderr, "no copy with id nowhere in "+dlq+"\n") || strings.Contains(r.stderr, "id here") {
		t.Errorf("redrive: exit %d, want %d\n%s%s", r.code, exitFailure, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, "moved 1 of 1 chosen") {
		t.Errorf("redrive output:\n%s", r.stdout)
	}
	b.assertCounts(dlq, 0)
	b.assertCounts(src, 1)

	r = b.lilydlq("redrive", dlq, "-id", "nowhere", "-dry-run")
	if r.code != exitFailure || !strings.Contains(r.stderr, "no copy with id nowhere in "+dlq) {
		t.Errorf("redrive -dry-run of a missing id: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// TestRedriveChoseNothing: a selection that chose no copy (a reason pasted
// as list cut it, a substring or a type no copy has) says so and exits 1, as
// an -id no copy carries does, so that it is not taken for a run that moved
// all it chose; -all with a criterion is a usage error; -all of an empty DLQ
// is done.
func TestRedriveChoseNothing(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	dlq, src := b.queue("dlq", nil), b.queue("src", nil)
	long := "permanent failure: " + strings.Repeat("upstream said no ", 15)
	b.publish(dlq,
		lilyCopy("m1", "t", long, "permanent", src, 1, time.Now()),
		lilyCopy("m2", "t", "permanent failure", "permanent", src, 1, time.Now()),
	)
	l := b.lilydlq("list", dlq)
	cut, _, ok := strings.Cut(l.stdout, "... (1)")
	if l.code != exitOK || !ok {
		t.Fatalf("list: want the long reason cut: exit %d\n%s", l.code, l.stdout)
	}
	cut = cut[strings.LastIndex(cut, "\n")+1:] + "..."
	for _, args := range [][]string{
		{"-reason", cut}, {"-reason-contains", "no such thing"}, {"-type", "nope"}, {"-type", "nope", "-dry-run"},
	} {
		r := b.lilydlq(append([]string{"redrive", dlq}, args...)...)
		if r.code != exitFailure || !strings.Contains(r.stderr, "lilydlq redrive: the selection chose none of the 2 copies read from "+dlq+": nothing was moved") {
			t.Errorf("redrive %q: exit %d, want %d\n%s%s", args, r.code, exitFailure, r.stdout, r.stderr)
		}
		b.assertCounts(dlq, 2)
	}
	// -all with a criterion is refused before anything is read: it took the
	// criterion, and a typo in it moved nothing with exit 0.
	r := b.lilydlq("redrive", dlq, "-all", "-type", "nope")
	if r.code != exitUsage || !strings.Contains(r.stderr, "-all chooses every copy: give it alone") {
		t.Errorf("redrive -all -type nope: exit %d, want %d\n%s%s", r.code, exitUsage, r.stdout, r.stderr)
	}
	b.assertCounts(dlq, 2)
	b.assertCounts(src, 0)
	if r := b.lilydlq("redrive", dlq, "-all"); r.code != exitOK {
		t.Fatalf("redrive -all: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	b.assertCounts(src, 2)
	if r := b.lilydlq("redrive", dlq, "-all"); r.code != exitOK || strings.Contains(r.stderr, "chose none") {
		t.Errorf("redrive -all of an empty DLQ: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// TestRedriveLongReasons: two reasons alike beyond what list prints are told
// apart: -reason with one whole reason moves its copy only.
func TestRedriveLongReasons(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	dlq, src := b.queue("dlq", nil), b.queue("src", nil)
	common := "permanent failure: " + strings.Repeat("upstream said no ", 15)
	b.publish(dlq,
		lilyCopy("fraud", "t", common+"(fraud)", "permanent", src, 1, time.Now()),
		lilyCopy("funds", "t", common+"(funds)", "permanent", src, 1, time.Now()),
	)
	l := b.lilydlq("list", dlq)
	if l.code != exitOK || !strings.Contains(l.stdout, "... (2)") {
		t.Fatalf("list: want both under one cut reason: exit %d\n%s", l.code, l.stdout)
	}
	b.assertCounts(dlq, 2) // the list's copies are back
	r := b.lilydlq("redrive", dlq, "-reason", common+"(funds)")
	if r.code != exitOK || !strings.Contains(r.stdout, "moved 1 of 1 chosen") {
		t.Errorf("redrive: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	b.assertCounts(dlq, 1)
	b.assertCounts(src, 1)
	if got := ids(b.take(src)); !slices.Equal(got, []string{"funds"}) {
		t.Errorf("source holds %v", got)
	}
}

// TestRedriveBrokerDeadLettered: copies the broker dead-lettered itself (a
// NACK without requeue, a length limit, a quorum queue's delivery limit)
// carry x-death and no Lily facts; list names their reason and source from
// x-death, and a re-drive sends each back there, without x-death.
func TestRedriveBrokerDeadLettered(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	// A quorum DLQ, so that the list below leaves an x-delivery-count on
	// each copy, which the re-drive must not carry to the source queues.
	dlq := b.queue("dlq", amqp.Table{"x-queue-type": "quorum"})
	toDLQ := amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq}
	with := func(extra amqp.Table) amqp.Table {
		t := amqp.Table{}
		for k, v := range toDLQ {
			t[k] = v
		}
		for k, v := range extra {
			t[k] = v
		}
		return t
	}
	rejecting := b.queue("rejecting", toDLQ)
	short := b.queue("short", with(amqp.Table{"x-max-length": int32(1)}))
	limited := b.queue("limited", with(amqp.Table{"x-queue-type": "quorum", "x-delivery-limit": int32(1)}))

	b.publish(rejecting, amqp.Publishing{MessageId: "rejected-1", Type: "big", Body: []byte("too large")})
	ch := b.channel()
	if d, ok, err := ch.Get(rejecting, false); err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	} else if err := d.Nack(false, false); err != nil {
		t.Fatal(err)
	}
	b.publish(short, amqp.Publishing{MessageId: "maxlen-1"}, amqp.Publishing{MessageId: "stays"})
	b.publish(limited, amqp.Publishing{MessageId: "limit-1"})
	for range 2 { // returned twice: one more than the limit of 1
		d, ok, err := ch.Get(limited, false)
		if err != nil || !ok {
			t.Fatalf("get from the quorum queue: %v %v", ok, err)
		}
		if err := d.Nack(false, true); err != nil {
			t.Fatal(err)
		}
	}
	_ = ch.Close()
	b.assertCounts(dlq, 3)
	if got := ids(b.take(short)); !slices.Equal(got, []string{"stays"}) {
		t.Fatalf("the length-limited queue holds %v", got)
	}

	r := b.lilydlq("list", dlq)
	if r.code != exitOK {
		t.Fatalf("list: exit %d\n%s", r.code, r.stderr)
	}
	for _, want := range []string{"rejected (1)", "maxlen (1)", "delivery_limit (1)", "rejected-1", rejecting, short, limited, " broker "} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("list lacks %q:\n%s", want, r.stdout)
		}
	}
	b.assertCounts(dlq, 3)

	r = b.lilydlq("redrive", dlq, "-all")
	if r.code != exitOK {
		t.Fatalf("redrive: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	b.assertCounts(dlq, 0)
	for q, id := range map[string]string{rejecting: "rejected-1", short: "maxlen-1", limited: "limit-1"} {
		b.assertCounts(q, 1)
		got := b.take(q)
		if len(got) != 1 || got[0].MessageId != id {
			t.Errorf("%s holds %v, want %s", q, ids(got), id)
			continue
		}
		for k, v := range got[0].Headers {
			// The quorum source counts its own deliveries, from 0.
			if k == headerDeliveryCount && q == limited && v == int64(0) {
				continue
			}
			if k == headerDeath || k == headerDeliveryCount || strings.HasPrefix(k, "x-first-death-") || strings.HasPrefix(k, envelope.HeaderFailurePrefix) {
				t.Errorf("%s: re-driven with header %s: %v", id, k, v)
			}
		}
		if got[0].Headers[envelope.HeaderRedrivenFrom] != dlq {
			t.Errorf("%s: headers %v", id, got[0].Headers)
		}
	}
}

// TestRedriveStripsXDeathSoARetryIsNotDropped shows why a re-drive drops
// x-death. RabbitMQ drops, silently, a message dead-lettered into a queue its
// x-death says it already left for a reason other than rejected: as Lily's
// retry bucket does when its TTL ends. A DLQ copy of a quorum queue's
// delivery limit, sent back with its x-death, vanishes at its first retry;
// re-driven by lilydlq, it comes back.
func TestRedriveStripsXDeathSoARetryIsNotDropped(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	dlq := b.queue("dlq", nil)
	src := b.queue("src", nil)
	bucket := b.queue("src.retry", amqp.Table{"x-message-ttl": int32(200), "x-dead-letter-exchange": "", "x-dead-letter-routing-key": src})
	death := []any{amqp.Table{"queue": src, "reason": "delivery_limit", "count": int64(1), "exchange": "", "routing-keys": []any{src}, "time": time.Now()}}

	// As the runtime's retry copy would carry it: the original's headers.
	b.publish(bucket, amqp.Publishing{MessageId: "kept-x-death", Headers: amqp.Table{headerDeath: death}})
	// A message without x-death expires after it, and the bucket
	// dead-letters in order: once that one is in the source, the first would
	// be there before it, had the broker not dropped it as a cycle.
	b.publish(bucket, amqp.Publishing{MessageId: "no-x-death"})
	waitFor(t, "the message without x-death to come through", func() bool { return b.ready(src) > 0 })
	if got := b.take(src); len(got) != 1 || got[0].MessageId != "no-x-death" {
		t.Fatalf("the source holds %v after the bucket expired; want only no-x-death", ids(got))
	}

	b.publish(dlq, amqp.Publishing{MessageId: "redriven", Headers: amqp.Table{headerDeath: death}})
	if r := b.lilydlq("redrive", dlq, "-all"); r.code != exitOK {
		t.Fatalf("redrive: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	d := b.take(src)
	if len(d) != 1 {
		t.Fatalf("source holds %d after the re-drive, want 1", len(d))
	}
	b.publish(bucket, amqp.Publishing{MessageId: d[0].MessageId, Headers: d[0].Headers})
	waitFor(t, "the retry to come back", func() bool { return b.ready(src) == 1 })
	b.assertCounts(bucket, 0)
}

// waitFor polls cond until it holds, failing the test at the deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(deadline)
	for {
		began := time.Now()
		if cond() {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("waited %v for %s", deadline, what)
		}
		// A check that takes long (a rabbitmqctl run, about a second of
		// CPU) waits as long again, so a poll keeps at most half a core busy.
		time.Sleep(max(100*time.Millisecond, time.Since(began)))
	}
}

// A copy carrying the producer's CC header (sender-selected distribution)
// goes back to its source alone: with CC, the publish would reach the queue
// it names as well, a duplicate for another service.
func TestRedriveLeavesCCBehind(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	dlq, src := b.queue("dlq", nil), b.queue("src", nil)
	other := b.queue("other", nil)
	copied := lilyCopy("copied", "order.placed", "permanent failure", "permanent", src, 1, time.Now())
	copied.Headers["CC"] = []any{other}
	b.publish(dlq, copied)
	// The producer's CC sent the original to other too; that copy is
	// other's own business.
	if got := b.take(other); len(got) != 1 {
		t.Fatalf("other holds %d, want the one its CC sent", len(got))
	}
	if r := b.lilydlq("redrive", dlq, "-all"); r.code != exitOK {
		t.Fatalf("redrive: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	b.assertCounts(dlq, 0)
	b.assertCounts(other, 0)
	got := b.take(src)
	if len(got) != 1 || got[0].Headers["CC"] != nil {
		t.Fatalf("the source holds %d copies (headers %v), want 1 without CC", len(got), got)
	}
}

// A copy whose re-driven form would not fit a frame (the re-drive's headers
// added to one near the limit) is not moved and is reported, and the run
// goes on with the others: it is the copy's trouble, not the broker's.
func TestRedriveGoesOnPastACopyTooLargeToSend(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	dlq, src := b.queue("dlq", nil), b.queue("src", nil)
	// A copy with nothing for the re-drive to strip (no failure facts, no
	// x-death), moved with -to: its headers only grow.
	big := amqp.Publishing{MessageId: "big", Type: "t", ContentType: "application/json", Headers: amqp.Table{}, Body: []byte(`{}`)}
	// The largest pad with which the copy itself still fits a frame.
	pad := sort.Search(frame.Size, func(n int) bool {
		big.Headers["pad"] = strings.Repeat("p", n)
		return frame.Check(big, frame.Size) != nil
	}) - 1
	big.Headers["pad"] = strings.Repeat("p", pad)
	small := big
	small.MessageId, small.Headers = "small", amqp.Table{}
	b.publish(dlq, big, small)
	for _, dry := range []bool{true, false} {
		args := []string{"redrive", dlq, "-all", "-to", src}
		moved := "moved small (t) -> " + src
		if dry {
			args, moved = append(args, "-dry-run"), "would move small (t) -> "+src
		}
		r := b.lilydlq(args...)
		if r.code != exitFailure || !strings.Contains(r.stdout, "not moved big (t): re-driven, it would not fit a frame") || !strings.Contains(r.stdout, moved) {
			t.Errorf("redrive (dry run %t): exit %d, want %d\n%s%s", dry, r.code, exitFailure, r.stdout, r.stderr)
		}
	}
	b.assertCounts(dlq, 1)
	if got := ids(b.take(src)); !slices.Equal(got, []string{"small"}) {
		t.Errorf("the source holds %v", got)
	}
}

// A copy the Publisher would refuse before writing it (here: as many
// headers as the client decodes, which the re-drive's own take past what a
// Publisher sends beside its publish id) is not moved and is reported, and
// the run goes on with the others. At the DLQ's head, it had ended every
// redrive -all there.
func TestRedriveGoesOnPastACopyThePublisherRefuses(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	dlq, src := b.queue("dlq", nil), b.queue("src", nil)
	wide := amqp.Publishing{MessageId: "wide", Type: "t", Headers: amqp.Table{envelope.HeaderFailureQueue: src}, Body: []byte(`{}`)}
	for i := len(wide.Headers); i < frame.MaxTableEntries; i++ {
		wide.Headers[fmt.Sprintf("h%04d", i)] = nil
	}
	b.publish(dlq, wide, lilyCopy("fine", "t", "permanent failure", "permanent", src, 1, time.Now()))
	for _, dry := range []bool{true, false} {
		args := []string{"redrive", dlq, "-all"}
		moved := "moved fine (t) -> " + src
		if dry {
			args, moved = append(args, "-dry-run"), "would move fine (t) -> "+src
		}
		r := b.lilydlq(args...)
		if r.code != exitFailure || !strings.Contains(r.stdout, "not moved wide (t): re-driven, the publisher would refuse it (headers: 8194 headers and the publish id, more than the 8192 a client decodes)") || !strings.Contains(r.stdout, moved) {
			t.Errorf("redrive (dry run %t): exit %d, want %d\n%s%s", dry, r.code, exitFailure, r.stdout, r.stderr)
		}
	}
	b.assertCounts(dlq, 1)
	if got := ids(b.take(src)); !slices.Equal(got, []string{"fine"}) {
		t.Errorf("the source holds %v", got)
	}
}

// A re-drive that read fewer copies than were ready (taken or expired
// meanwhile) says so and exits 1, as export does: it may not have moved
// everything it was asked to.
func TestRedriveIncomplete(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	dlq, src := b.queue("dlq", nil), b.queue("src", nil)
	expiring := lilyCopy("expiring", "t", "permanent failure", "permanent", src, 1, time.Now())
	expiring.Expiration = "1"
	b.publish(dlq, lilyCopy("stays", "t", "permanent failure", "permanent", src, 1, time.Now()), expiring)
	r := b.lilydlq("redrive", dlq, "-all")
	if r.code != exitFailure || !strings.Contains(r.stderr, "lilydlq redrive: incomplete: 1 of the 2 copies ready when the read began were read") {
		t.Errorf("redrive: exit %d, want %d\n%s%s", r.code, exitFailure, r.stdout, r.stderr)
	}
	b.assertCounts(dlq, 0)
	if got := ids(b.take(src)); !slices.Equal(got, []string{"stays"}) {
		t.Errorf("the source holds %v", got)
	}
}

// TestRedriveDoesNotTrustAForgedSource: a producer wrote Lily's failure
// facts naming another service's queue on a message that then expired into
// the DLQ, the broker's x-death naming the queue it came from. The re-drive
// sends it to neither and says why (exit 1); -to sends it where the operator
// says.
func TestRedriveDoesNotTrustAForgedSource(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	dlq := b.queue("dlq", nil)
	orders := b.queue("orders", amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
	payments := b.queue("payments", nil)
	b.publish(orders, amqp.Publishing{MessageId: "forged-1", Type: "OrderPlaced", Expiration: "1", Headers: amqp.Table{
		envelope.HeaderFailureQueue:  payments,
		envelope.HeaderFailureReason: "permanent failure: card declined",
		envelope.HeaderFailureKind:   "permanent",
	}})
	b.assertCounts(dlq, 1) // expired into it

	r := b.lilydlq("list", dlq)
	if r.code != exitOK || !strings.Contains(r.stdout, payments+" or "+orders+"?") {
		t.Errorf("list: exit %d; want both queues named\n%s%s", r.code, r.stdout, r.stderr)
	}
	// The list handed the copy back: once, under load, the re-drive at once
	// after it found the DLQ empty ("0 ready when the read began").
	b.assertCounts(dlq, 1)
	r = b.lilydlq("redrive", dlq, "-reason", "permanent failure: card declined")
	if r.code != exitFailure || !strings.Contains(r.stdout, "not moved forged-1 (OrderPlaced): its source is in doubt") {
		t.Errorf("redrive: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	b.assertCounts(dlq, 1)
	b.assertCounts(payments, 0)
	b.assertCounts(orders, 0)

	r = b.lilydlq("redrive", dlq, "-all", "-to", orders)
	if r.code != exitOK || !strings.Contains(r.stdout, "moved forged-1 (OrderPlaced) -> "+orders) {
		t.Errorf("redrive -to: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	b.assertCounts(dlq, 0)
	b.assertCounts(payments, 0)
	if got := ids(b.take(orders)); !slices.Equal(got, []string{"forged-1"}) {
		t.Errorf("%s holds %v", orders, got)
	}
}

// TestRedriveCutShortSaysTheACKsAreUnproven: the DLQ is deleted under a
// paced re-drive, so the broker ends the reading consumer. Only the
// channel's close-ok proves the ACKs of the copies moved, and none comes:
// the error says that the last ones may be in the DLQ as well.
func TestRedriveCutShortSaysTheACKsAreUnproven(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	dlq, src := b.queue("dlq", nil), b.queue("src", nil)
	var copies []amqp.Publishing
	for i := range 200 {
		copies = append(copies, lilyCopy(fmt.Sprintf("cut-%d", i), "t", "permanent failure: x", "permanent", src, 1, time.Now()))
	}
	b.publish(dlq, copies...)
	done := make(chan result, 1)
	go func() { done <- b.lilydlq("redrive", dlq, "-all", "-rate", "20", "-window", "4") }()
	for end := time.Now().Add(deadline); b.ready(src) < 2; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the re-drive moved nothing")
		}
	}
	ch := b.channel()
	if _, err := ch.QueueDelete(dlq, false, false, false); err != nil {
		t.Fatal(err)
	}
	_ = ch.Close()
	r := <-done
	if r.code != exitFailure || !strings.Contains(r.stderr, "copies taken are unproven: the last ones may be in the DLQ as well") {
		t.Errorf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// A copy is checked against the frame size the broker negotiated, which
// may be below the one Lily asks for: the broker would refuse it at the
// send, ending the run, where it should be reported as not moved.
func TestFitsTheNegotiatedFrame(t *testing.T) {
	t.Parallel()
	p := amqp.Publishing{MessageId: "m", Headers: amqp.Table{"pad": strings.Repeat("p", 5000)}}
	if err := frame.CheckSent(p, frame.Size); err != nil {
		t.Errorf("at %d bytes: %v", frame.Size, err)
	}
	if err := frame.CheckSent(p, 4096); err == nil || !strings.Contains(err.Error(), "more than the 4088 of a frame") {
		t.Errorf("at 4096 bytes (RabbitMQ's least frame_max): %v", err)
	}
}

// TestRedrivenCount: x-lily-redriven counts one more re-drive, and a count
// no re-drive wrote (negative, not an integer, or at MaxInt64, where adding
// one wrapped to MinInt64) starts again at 1; never the copy's own, which
// the runtime's work identity must tell from the re-driven copy's.
func TestRedrivenCount(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   any
		want int64
	}{
		{nil, 1}, {int64(0), 1}, {int64(1), 2}, {int32(7), 8}, {uint32(math.MaxUint32), math.MaxUint32 + 1},
		{int64(-5), 1}, {int64(math.MinInt64), 1}, {"9", 1}, {3.0, 1},
		{int64(math.MaxInt64 - 1), math.MaxInt64}, {int64(math.MaxInt64), 1},
	} {
		d := &amqp.Delivery{Headers: amqp.Table{}}
		if c.in != nil {
			d.Headers[envelope.HeaderRedriven] = c.in
		}
		got := redriven(d, "dlq", false).Headers[envelope.HeaderRedriven]
		if got != c.want {
			t.Errorf("x-lily-redriven %v (%T): re-driven %v (%T), want %d", c.in, c.in, got, got, c.want)
		}
		if n, ok := wire.HeaderInt(c.in); ok && got == n {
			t.Errorf("x-lily-redriven %v: re-driven, the same count", c.in)
		}
	}
}

// TestInterval: every -rate the command takes paces: its interval is
// positive and at most an hour, where NaN, an infinity or 1e-10 had given 0
// or an overflowed duration, which meant no limit.
func TestInterval(t *testing.T) {
	t.Parallel()
	if got := interval(0); got != 0 {
		t.Errorf("interval(0) = %s, want 0 (no limit)", got)
	}
	for _, rate := range []float64{minRate, 0.5, 1, 400, maxRate} {
		if got := interval(rate); got <= 0 || got > time.Hour {
			t.Errorf("interval(%g) = %s", rate, got)
		}
	}
	if got := interval(20); got != 50*time.Millisecond {
		t.Errorf("interval(20) = %s, want 50ms", got)
	}
}

// TestLockName: a re-drive lock names its DLQ where that fits in AMQP's 255
// bytes, and is still one of its own for a longer name.
func TestLockName(t *testing.T) {
	t.Parallel()
	if got := lockName("orders.dlq"); got != "lilydlq.redrive.orders.dlq" {
		t.Errorf("lockName(orders.dlq) = %q", got)
	}
	long, longer := strings.Repeat("q", 255), strings.Repeat("q", 254)+"r"
	for _, q := range []string{long, longer, strings.Repeat("q", 255-len(lockPrefix))} {
		if n := len(lockName(q)); n > maxQueue {
			t.Errorf("the lock of a %d-byte name is %d bytes", len(q), n)
		}
	}
	if lockName(long) == lockName(longer) {
		t.Errorf("two long names share the lock %s", lockName(long))
	}
}

// TestRedriveOutputFailsAtTheSummary: a re-drive whose stdout fails at its
// summary, once every copy moved, exits 1 and writes the summary to stderr
// instead, with why, once (before: exit 0, stderr empty).
func TestRedriveOutputFailsAtTheSummary(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	dlq, src := b.queue("dlq", nil), b.queue("src", nil)
	written := 0 // the lines of the copies, before the summary
	for _, id := range []string{"s-0", "s-1", "s-2"} {
		b.publish(dlq, lilyCopy(id, "t", "permanent failure", "permanent", src, 1, time.Now()))
		written += len(fmt.Sprintf("moved %s (t) -> %s\n", id, src))
	}
	r := b.lilydlqTo(&failingWriter{left: written, err: syscall.EPIPE}, "redrive", "-all", dlq)
	if r.code != exitFailure || !strings.Contains(r.stderr, "lilydlq redrive: "+dlq+": moved 3 of 3 chosen (3 read, 3 ready") ||
		strings.Count(r.stderr, "lilydlq redrive: its output was closed (broken pipe)") != 1 {
		t.Errorf("redrive with its output closed at the summary: exit %d, stderr:\n%s", r.code, r.stderr)
	}
	b.assertCounts(dlq, 0)
	b.assertCounts(src, 3)
}

// TestRedriveIDOfTwoCopies: as purge -id, a redrive -id that more than one
// copy carries moves nothing, of any -id (before: it moved both, exit 0),
// lists the copies and exits 1, also as a dry run; narrowed by -until it
// moves the earlier alone; -every moves each copy chosen.
func TestRedriveIDOfTwoCopies(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	dlq, src := b.queue("dlq", nil), b.queue("src", nil)
	later := time.Now().Truncate(time.Second)
	earlier := later.Add(-time.Hour)
	b.publish(dlq,
		lilyCopy("order-42", "t", "old attempt", "permanent", src, 1, earlier),
		lilyCopy("other", "t", "permanent failure", "permanent", src, 1, earlier),
		lilyCopy("order-42", "t", "after redrive", "permanent", src, 1, later),
	)
	for _, dry := range []bool{true, false} {
		args := []string{"redrive", "-id", "order-42", "-id", "other", dlq}
		if dry {
			args = append(args, "-dry-run")
		}
		r := b.lilydlq(args...)
		if r.code != exitFailure || strings.Contains(r.stdout, "move order-42") || strings.Contains(r.stdout, "move other") ||
			!strings.Contains(r.stderr, "2 copies carry the id order-42") ||
			!strings.Contains(r.stderr, earlier.UTC().Format(time.RFC3339)+"  t  old attempt") ||
			!strings.Contains(r.stderr, "refusing to choose among them: nothing moved") {
			t.Errorf("%v: exit %d, want %d, nothing moved\n%s%s", args, r.code, exitFailure, r.stdout, r.stderr)
		}
		b.assertCounts(dlq, 3)
		b.assertCounts(src, 0)
	}
	r := b.lilydlq("redrive", "-id", "order-42", "-until", later.UTC().Format(time.RFC3339), dlq)
	if r.code != exitOK || !strings.Contains(r.stdout, "moved order-42 (t) -> "+src+"\n") || !strings.Contains(r.stdout, "moved 1 of 1 chosen") {
		t.Errorf("redrive -id -until: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	b.assertCounts(dlq, 2)
	b.publish(dlq, lilyCopy("order-42", "t", "after redrive", "permanent", src, 1, later))
	r = b.lilydlq("redrive", "-id", "order-42", "-every", dlq)
	if r.code != exitOK || strings.Count(r.stdout, "moved order-42 (t)") != 2 {
		t.Errorf("redrive -id -every: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	b.assertCounts(dlq, 1)
	b.assertCounts(src, 3)
}

// TestRedriveIDLosesItsReaderMidway: the broker closes a paced redrive -id's
// reading connection (rabbitmqctl close_connection) once its first copy
// moved. Each copy is ACKed once its publish is confirmed, and nothing is
// published once the reading channel is closed: every copy ends in the DLQ
// or in its queue, at most the one in flight in both, and the run exits 1
// saying the broker closed the read.
func TestRedriveIDLosesItsReaderMidway(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	dlq, src := b.queue("dlq", nil), b.queue("src", nil)
	args := []string{"redrive", dlq, "-rate", "1"}
	var copies []amqp.Publishing
	for i := range 30 {
		id := fmt.Sprintf("lost-%02d", i)
		copies = append(copies, lilyCopy(id, "t", "permanent failure", "permanent", src, 1, time.Now()))
		args = append(args, "-id", id)
	}
	b.publish(dlq, copies...)
	done := make(chan result, 1)
	go func() { done <- b.lilydlq(args...) }()
	waitFor(t, "the re-drive to move a copy", func() bool { return b.ready(src) >= 1 })
	closeReader(t, dlq)
	var r result
	select {
	case r = <-done:
	case <-time.After(deadline):
		t.Fatal("the re-drive did not end after its reading connection closed")
	}
	t.Logf("the re-drive said:\n%s%s", r.stdout, r.stderr)
	if r.code != exitFailure || !strings.Contains(r.stderr, "the broker closed the reading channel") {
		t.Errorf("exit %d, want %d, saying the broker closed the read\n%s%s", r.code, exitFailure, r.stdout, r.stderr)
	}
	waitFor(t, "the DLQ to take back what the read held", func() bool {
		_, unacked := queueCounts(t, dlq)
		return unacked == 0
	})
	moved := ids(b.take(src))
	if len(moved) == 0 || len(moved) == len(copies) {
		t.Fatalf("the source holds %d of %d copies: the close came too late, or nothing moved\n%s%s", len(moved), len(copies), r.stdout, r.stderr)
	}
	in := map[string]int{}
	for _, id := range append(moved, ids(b.take(dlq))...) {
		in[id]++
	}
	var both []string
	for _, c := range copies {
		switch in[c.MessageId] {
		case 0:
			t.Errorf("%s is in neither queue", c.MessageId)
		case 2:
			both = append(both, c.MessageId)
		}
	}
	if len(both) > 1 {
		t.Errorf("%d copies are in the DLQ and in their queue, want 1 at most: %v\n%s%s", len(both), both, r.stdout, r.stderr)
	}
	for _, id := range moved {
		if !strings.Contains(r.stdout, "moved "+id+" (t) -> "+src+"\n") {
			t.Errorf("%s reached its queue, but stdout does not say so\n%s", id, r.stdout)
		}
	}
}

// closeReader has the broker close the connection that holds dlq's
// re-drive lock, the re-drive's reading connection, as an operator's
// rabbitmqctl close_connection would: the tests run side by side, so the
// connection's name, the same for every re-drive, does not pick it out.
func closeReader(t *testing.T, dlq string) {
	t.Helper()
	out, err := faults.Rabbitmqctl(t.Context(), "list_queues", "-q", "--no-table-headers", "name", "owner_pid")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(out) {
		name, pid, _ := strings.Cut(strings.TrimSpace(line), "\t")
		if name == lockName(dlq) && pid != "" {
			if _, err := faults.Rabbitmqctl(t.Context(), "close_connection", pid, "lilydlq test"); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("no connection holds the lock of %s", dlq)
}

// TestForeignCopyByTheTypeTheRuntimeRead: a copy of a message in a
// header-mapped producer's envelope (its type and version in event_type and
// schema_version; no AMQP type, no x-lily-version) is listed, shown and
// chosen by the type and version the runtime read (x-lily-failure-type,
// -version), where list printed "-" and -type chose none. One made before
// the runtime wrote them is not, and a selection that chose none says why.
func TestForeignCopyByTheTypeTheRuntimeRead(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	dlq, src := b.queue("dlq", nil), b.queue("src", nil)
	foreign := func(id string, facts bool) amqp.Publishing {
		p := lilyCopy(id, "", "permanent failure: no such sku", "permanent", src, 1, time.Now())
		delete(p.Headers, envelope.HeaderVersion)
		p.Headers["event_type"], p.Headers["event_id"], p.Headers["schema_version"] = "com.shop.OrderCreated", id, "3"
		if facts {
			p.Headers[envelope.HeaderFailureType], p.Headers[envelope.HeaderFailureVersion] = "com.shop.OrderCreated", int64(3)
		}
		return p
	}
	b.publish(dlq, foreign("new-1", true), foreign("old-1", false))

	r := b.lilydlq("list", dlq)
	if r.code != exitOK {
		t.Fatalf("list: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	row := map[string][]string{}
	for line := range strings.Lines(r.stdout) {
		if f := strings.Fields(line); len(f) > 3 {
			row[f[0]] = f[1:3]
		}
	}
	if fmt.Sprint(row["new-1"]) != "[com.shop.OrderCreated 3]" || fmt.Sprint(row["old-1"]) != "[- -]" {
		t.Errorf("list: TYPE and VERSION of new-1 %q, of old-1 %q; want the type and version read, and none\n%s", row["new-1"], row["old-1"], r.stdout)
	}
	r = b.lilydlq("show", dlq, "-id", "new-1")
	if !strings.Contains(r.stdout, "  type:          com.shop.OrderCreated\n  version:       3\n") {
		t.Errorf("show: exit %d, want the type and version read\n%s%s", r.code, r.stdout, r.stderr)
	}

	r = b.lilydlq("redrive", dlq, "-type", "com.shop.OrderCreated")
	if r.code != exitOK {
		t.Fatalf("redrive -type: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if got := ids(b.take(src)); fmt.Sprint(got) != "[new-1]" {
		t.Errorf("redrive -type moved %q, want [new-1]", got)
	}
	b.assertCounts(dlq, 1)
	r = b.lilydlq("redrive", dlq, "-type", "com.shop.OrderCreated")
	if r.code != exitFailure || !strings.Contains(r.stderr, "chose none of the 1 copies") ||
		!strings.Contains(r.stderr, "by the type the runtime read, x-lily-failure-type, which copies made before Lily wrote it do not carry") {
		t.Errorf("redrive -type of a copy without the fact: exit %d, want %d and why\n%s%s", r.code, exitFailure, r.stdout, r.stderr)
	}
	b.assertCounts(dlq, 1)
}
