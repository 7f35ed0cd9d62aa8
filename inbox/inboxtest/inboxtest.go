// Package inboxtest is the conformance suite every runtime.Inbox adapter
// passes: duplicates after a commit, a fresh claim after a rollback, one
// winner among concurrent claims, a claim waiting on an open one answering
// as that one ended (never claimed after its commit, never a duplicate
// after its rollback), consumers kept apart, keys as long as an
// envelope makes them, business writes that commit and roll back with the
// claim, and, where the harness can make the database abort a transaction,
// a commit of it reported failed. It asserts committed business rows and
// claim records, not just the absence of errors.
//
// It calls an adapter as the runtime does: Begin under a context that ends as
// Begin returns, the business writes and Commit or Rollback under others. A
// transaction tied to Begin's context (database/sql ties one to BeginTx's)
// fails it, as every Commit of it would fail under the runtime.
package inboxtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lily-mq/lily/runtime"
)

// Harness connects the suite to one adapter on a real database.
type Harness struct {
	// Inbox is the adapter under test. A claim competing with an open one
	// must defer within a few seconds (a short lock timeout or lease check):
	// the suite waits for it, and fails one that defers only as Begin's
	// context ends (a case's context lasts 30 seconds). Under the runtime
	// that context is the step's: a deferral at its end reads as a database
	// that did not answer. Two cases end the open claim holdFor (200 ms)
	// after the competing one began: a wait longer than that (a second,
	// say) has them test the answer given after it.
	Inbox runtime.Inbox
	// Write adds one business row with key inside the claim's transaction,
	// which ctx carries (it comes from InboxTx.Bind).
	Write func(ctx context.Context, key string) error
	// Rows counts the committed business rows with key.
	Rows func(ctx context.Context, key string) (int, error)
	// Claims counts the committed claim records of (consumer, messageID).
	Claims func(ctx context.Context, consumer, messageID string) (int, error)
	// Abort, when set, makes the database abort the claim's transaction,
	// which ctx carries, as a statement that fails does (on PostgreSQL,
	// one that raises an error; on MongoDB, a duplicate key), and returns
	// an error only when it could not. The suite then wants Commit to
	// fail for certain. Without it that case is skipped.
	Abort func(ctx context.Context) error
}

