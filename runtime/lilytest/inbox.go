package lilytest

import (
	"context"
	"errors"
	"sync"

	"github.com/lily-mq/lily/runtime"
)

// Inbox is an in-memory runtime.Inbox: a claim's work commits with its
// transaction, and a later claim of the same key by the same consumer is a
// duplicate, which the runtime ACKs without the handler. A claim while
// another of the same key is open (a handler past its timeout still holds
// it) is deferred, as a database's lock would defer it. Defer and FailCommit
// make the next claim or commit of a key go wrong.
//
// A key is what the runtime claims a message by, and what Record.MessageID
// shows: in Lily's envelope, the message id; in a CloudEvent, its source and
// id as "<source> <id>"; in a header-mapped profile (a Spring message, say),
// "headers <type> <id>", its type as Record.Type shows it. A message of a
// profile without ids has no key, and is never claimed.
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

// claim is one consumer's claim of one key.
type claim struct{ consumer, key string }

// Begin claims key for consumer in a new transaction.
func (in *Inbox) Begin(_ context.Context, consumer, key string) (runtime.InboxTx, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	c := claim{consumer, key}
	if why, ok := in.defers[key]; ok {
		delete(in.defers, key)
		return nil, errors.New("lilytest: " + why)
	}
	switch {
	case in.committed[c]:
		return nil, errors.Join(runtime.ErrDuplicate, errors.New("lilytest: "+key+" committed before"))
	case in.open[c]:
		return nil, errors.New("lilytest: another delivery holds the claim of " + key)
	}
	if in.open == nil {
		in.open, in.committed = map[claim]bool{}, map[claim]bool{}
	}
	in.open[c] = true
	return &tx{in: in, claim: c}, nil
}

// Defer makes the next claim of key fail with why, as one does while
// another worker holds its lease: the runtime requeues the delivery and
// spends no retry (on an ordered queue it claims again in line, within
// the same Deliver, after a pause).
func (in *Inbox) Defer(key, why string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.defers == nil {
		in.defers = map[string]string{}
	}
	in.defers[key] = why
}

// FailCommit makes the next commit of a claim of key answer err. An err
// that wraps runtime.ErrCommitAmbiguous is a commit whose answer was lost:
// the work commits all the same, so the redelivery meets it as a duplicate
// (on an ordered queue, the claim made again in line, within the same
// Deliver).
// Any other err commits nothing, and what the handler kept is dropped. A nil
// err is the answer of a commit that succeeded: the next commit of key
// commits, as if FailCommit had not been called for it.
func (in *Inbox) FailCommit(key string, err error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if err == nil {
		// Kept, a nil failure would commit nothing and answer success:
		// the redelivery would run the handler again.
		delete(in.commits, key)
		return
	}
	if in.commits == nil {
		in.commits = map[string]error{}
	}
	in.commits[key] = err
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
	err, failing := in.commits[c.key]
	delete(in.commits, c.key)
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
// transaction takes effect. A fake of the handler's own store uses it to
// write as the database would. It keeps nothing and fails when ctx carries
// no claim, and when the claim has ended (ctx outlived its handler, and the
// claim committed or rolled back), as a write into pginbox's transaction
// fails once it has ended; its errors are its own, neither
// pgoutbox.ErrNoTx nor pgx's. A handler past its timeout still holds its
// claim: it is rolled back when the handler returns.
func AfterCommit(ctx context.Context, f func()) error {
	t, ok := ctx.Value(txKey{}).(*tx)
	if !ok {
		return errNoClaim
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ended {
		return errClaimEnded
	}
	t.after = append(t.after, f)
	return nil
}

// AfterCommit's failures, and an outbox Recorder's Send's without a claim:
// the harness's own, not pgoutbox.ErrNoTx or pgx's closed transaction's,
// which errors.Is does not find in them.
var (
	errNoClaim    = errors.New("lilytest: no Inbox claim in ctx: call from a handler whose message a lilytest.Inbox claimed")
	errClaimEnded = errors.New("lilytest: the Inbox claim in ctx has ended: it committed or rolled back when its handler returned")
)
