package runtime

import (
	"strings"
	"testing"
	"time"

	"github.com/lily-mq/lily/runtime/internal/decide"
	"github.com/lily-mq/lily/runtime/internal/outcome"
)

// Health tells the destinations whose latest handoff failed, each alone: a
// DLQ that confirms its copies hides no bucket that refuses them, and a
// confirm to a destination clears that destination.
func TestHandoffFailuresByDestination(t *testing.T) {
	f := newHandoffFailures(decide.Policy{DeadLetterQueue: "q.dlq", Buckets: []string{"q.retry.1s", "q.retry.5s"}})
	if got := f.text(); got != "" {
		t.Fatalf("nothing failed yet, and text is %q", got)
	}
	before := time.Now().UTC().Truncate(time.Second)
	f.note(outcome.HandoffEvidence{Destination: "q.retry.5s", Status: outcome.HandoffReturned, Detail: "unroutable: no queue q.retry.5s"})
	f.note(outcome.HandoffEvidence{Destination: "q.dlq", Status: outcome.HandoffNacked, Detail: "the broker refused the publish"})
	f.note(outcome.HandoffEvidence{Destination: "q.dlq", Status: outcome.HandoffConfirmed})
	f.note(outcome.HandoffEvidence{Destination: "elsewhere", Status: outcome.HandoffFailed, Detail: "not ours"})
	got := f.text()
	want := ": q.retry.5s returned: unroutable: no queue q.retry.5s (deliveries whose settlement needs a handoff there are requeued)"
	if !strings.HasPrefix(got, "handoffs fail since ") || !strings.HasSuffix(got, want) {
		t.Fatalf("text is %q, want the since, then %q", got, want)
	}
	since, err := time.Parse(time.RFC3339, strings.TrimSuffix(strings.TrimPrefix(got, "handoffs fail since "), want))
	if err != nil || since.Before(before) {
		t.Errorf("since %v (%v), want a time from %v on", since, err, before)
	}
	// Another failure there keeps the since and tells the latest.
	f.note(outcome.HandoffEvidence{Destination: "q.retry.5s", Status: outcome.HandoffNacked, Detail: "the broker refused the publish"})
	if again := f.text(); !strings.HasPrefix(again, "handoffs fail since "+since.Format(time.RFC3339)+": q.retry.5s nacked: ") {
		t.Errorf("after another failure: %q", again)
	}
	f.note(outcome.HandoffEvidence{Destination: "q.retry.5s", Status: outcome.HandoffConfirmed})
	if got := f.text(); got != "" {
		t.Errorf("every destination confirmed since, and text is %q", got)
	}
}

// What Health quotes of a failure is sanitized and bounded, and so is the
// number of destinations it names.
func TestHandoffFailuresBounded(t *testing.T) {
	buckets := []string{"q.retry.1s", "q.retry.2s", "q.retry.3s", "q.retry.4s", "q.retry.5s"}
	f := newHandoffFailures(decide.Policy{DeadLetterQueue: "q.dlq", Buckets: buckets})
	for _, b := range append(buckets, "q.dlq") {
		f.note(outcome.HandoffEvidence{Destination: b, Status: outcome.HandoffFailed, Detail: "\x1b[31m" + strings.Repeat("x", 1000)})
	}
	got := f.text()
	if strings.Contains(got, "\x1b") || !strings.Contains(got, `\x1b[31m`) {
		t.Errorf("the escape is not written as \\x1b: %q", got)
	}
	if !strings.Contains(got, "q.retry.4s failed") || strings.Contains(got, "q.retry.5s") || !strings.Contains(got, "; and 2 more failing (") {
		t.Errorf("want the first four named and two more counted: %q", got)
	}
	if len(got) > 4*(len("q.retry.1s failed: ")+decide.MaxCause+8)+200 {
		t.Errorf("%d bytes: %q", len(got), got)
	}
}