// Run runs the suite; each case uses consumer names no earlier run used, so
// the database need not be emptied between runs.
func Run(t *testing.T, h Harness) {
	t.Run("commit then duplicate", func(t *testing.T) {
		t.Parallel()
		c := newCase(t, h)
		c.claimWriteCommit(c.consumer, "m1")
		c.expectDuplicate(c.consumer, "m1")
	})
	t.Run("rollback then claim again", func(t *testing.T) {
		t.Parallel()
		c := newCase(t, h)
		tx := c.claim(c.consumer, "m1")
		c.write(tx, c.consumer, "m1")
		tx.Rollback(c.ctx)
		c.expect(c.consumer, "m1", 0)

		c.claimWriteCommit(c.consumer, "m1")
		c.expect(c.consumer, "m1", 1)
	})
	t.Run("concurrent claims: one claimed, one deferred", func(t *testing.T) {
		t.Parallel()
		c := newCase(t, h)
		answers := make([]answer, 2)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range answers {
			wg.Go(func() {
				<-start
				a := &answers[i]
				a.tx, a.err = c.begin(c.consumer, "m1")
				a.late = c.ctx.Err() != nil
			})
		}
		close(start)
		wg.Wait()
		var won runtime.InboxTx
		deferred := 0
		for _, a := range answers {
			switch {
			case a.err == nil && a.tx != nil:
				tx := c.track(a.tx)
				if won != nil {
					t.Fatal("both concurrent claims were granted")
				}
				won = tx
			case a.err != nil && !errors.Is(a.err, runtime.ErrDuplicate):
				deferred++
				if a.tx != nil {
					t.Errorf("deferred claim (%v) came with a transaction", a.err)
				}
				c.inTime(a)
			default:
				t.Errorf("concurrent claim: tx %v, err %v", a.tx, a.err)
			}
		}
		if won == nil || deferred != 1 {
			t.Fatalf("want one claimed and one deferred, got %+v", answers)
		}
		c.write(won, c.consumer, "m1")
		c.commit(won)
		c.expectDuplicate(c.consumer, "m1")
	})
	// A claim that waits on an open one (on a row lock, say) must look
	// again once that one ends: found committed, the message is a
	// duplicate. An adapter that looked before it waited, then inserted
	// its claim, would run the handler twice. Deferring is always allowed.
	t.Run("a claim waiting on one that commits: duplicate or deferred", func(t *testing.T) {
		t.Parallel()
		c := newCase(t, h)
		held := c.claim(c.consumer, "m1")
		c.write(held, c.consumer, "m1")
		a := c.competeUntil(c.consumer, "m1", func() { c.commit(held) })
		switch a.said() {
		case "claimed":
			t.Fatal("a claim waiting on an open one that then committed was granted, want a duplicate or a deferral: the handler would run twice")
		case "duplicate":
			if a.early {
				t.Fatalf("a claim competing with an open one answered %v before that one committed, want a deferral", a.err)
			}
		case "deferred":
			c.inTime(a)
		default:
			t.Fatalf("competing claim: tx %v, err %v", a.tx, a.err)
		}
		c.expectDuplicate(c.consumer, "m1")
	})
	// After a rollback nothing committed: the waiting claim may take the
	// message, or defer, but a duplicate would have its work ACKed undone.
	t.Run("a claim waiting on one that rolls back: claimed or deferred", func(t *testing.T) {
		t.Parallel()
		c := newCase(t, h)
		held := c.claim(c.consumer, "m1")
		c.write(held, c.consumer, "m1")
		a := c.competeUntil(c.consumer, "m1", func() { held.Rollback(c.ctx) })
		switch a.said() {
		case "claimed":
			if a.early {
				t.Fatal("a claim competing with an open one was granted before that one rolled back")
			}
			c.write(a.tx, c.consumer, "m1")
			c.commit(a.tx)
		case "duplicate":
			t.Fatalf("a claim waiting on an open one that then rolled back answered %v, want a claim or a deferral: the message's work would be ACKed undone", a.err)
		case "deferred":
			c.inTime(a)
			c.expect(c.consumer, "m1", 0)
			c.claimWriteCommit(c.consumer, "m1")
		default:
			t.Fatalf("competing claim: tx %v, err %v", a.tx, a.err)
		}
		c.expectDuplicate(c.consumer, "m1")
	})
	t.Run("consumers are independent", func(t *testing.T) {
		t.Parallel()
		c := newCase(t, h)
		other := c.consumer + "-other"
		// Both claims open at once: neither waits for the other.
		a := c.claim(c.consumer, "m1")
		b := c.claim(other, "m1")
		c.write(a, c.consumer, "m1")
		c.write(b, other, "m1")
		c.commit(a)
		c.commit(b)
		c.expectDuplicate(c.consumer, "m1")
		c.expectDuplicate(other, "m1")
	})
	t.Run("the longest keys", func(t *testing.T) {
		t.Parallel()
		c := newCase(t, h)
		// The longest key of each envelope: a message_id of 128 bytes, a
		// CloudEvent's "<source> <id>", a header-mapped "headers <type> <id>".
		long := strings.Repeat("i", 128)
		for _, id := range []string{long, long + " " + long, "headers " + long + " " + long} {
			c.claimWriteCommit(c.consumer, id)
			c.expectDuplicate(c.consumer, id)
		}
	})
	t.Run("a transaction the database aborted fails its commit", func(t *testing.T) {
		if h.Abort == nil {
			t.Skip("the harness cannot abort a transaction: set Harness.Abort")
		}
		t.Parallel()
		c := newCase(t, h)
		tx := c.claim(c.consumer, "m1")
		c.write(tx, c.consumer, "m1")
		if err := h.Abort(tx.Bind(c.ctx)); err != nil {
			t.Fatalf("Abort: %v", err)
		}
		// The database's answer is definite: an adapter that reports the
		// commit done, or unknown, has the runtime ACK work that never
		// happened, or defer where a retry is due.
		switch err := tx.Commit(c.ctx); {
		case err == nil:
			t.Fatal("Commit of a transaction the database aborted = nil, want an error")
		case errors.Is(err, runtime.ErrCommitAmbiguous):
			t.Fatalf("Commit of a transaction the database aborted = %v, want a failure that does not wrap runtime.ErrCommitAmbiguous", err)
		}
		c.expect(c.consumer, "m1", 0)
		c.claimWriteCommit(c.consumer, "m1")
		c.expectDuplicate(c.consumer, "m1")
	})
	t.Run("message ids are independent", func(t *testing.T) {
		t.Parallel()
		c := newCase(t, h)
		a := c.claim(c.consumer, "m1")
		c.claimWriteCommit(c.consumer, "m2")
		c.write(a, c.consumer, "m1")
		c.commit(a)
		c.expect(c.consumer, "m1", 1)
		c.expect(c.consumer, "m2", 1)
	})
}

type suiteCase struct {
	t        *testing.T
	h        Harness
	ctx      context.Context
	consumer string
}

func newCase(t *testing.T, h Harness) *suiteCase {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	name := strings.NewReplacer("/", ".", " ", "_", ":", "", ",", "").Replace(t.Name())
	return &suiteCase{t: t, h: h, ctx: ctx, consumer: fmt.Sprintf("%s.%d", name, time.Now().UnixNano())}
}

// answer is what Begin answered a claim competing with an open one.
type answer struct {
	tx  runtime.InboxTx
	err error
	// late: the case's context had ended when Begin returned.
	late bool
	// early: Begin returned before the open claim was ended.
	early bool
}

// said names the answer as the runtime reads it: "claimed", "duplicate" or
// "deferred", or "" for a transaction beside an error, or neither.
func (a answer) said() string {
	switch {
	case a.err == nil && a.tx != nil:
		return "claimed"
	case a.err == nil || a.tx != nil:
		return ""
	case errors.Is(a.err, runtime.ErrDuplicate):
		return "duplicate"
	}
	return "deferred"
}

