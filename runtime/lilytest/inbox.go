package lilytest

import (
	"context"
	"errors"
	"sync"

	"github.com/lily-mq/lily/runtime"
)

// Inbox is an in-memory runtime.Inbox: a claim's work commits with its
// transaction, and a later claim of the same message id by the same
// consumer is a duplicate, which the runtime ACKs without the handler. A
// claim while another of the same id is open (a handler past its timeout
// still holds it) is deferred, as a database's lock would defer it. Defer
// and FailCommit make the next claim or commit of a message go wrong.
//
// What a handler keeps with AfterCommit commits and rolls back with the
// claim. The zero value is ready to use; an Inbox is safe for concurrent use
// and may serve several harnesses, as one database serves several consumers.
type Inbox struct {
	mu        sync.Mutex
	committed map[claim]bool
	open      map[claim]bool
	defers    map[string]string
	commits   map[string]error
}

// claim is one consumer's claim of one message id.
type claim struct{ consumer, id string }

// Begin claims messageID for consumer in a new transaction.
func (in *Inbox) Begin(_ context.Context, consumer, messageID string) (runtime.InboxTx, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	c := claim{consumer, messageID}
	if why, ok := in.defers[messageID]; ok {
		delete(in.defers, messageID)
		return nil, errors.New("lilytest: " + why)
	}
	switch {
	case in.committed[c]:
		return nil, errors.Join(runtime.ErrDuplicate, errors.New("lilytest: "+messageID+" committed before"))
	case in.open[c]:
		return nil, errors.New("lilytest: another delivery holds the claim of " + messageID)
	}
	if in.open == nil {
		in.open, in.committed = map[claim]bool{}, map[claim]bool{}
	}
	in.open[c] = true
	return &tx{in: in, claim: c}, nil
}

// Defer makes the next claim of messageID fail with why, as one does while
// another worker holds its lease: the runtime requeues the delivery and
// spends no retry.
func (in *Inbox) Defer(messageID, why string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.defers == nil {
		in.defers = map[string]string{}
	}
	in.defers[messageID] = why
}

// FailCommit makes the next commit of messageID's claim answer err. An err
// that wraps runtime.ErrCommitAmbiguous is a commit whose answer was lost:
// the work commits all the same, so the redelivery meets it as a duplicate.
// Any other err commits nothing, and what the handler kept is dropped.
func (in *Inbox) FailCommit(messageID string, err error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.commits == nil {
		in.commits = map[string]error{}
	}
	in.commits[messageID] = err
}

// end closes claim c's transaction, committed or rolled back, and returns
// what its commit answers.
func (in *Inbox) end(c claim, commit bool) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	delete(in.open, c)
	if !commit {
		return nil
	}
	err, failing := in.commits[c.id]
	delete(in.commits, c.id)
	if failing && !errors.Is(err, runtime.ErrCommitAmbiguous) {
		return err
	}
	in.committed[c] = true
	return err
}

// tx is an open claim of the fake Inbox.
type tx struct {
	in    *Inbox
	claim claim
	mu    sync.Mutex
	ended bool
	after []func()
}

// txKey is the context key of the claim a handler runs in.
type txKey struct{}

func (t *tx) Bind(ctx context.Context) context.Context {
	return context.WithValue(ctx, txKey{}, t)
}

func (t *tx) Commit(context.Context) error {
	after, ok := t.end()
	if !ok {
		return nil
	}
	err := t.in.end(t.claim, true)
	if err == nil || errors.Is(err, runtime.ErrCommitAmbiguous) {
		for _, f := range after {
			f()
		}
	}
	return err
}

func (t *tx) Rollback(context.Context) {
	if _, ok := t.end(); ok {
		_ = t.in.end(t.claim, false)
	}
}

// end marks the transaction ended and returns what was kept for its
// commit; false when it had ended already (a second Commit or Rollback
// does nothing).
func (t *tx) end() ([]func(), bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ended {
		return nil, false
	}
	t.ended = true
	return t.after, true
}

// AfterCommit keeps f for the commit of the Inbox claim ctx runs in (a
// handler's context, or one derived from it): f runs when the claim
// commits, and never if it rolls back, as a write in the claim's
// transaction would take effect. It reports whether ctx carries a claim;
// without one, f is not kept. A fake of the handler's own store uses it to
// write as the database would.
func AfterCommit(ctx context.Context, f func()) bool {
	t, ok := ctx.Value(txKey{}).(*tx)
	if !ok {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.ended {
		t.after = append(t.after, f)
	}
	return true
}
