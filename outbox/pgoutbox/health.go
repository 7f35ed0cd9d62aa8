package pgoutbox

import (
	"strings"
	"sync/atomic"
	"time"

	"github.com/lily-mq/lily/internal/sanitize"
	"github.com/lily-mq/lily/runtime"
)

// maxWhy bounds the error a Health's why quotes, as a consumer's does.
const maxWhy = 200

// relayHealth is what Health reads of a Run: the run's loop writes it, a
// probe reads it from any goroutine, so every field is atomic.
type relayHealth struct {
	queue    atomic.Pointer[string]
	stopping <-chan struct{} // Run's ctx.Done()
	// looked: a look has succeeded.
	looked atomic.Bool
	// database is the failure of the relay's latest statement (its look,
	// record or sweep, or the search for its table); nil once one succeeds.
	database atomic.Pointer[failing]
	// broker is the failure of the latest publish the broker did not
	// answer; nil once the broker answers one.
	broker      atomic.Pointer[failing]
	lastSettled atomic.Int64 // Unix nanoseconds; 0: none yet
	copies      atomic.Int64 // possible copies so far, those omitted included
	ended       atomic.Pointer[string]
}

// failing is a failure that goes on: since when, and the latest's text.
type failing struct {
	since time.Time
	text  string
}

// note keeps err as the latest failure in slot, since the first of those
// in a row; nil clears it.
func note(slot *atomic.Pointer[failing], err error) {
	if err == nil {
		slot.Store(nil)
		return
	}
	f := &failing{since: time.Now(), text: sanitize.Text(err.Error(), maxWhy)}
	for {
		// Sends note from their own goroutines: the first failure in a
		// row keeps its time.
		was := slot.Load()
		if was != nil {
			f.since = was.since
		}
		if slot.CompareAndSwap(was, f) {
			return
		}
	}
}

// Health tells the relay's health now, as a Consumer's Health does for a
// consumer; it is cheap (a few atomic loads), so a probe may ask often.
//
// Live: Run is running, not yet returned (before Run, and once it returned,
// the relay publishes nothing; unlike a consumer's, it says so). Ready:
// live, not stopping, a look for due rows has succeeded, the relay's
// latest statement on the database did not fail, and the broker did not
// leave the latest publish unanswered (unconfirmed, or not written for a
// message the relay read: no connection, a channel closed, a refusal
// before the write), nor a send waiting for a connection that the
// publisher fails to get (a send waits until its deadline, four fifths of
// Lease). A publish the broker answers (confirmed, returned or nacked) and
// a statement that succeeds make it ready again. A row that
// fails so at every attempt (its body too large for the publisher's step, a
// missing exchange) keeps it not ready from each failure until another
// publish is answered. The relay learns of the broker only by publishing:
// with no row to publish it stays ready while the broker is away. Why
// says what keeps it from being ready, with the failure's bounded,
// sanitized text and since when; empty while ready. LastSettled is when a
// confirmed row was last deleted. Unresolved counts the possible copies so
// far (Run's report lists them, to its bound). IntakeStopped: Run's ctx is
// done, and the relay leases no more rows. Queue names the relay as its
// report does: "outbox " and its table.
func (r *Relay) Health() runtime.Health {
	h := runtime.Health{Queue: "outbox lily_outbox"}
	rh := r.health.Load()
	if rh == nil {
		h.Why = "not running"
		return h
	}
	h.Queue = *rh.queue.Load()
	h.IntakeStopped = isClosed(rh.stopping)
	if at := rh.lastSettled.Load(); at != 0 {
		h.LastSettled = time.Unix(0, at)
	}
	h.Unresolved = int(rh.copies.Load())
	if ended := rh.ended.Load(); ended != nil {
		h.Why = *ended
		return h
	}
	h.Live = true
	if h.IntakeStopped {
		h.Why = "stopping"
		return h
	}
	var told []string
	if f := rh.database.Load(); f != nil {
		told = append(told, "the database fails since "+f.since.UTC().Format(time.RFC3339)+", retrying: "+f.text)
	}
	if f := rh.broker.Load(); f != nil {
		told = append(told, "publishes fail since "+f.since.UTC().Format(time.RFC3339)+": "+f.text)
	}
	if told == nil && !rh.looked.Load() {
		told = append(told, "starting: no look for due rows has succeeded yet")
	}
	h.Ready = told == nil
	h.Why = strings.Join(told, "; and ")
	return h
}

// endedWith is Health's why once Run has returned err.
func endedWith(err error) *string {
	why := "Run returned"
	if err != nil {
		why = "Run failed: " + sanitize.Text(err.Error(), maxWhy)
	}
	return &why
}

// isClosed reports whether ch is closed (a nil ch never is).
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
