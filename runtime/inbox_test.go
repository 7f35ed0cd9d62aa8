package runtime_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/runtime/internal/fixture"
)

// slowInbox claims each id as a database would: a claim is held by its
// transaction until it commits or rolls back, and a Begin meeting one held
// defers, as a lock timeout does; once committed, a claim answers
// ErrDuplicate. Its first Begin or its first Commit (as asked) outlives the
// step by sleeping, the claim held meanwhile; a Commit that sleeps still
// commits, as one whose answer was lost may have. It counts the rollbacks
// of the transactions a late Begin handed over.
type slowInbox struct {
	slowBegin, slowCommit atomic.Bool
	sleep                 time.Duration
	lateRollbacks         atomic.Int32
	mu                    sync.Mutex
	held, done            map[string]bool
}

// inboxStep is the step timeout of the tests of a slow inbox: its Begin or
// Commit sleeps past it, while it still carries a first connection on a
// loaded machine.
const inboxStep = 3 * time.Second

func newSlowInbox() *slowInbox {
	return &slowInbox{sleep: inboxStep + 1500*time.Millisecond, held: map[string]bool{}, done: map[string]bool{}}
}

func (i *slowInbox) Begin(_ context.Context, _, id string) (runtime.InboxTx, error) {
	i.mu.Lock()
	switch {
	case i.done[id]:
		i.mu.Unlock()
		return nil, errors.Join(runtime.ErrDuplicate, errors.New("claimed before"))
	case i.held[id]:
		i.mu.Unlock()
		return nil, errors.New("lock timeout: another transaction holds the claim")
	}
	i.held[id] = true
	i.mu.Unlock()
	late := i.slowBegin.CompareAndSwap(true, false)
	if late {
		time.Sleep(i.sleep)
	}
	return &slowTx{i: i, id: id, late: late}, nil
}

type slowTx struct {
	i    *slowInbox
	id   string
	late bool
}

func (t *slowTx) Bind(ctx context.Context) context.Context { return ctx }

func (t *slowTx) Commit(context.Context) error {
	if t.i.slowCommit.CompareAndSwap(true, false) {
		time.Sleep(t.i.sleep)
	}
	t.i.mu.Lock()
	defer t.i.mu.Unlock()
	t.i.done[t.id], t.i.held[t.id] = true, false
	return nil
}

func (t *slowTx) Rollback(context.Context) {
	if t.late {
		t.i.lateRollbacks.Add(1)
	}
	t.i.mu.Lock()
	defer t.i.mu.Unlock()
	t.i.held[t.id] = false
}

// slowInboxRun starts a consumer of a queue of the test's own with a slow
// inbox, made slow by slow, whose handler counts its calls, and publishes
// the message id.
func slowInboxRun(t *testing.T, id string, slow func(*slowInbox)) (runtime.QueueSpec, *slowInbox, *running, *atomic.Int32) {
	t.Helper()
	q := brokerSpec(t)
	declareTopology(t, q)
	inbox := newSlowInbox()
	slow(inbox)
	calls := new(atomic.Int32)
	r := start(t, q, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error { calls.Add(1); return nil },
		func(cfg *runtime.Config) { cfg.Inbox, cfg.StepTimeout = inbox, inboxStep })
	publish(t, q.Name, order(t, id))
	return q, inbox, r, calls
}

// untilAcked waits for a record of an ACK and returns the records until it.
func untilAcked(t *testing.T, r *running) []runtime.Record {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		recs := r.recorded()
		if i := slices.IndexFunc(recs, func(rec runtime.Record) bool { return rec.Path == runtime.PathAcked }); i >= 0 {
			return recs[:i+1]
		}
	}
	t.Fatalf("no ACK recorded in a minute: %+v", r.recorded())
	return nil
}

// A Begin that outlives its step defers the delivery without a retry spent,
// and the transaction it hands over late is rolled back, once, which frees
// its claim: a redelivery then claims the id and runs the handler.
func TestBrokerInboxBeginPastItsStepDefers(t *testing.T) {
	t.Parallel()
	q, inbox, r, calls := slowInboxRun(t, "begin-1", func(i *slowInbox) { i.slowBegin.Store(true) })
	recs := untilAcked(t, r)
	for _, rec := range recs[:len(recs)-1] {
		wantPath(t, rec, runtime.PathRequeued)
		if rec.Commit != "deferred" || rec.Handler != "" || rec.Attempt != 1 {
			t.Errorf("a deferral: %+v", rec)
		}
	}
	if last := recs[len(recs)-1]; len(recs) < 2 || last.Handler != "ok" || last.Attempt != 1 || calls.Load() != 1 {
		t.Errorf("records %+v, handler ran %d times", recs, calls.Load())
	}
	if n := inbox.lateRollbacks.Load(); n != 1 {
		t.Errorf("the late transaction was rolled back %d times, want 1", n)
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, q.Topology.DeadLetterQueue: {0, 0}})
	r.stop()
}

// A Commit that outlives its step is ambiguous: the delivery is requeued
// without a retry spent, and once the commit has gone through after all its
// redelivery meets the claim and is ACKed as a duplicate, the handler not
// run again.
func TestBrokerInboxCommitPastItsStepIsAmbiguous(t *testing.T) {
	t.Parallel()
	q, _, r, calls := slowInboxRun(t, "commit-1", func(i *slowInbox) { i.slowCommit.Store(true) })
	recs := untilAcked(t, r)
	// The first delivery's record may follow a redelivery's (byAttempt says
	// why): it is the one whose handler ran.
	first := slices.IndexFunc(recs[:len(recs)-1], func(rec runtime.Record) bool { return rec.Handler == "ok" })
	if first < 0 {
		t.Fatalf("no record of the handler's run before the ACK: %+v", recs)
	}
	wantPath(t, recs[first], runtime.PathRequeued)
	if recs[first].Commit != "ambiguous" || recs[first].Attempt != 1 {
		t.Errorf("the ambiguous commit: %+v", recs[first])
	}
	for _, rec := range slices.Delete(slices.Clone(recs[:len(recs)-1]), first, first+1) {
		if rec.Path != runtime.PathRequeued || rec.Commit != "deferred" {
			t.Errorf("a redelivery while the commit ran: %+v", rec)
		}
	}
	if last := recs[len(recs)-1]; len(recs) < 2 || last.Commit != "duplicate" || last.Attempt != 1 || calls.Load() != 1 {
		t.Errorf("records %+v, handler ran %d times", recs, calls.Load())
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, q.Topology.DeadLetterQueue: {0, 0}})
	if rep := r.stop(); rep.Duplicates != 1 {
		t.Errorf("report: %s", rep)
	}
}