// Health's why while ready tells a block of the handoffs first, then the
// failing handoffs, then the topology's refusals, then a declare of it
// unanswered, all that are so.
func TestReadyWhy(t *testing.T) {
	refused := "no exchange x"
	since := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC).UnixNano()
	for _, c := range []struct {
		blocked    string
		failing    string
		drifted    *string
		unanswered int64
		want       string
	}{
		{"", "", nil, 0, ""},
		{"", "handoffs fail since T: d", nil, 0, "consuming, but handoffs fail since T: d"},
		{"", "", &refused, 0, "consuming, but the broker refused the topology when it was declared again: no exchange x"},
		{"", "handoffs fail since T: d", &refused, 0, "consuming, but handoffs fail since T: d; and the broker refused the topology when it was declared again: no exchange x"},
		{"", "", nil, since, "consuming, but the broker has not answered the topology declared again since 2025-01-02T03:04:05Z"},
		{"", "handoffs fail since T: d", &refused, since, "consuming, but handoffs fail since T: d; and the broker refused the topology when it was declared again: no exchange x; and the broker has not answered the topology declared again since 2025-01-02T03:04:05Z"},
		{"the broker blocks B", "", nil, 0, "consuming, but the broker blocks B"},
		{"the broker blocks B", "handoffs fail since T: d", nil, 0, "consuming, but the broker blocks B; and handoffs fail since T: d"},
	} {
		if got := readyWhy(c.blocked, c.failing, c.drifted, c.unanswered); got != c.want {
			t.Errorf("readyWhy(%q, %q, %v, %d) = %q, want %q", c.blocked, c.failing, c.drifted, c.unanswered, got, c.want)
		}
	}
}

// A block of the handoffs is told with its start and the broker's reason,
// sanitized and bounded; nothing while none blocks.
func TestBlockedText(t *testing.T) {
	if got := blockedText(time.Time{}, "low on memory"); got != "" {
		t.Errorf("nothing blocked, and the text is %q", got)
	}
	since := time.Date(2025, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600))
	got := blockedText(since, "low on memory\x1b[31m"+strings.Repeat("x", 1000))
	if !strings.HasPrefix(got, "the broker blocks the handoffs' publishes since 2025-01-02T02:04:05Z (low on memory\\x1b[31m") {
		t.Errorf("blocked: %q", got)
	}
	if strings.Contains(got, "\x1b") || len(got) > decide.MaxCause+300 {
		t.Errorf("the reason is not sanitized and bounded: %q", got)
	}
}

// A handoff's note allocates nothing when it is confirmed, nor when it
// fails as the one before it did: it is on every handoff's path.
func TestHandoffFailuresNoteAllocates(t *testing.T) {
	f := newHandoffFailures(decide.Policy{DeadLetterQueue: "q.dlq", Buckets: []string{"q.retry.1s"}})
	confirmed := outcome.HandoffEvidence{Destination: "q.retry.1s", Status: outcome.HandoffConfirmed}
	if n := testing.AllocsPerRun(100, func() { f.note(confirmed) }); n != 0 {
		t.Errorf("a confirm allocates %v times", n)
	}
	nacked := outcome.HandoffEvidence{Destination: "q.dlq", Status: outcome.HandoffNacked, Detail: "the broker refused the publish"}
	f.note(nacked)
	if n := testing.AllocsPerRun(100, func() { f.note(nacked) }); n != 0 {
		t.Errorf("the same failure again allocates %v times", n)
	}
}

// A liveness probe on any of the usual paths is answered as liveness: read
// as readiness, it would fail while the broker is away and restart every
// pod. Only a path ending in /livez was, before.
func TestLivenessPath(t *testing.T) {
	for path, want := range map[string]bool{
		"/livez": true, "/livez/": true, "/healthz/live": true, "/health/liveness": true, "/live/": true, "livez": true,
		"/readyz": false, "/healthz": false, "/": false, "": false, "/livez/x": false, "/alive": false,
	} {
		if got := livenessPath(path); got != want {
			t.Errorf("liveness of %q: %t, want %t", path, got, want)
		}
	}
}
