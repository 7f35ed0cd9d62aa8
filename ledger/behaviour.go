package ledger

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/inbox/pginbox"
	"github.com/lily-mq/lily/internal/faults"
	"github.com/lily-mq/lily/runtime"
)

// Behaviour is what a message's handler does.
type Behaviour string

// The behaviours, and the fate each should reach.
const (
	Success   Behaviour = "success"                // acked
	Flaky     Behaviour = "retryable-then-success" // retried once, then acked
	Refused   Behaviour = "permanent"              // dead-lettered
	Panics    Behaviour = "panic"                  // panics on every attempt: dead-lettered when exhausted
	Slow      Behaviour = "slow"                   // 5 to 50 ms, then acked
	Hangs     Behaviour = "hang"                   // outlives its timeout on attempt 1, then acked
	InboxWork Behaviour = "inbox-backed"           // writes a row in the claim's transaction, then acked
)

// weights are per mille; InboxWork's share goes to Success without a database.
var weights = []struct {
	b Behaviour
	w int
}{{Success, 420}, {Flaky, 150}, {Refused, 60}, {Panics, 40}, {Slow, 125}, {Hangs, 5}, {InboxWork, 200}}

// dead says whether a behaviour should end in the DLQ.
func (b Behaviour) dead() bool { return b == Refused || b == Panics }

// Fate is where a message was found at the end.
type Fate string

// The fates.
const (
	Acked    Fate = "handled and acked"
	InDLQ    Fate = "in the DLQ"
	InBucket Fate = "in a retry bucket"
	InMain   Fate = "still in the main queue"
	Lost     Fate = "LOST"
)

// messageTyp is the AMQP type of the ledger's messages.
const messageTyp = "LedgerTest"

// bodyOf is the body of the ledger's message i.
func bodyOf(i int) []byte { return fmt.Appendf(nil, `{"n":%d}`, i) }

// assign gives each message its behaviour, from the seed.
func (r *run) assign() {
	rng := rand.New(rand.NewPCG(r.cfg.Seed, 0))
	for i := range r.cfg.N {
		id := fmt.Sprintf("m%07d", i)
		b := pick(rng.IntN(1000))
		if b == InboxWork && r.cfg.PostgresDSN == "" {
			b = Success
		}
		r.ids = append(r.ids, id)
		r.beh[id] = b
		r.slow[id] = time.Duration(5+rng.IntN(46)) * time.Millisecond
	}
}

func pick(n int) Behaviour {
	for _, w := range weights {
		if n < w.w {
			return w.b
		}
		n -= w.w
	}
	return Success
}

// handler is every message's handler for one consumer, whose report is
// sealed once sealed is set (its Run returned): it behaves, and notes a
// success returned before then (succeeded). A handler still running at the
// final abort is abandoned, and the inbox rolls back its late nil: one
// returned after the seal committed nothing, and vouches for no inbox
// duplicate. It tells ended how every run ended, in a record's words
// (endedAs), so that the accounting judges the records' handler results,
// and the copies' failure kinds, by what the ledger's own handler did.
func (r *run) handler(sealed *atomic.Bool, succeeded func(runtime.RawDelivery), ended func(runtime.RawDelivery, string)) func(context.Context, runtime.RawDelivery) error {
	return func(ctx context.Context, d runtime.RawDelivery) error {
		word := "panicked" // unless behave returns
		defer func() {
			// Within lateBy of its deadline, the runtime's wait for it may
			// have ended first: a run it may fairly call timed out. The
			// runtime sees the return only once these notes are sent, which
			// may stall (a child's write waits for every other event's), so
			// it is measured again after them; before them too, so that a
			// kill after the end's note leaves the timeout said.
			late := func() bool {
				deadline, ok := ctx.Deadline()
				return ok && time.Until(deadline) < lateBy
			}
			timedOut := late()
			if timedOut {
				ended(d, "timed out")
			}
			ended(d, word)
			if !timedOut && late() {
				ended(d, "timed out")
			}
		}()
		err := r.behave(ctx, d)
		word = endedAs(err)
		if err == nil && !sealed.Load() {
			succeeded(d)
		}
		return err
	}
}