// holdFor is how long competeUntil keeps the open claim once the competing
// one began: time for it to be waiting, under the adapter's wait.
const holdFor = 200 * time.Millisecond

// competeUntil begins a competing claim of (consumer, id), which an open
// claim holds, then calls end, which commits or rolls back the open one,
// once the competing claim answered or holdFor passed. Which came first is
// timing, not the adapter's: the cases accept a deferral either way.
func (c *suiteCase) competeUntil(consumer, id string, end func()) answer {
	answers := make(chan answer, 1)
	go func() {
		var a answer
		a.tx, a.err = c.begin(consumer, id)
		a.late = c.ctx.Err() != nil
		answers <- a
	}()
	var a answer
	received := false
	defer func() {
		// end failed the case: what the competing claim got is rolled back.
		if !received {
			if a := <-answers; a.tx != nil {
				a.tx.Rollback(context.Background())
			}
		}
	}()
	select {
	case a = <-answers:
		a.early, received = true, true
	case <-time.After(holdFor):
	}
	end()
	if !received {
		a, received = <-answers, true
	}
	if a.tx != nil {
		a.tx = c.track(a.tx)
	}
	return a
}

// inTime wants a deferral to have come before the case's context ended.
func (c *suiteCase) inTime(a answer) {
	c.t.Helper()
	if a.late {
		c.t.Errorf("competing claim deferred only as its context ended (%v), want it deferred well before", a.err)
	}
}

// businessKey names the business row a handler writes for a message.
func businessKey(consumer, id string) string { return consumer + "/" + id }

// begin calls Begin as the runtime does: within a context that ends as Begin
// returns, which the transaction must outlive.
func (c *suiteCase) begin(consumer, id string) (runtime.InboxTx, error) {
	ctx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	return c.h.Inbox.Begin(ctx, consumer, id)
}

// claim wants Begin to claim id for consumer, with an open transaction.
func (c *suiteCase) claim(consumer, id string) runtime.InboxTx {
	c.t.Helper()
	tx, err := c.begin(consumer, id)
	if err != nil || tx == nil {
		c.t.Fatalf("Begin(%s, %s) = %v, %v; want a claim", consumer, id, tx, err)
	}
	return c.track(tx)
}

// track rolls tx back when the test ends without having committed or rolled
// it back, on a failure say: an adapter need not allow a second call.
func (c *suiteCase) track(tx runtime.InboxTx) runtime.InboxTx {
	e := &endsOnce{InboxTx: tx}
	c.t.Cleanup(func() {
		if !e.ended {
			tx.Rollback(context.Background())
		}
	})
	return e
}

// endsOnce is a claim's transaction that knows whether it was ended.
type endsOnce struct {
	runtime.InboxTx
	ended bool
}

func (e *endsOnce) Commit(ctx context.Context) error {
	e.ended = true
	return e.InboxTx.Commit(ctx)
}

func (e *endsOnce) Rollback(ctx context.Context) {
	e.ended = true
	e.InboxTx.Rollback(ctx)
}

func (c *suiteCase) write(tx runtime.InboxTx, consumer, id string) {
	c.t.Helper()
	if err := c.h.Write(tx.Bind(c.ctx), businessKey(consumer, id)); err != nil {
		c.t.Fatalf("business write in the claim's transaction: %v", err)
	}
}

func (c *suiteCase) commit(tx runtime.InboxTx) {
	c.t.Helper()
	if err := tx.Commit(c.ctx); err != nil {
		c.t.Fatalf("Commit = %v, want committed", err)
	}
}

func (c *suiteCase) claimWriteCommit(consumer, id string) {
	c.t.Helper()
	tx := c.claim(consumer, id)
	c.write(tx, consumer, id)
	c.commit(tx)
}

// expectDuplicate wants a committed message to be claimed as a duplicate,
// leaving its one business row and claim record as they were.
func (c *suiteCase) expectDuplicate(consumer, id string) {
	c.t.Helper()
	c.expect(consumer, id, 1)
	tx, err := c.begin(consumer, id)
	if !errors.Is(err, runtime.ErrDuplicate) || tx != nil {
		if tx != nil {
			tx.Rollback(c.ctx)
		}
		c.t.Fatalf("Begin(%s, %s) = %v, %v; want no transaction and runtime.ErrDuplicate", consumer, id, tx, err)
	}
	c.expect(consumer, id, 1)
}

// expect checks the committed business rows and claim records of a message.
func (c *suiteCase) expect(consumer, id string, want int) {
	c.t.Helper()
	rows, err := c.h.Rows(c.ctx, businessKey(consumer, id))
	if err != nil {
		c.t.Fatalf("count business rows: %v", err)
	}
	claims, err := c.h.Claims(c.ctx, consumer, id)
	if err != nil {
		c.t.Fatalf("count claim records: %v", err)
	}
	if rows != want || claims != want {
		c.t.Errorf("%s %s: %d business rows and %d claim records, want %d of each", consumer, id, rows, claims, want)
	}
}