// lateBy is how close to its deadline a run of the handler must return for
// the ledger to take a timeout of it as possible: wide for a return the
// scheduler delays under load, and well short of any behaviour's handling
// but a hang's.
const lateBy = 100 * time.Millisecond

// endedAs is a record's word for a run of the ledger's handler that
// returned err, read from the error the ledger made: its own Permanent
// field, not the runtime's classification of it.
func endedAs(err error) string {
	var qe *runtime.QueueHandlerError
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &qe) && qe.Permanent:
		return "permanent"
	}
	return "retryable"
}

// ending is how a run of one attempt ended, in a record's words.
type ending struct {
	workKey
	word string
}

// noteEnded notes in r that a run of d's attempt ended as word.
func (r *run) noteEnded(d runtime.RawDelivery, word string) {
	r.noteEnding(ending{workKey{d.MessageID(), d.Attempt()}, word})
}

// noteEnding notes e in r: a run of the handler here, or in a child process
// that told it.
func (r *run) noteEnding(e ending) {
	r.mu.Lock()
	r.ended[e] = true
	r.mu.Unlock()
}

// noteSuccess notes the success of d's attempt in r.
func (r *run) noteSuccess(d runtime.RawDelivery) {
	r.mu.Lock()
	r.succeeded[workKey{d.MessageID(), d.Attempt()}] = true
	r.mu.Unlock()
}

// behave counts the run, then does what the message's behaviour says.
func (r *run) behave(ctx context.Context, d runtime.RawDelivery) error {
	id, attempt := d.MessageID(), d.Attempt()
	r.mu.Lock()
	r.runs[workKey{id, attempt}]++
	r.mu.Unlock()
	r.arrived(d)
	if r.bursting.Load() {
		time.Sleep(burstHandling)
	}
	switch r.beh[id] {
	case Flaky:
		if attempt == 1 {
			return runtime.Retryable(errors.New("flaky: the first attempt fails"))
		}
	case Refused:
		return runtime.Permanent(errors.New("refused"))
	case Panics:
		return faults.Panics("ledger: this message panics")(ctx, d)
	case Slow:
		time.Sleep(r.slow[id])
	case Hangs:
		if attempt == 1 {
			// Its nil, 200 ms past the timeout, is a success like any other:
			// the runtime takes a result that comes before its wait for it
			// ended (a wake-up a loaded machine may delay longer), and gives
			// the run up otherwise; the records say which it did.
			release := make(chan struct{})
			time.AfterFunc(r.spec.HandlerTimeout+200*time.Millisecond, func() { close(release) })
			return faults.Hangs(release)(ctx, d)
		}
	case InboxWork:
		tx, ok := pginbox.Tx(ctx)
		if !ok {
			return runtime.Permanent(errors.New("no inbox transaction"))
		}
		slow := r.killArmed.CompareAndSwap(true, false)
		_, err := tx.Exec(ctx, "INSERT INTO "+r.table+" (message_id, attempt, slow) VALUES ($1, $2, $3)", id, attempt, slow)
		return err
	}
	return nil
}

// afterLate is the ending noted for an attempt whose after_delivery saw
// its time run out: the runtime may have given up on it and called the
// step failed, though it returns nil.
const afterLate = "after_delivery out of time"

// afterDelivery notes how a delivery the inbox settled as a duplicate came:
// it did not run the handler, and must be explained as a run would. It
// never fails: only the runtime's time for it can run out (afterLate).
func (r *run) afterDelivery(ctx context.Context, d runtime.RawDelivery, soFar runtime.Record) error {
	if soFar.Commit == "duplicate" {
		r.arrived(d)
	}
	if ctx.Err() != nil {
		r.noteEnded(d, afterLate)
	}
	return nil
}

// arrived notes how d came.
func (r *run) arrived(d runtime.RawDelivery) {
	k, a := arrivalOf(d)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.arrivals[k] = append(r.arrivals[k], a)
}

// arrivalOf is how d came: by which publish, and whether redelivered.
func arrivalOf(d runtime.RawDelivery) (workKey, arrival) {
	pub, _ := d.Header(envelope.HeaderHandoffID)
	return workKey{d.MessageID(), d.Attempt()}, arrival{fmt.Sprint(pub), d.Redelivered()}
}
