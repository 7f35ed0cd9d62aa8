package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/internal/sanitize"
	"github.com/lily-mq/lily/runtime/internal/decide"
	"github.com/lily-mq/lily/runtime/internal/guard"
	"github.com/lily-mq/lily/runtime/internal/outcome"
	"github.com/lily-mq/lily/runtime/internal/step"
)

// pipeline runs a dispatched delivery, in the journey's context ctx: scope open → inbox claim → handler in
// the claim's transaction → commit or rollback → cleanup → after_delivery.
// It returns the evidence; nothing here talks to the broker. release is a
// share of the delivery's work; pipeline returns it to be dropped now, or nil
// when an abandoned handler will drop it once it returns.
//
// A cleanup or after_delivery failure after a committed transaction is a
// retryable failure: the retry copy then meets the inbox's record of the
// commit and is ACKed as a duplicate, without running the handler again.
func (c *Consumer) pipeline(ctx context.Context, r *run, sl *slot, route routeFn, rd RawDelivery, deadline time.Time, release *shares) (outcome.Outcome, *shares) {
	var o outcome.Outcome
	base := ctx
	var cleanup func(context.Context) error
	if c.cfg.Scope != nil {
		type opened struct {
			ctx     context.Context
			cleanup func(context.Context) error
		}
		sc, err := userCall(c, sl, deadline, func(context.Context) (opened, error) {
			scoped, cleanup, err := c.cfg.Scope(ctx, rd)
			return opened{scoped, cleanup}, err
		}, func(late opened) {
			// Opened after the step gave up on it: nobody else will close it.
			if late.cleanup != nil {
				_ = c.userStep(sl, time.Time{}, late.cleanup)
			}
		})
		if err == nil && sc.ctx == nil {
			// The handler's context would be built on nothing: a panic on
			// the delivery's goroutine, out of every recover.
			if sc.cleanup != nil {
				_ = c.userStep(sl, deadline, sc.cleanup)
			}
			err = errors.New("returned no context")
		}
		if err != nil {
			o.StepAbandoned = gaveUp(err)
			o.Handler = outcome.HandlerResult{Kind: outcome.KindRetryable, Cause: sanitize.Text("scope: "+err.Error(), decide.MaxCause)}
			return o, release
		}
		base, cleanup = sc.ctx, sc.cleanup
	}
	var tx InboxTx
	claims := c.claims(rd.env)
	if claims {
		tx = c.claim(&o, rd, deadline)
		if tx != nil {
			base, tx = c.bind(&o, tx, base)
		}
	}
	if !claims || tx != nil {
		o.Handler = c.callHandler(r, sl, base, route, rd, abandoned{tx: tx, cleanup: cleanup, work: release, sl: sl})
		if o.Handler.Abandoned {
			if tx != nil {
				// Rolled back once the handler returns, which may be after
				// the record is written; without a claim there is nothing
				// to roll back, and Commit says nothing.
				o.Commit = outcome.CommitRollbackPending
			}
			release = nil
		} else {
			c.finish(&o, tx, cleanup, sl)
		}
	} else if cleanup != nil {
		c.finish(&o, tx, cleanup, sl)
	}
	if c.cfg.AfterDelivery != nil {
		// A copy: a step that outlives its timeout keeps running while o changes.
		seen := c.soFar(rd, o)
		if err := c.userStep(sl, deadline, func(ctx context.Context) error { return c.cfg.AfterDelivery(ctx, rd, seen) }); err != nil {
			o.StepAbandoned = o.StepAbandoned || gaveUp(err)
			o.AfterDelivery = sanitize.Text(err.Error(), decide.MaxCause)
		}
	}
	return o, release
}

// finish ends the transaction and the scope, each within a step of its own:
// the delivery's budget may be spent (a handler that waited for its slot, or
// outlived its timeout), and a transaction or a scope left open would hold
// its connection, and its claim's lock, for good. A cleanup given up on
// holds the lane of the journey's slot, sl, while it runs on.
func (c *Consumer) finish(o *outcome.Outcome, tx InboxTx, cleanup func(context.Context) error, sl *slot) {
	c.settleTx(o, tx)
	if cleanup != nil {
		if err := c.userStep(sl, time.Time{}, cleanup); err != nil {
			o.StepAbandoned = o.StepAbandoned || gaveUp(err)
			o.Cleanup = sanitize.Text(err.Error(), decide.MaxCause)
		}
	}
}

// abandoned is what an abandoned handler's worker finishes once the handler
// returns, since the handler may use its transaction and scope until then:
// the transaction rolled back, the scope cleaned up, the work's share
// dropped. sl is the journey's slot, whose lane a cleanup given up on
// holds.
type abandoned struct {
	tx      InboxTx
	cleanup func(context.Context) error
	work    *shares
	sl      *slot
}

func (c *Consumer) finishAbandoned(a abandoned) {
	var late outcome.Outcome
	late.Handler.Kind = outcome.KindRetryable // never commit behind the retry
	c.finish(&late, a.tx, a.cleanup, a.sl)
	if late.Cleanup != "" {
		c.cfg.Logger.Warn("lily abandoned handler's cleanup failed", "queue", c.spec.Name, "detail", late.Cleanup)
	}
	if a.work != nil {
		a.work.drop()
	}
}

// claims reports whether a delivery claims the inbox: when the consumer
// has one, unless its message's policy is none or it has no key.
func (c *Consumer) claims(env *guard.Envelope) bool {
	return c.cfg.Inbox != nil && c.inbox[env.Type] != envelope.InboxNone && env.Key() != ""
}

// claim asks the inbox for the delivery's key: its message id, or a
// CloudEvent's source and id. An inbox that cannot
// answer defers the delivery: that is the database's trouble, not the
// message's, and costs no application retry.
func (c *Consumer) claim(o *outcome.Outcome, rd RawDelivery, deadline time.Time) InboxTx {
	// Begin's error travels inside the answer, so that a transaction that
	// arrives late comes to the discard whatever came with it.
	type answer struct {
		tx  InboxTx
		err error
	}
	a, err := userCall(c, nil, deadline, func(ctx context.Context) (answer, error) {
		tx, err := c.cfg.Inbox.Begin(ctx, c.spec.Name, rd.env.Key())
		return answer{tx, err}, nil
	}, func(late answer) {
		// A claim that arrived after the step gave up on it: roll it back,
		// or its lock would defer every redelivery of the message.
		if late.tx != nil {
			c.rollback(late.tx)
		}
	})
	tx := a.tx
	if err == nil {
		err = a.err // the step returned in time: Begin's own answer
	}
	switch {
	case err == nil && tx != nil:
		o.Claim = outcome.InboxClaimed
		return tx
	case err == nil:
		o.Claim, o.Deferred, o.Reason = outcome.InboxDeferred, true, "inbox: Begin returned neither a transaction nor an error"
	case errors.Is(err, ErrDuplicate):
		o.Claim, o.Reason = outcome.InboxDuplicate, sanitize.Text(err.Error(), decide.MaxCause)
	default:
		o.Claim, o.Deferred, o.Reason = outcome.InboxDeferred, true, sanitize.Text("inbox: "+err.Error(), decide.MaxCause)
	}
	if tx != nil {
		// An adapter that answered no claim yet left a transaction open.
		c.rollback(tx)
	}
	return nil
}

// bind returns the handler's context carrying tx. An adapter's Bind that
// panics or returns no context would take the process down, or the
// handler's call with it: the claim is then rolled back and the delivery
// deferred, and bind returns a nil tx.
func (c *Consumer) bind(o *outcome.Outcome, tx InboxTx, base context.Context) (context.Context, InboxTx) {
	var bound context.Context
	why := "inbox: Bind returned no context"
	if p := recovered(func() { bound = tx.Bind(base) }); p != nil {
		why = fmt.Sprint("inbox: Bind panicked: ", p)
	} else if bound != nil {
		return bound, tx
	}
	o.Claim, o.Deferred, o.Reason = outcome.InboxDeferred, true, sanitize.Text(why, decide.MaxCause)
	c.rollback(tx)
	return base, nil
}

// settleTx commits the claim's transaction after a handler that succeeded, and
// rolls it back otherwise. A commit past the delivery's budget still counts:
// the delivery is then left to the broker, and its redelivery meets the
// committed claim. A commit that panicked is rolled back too: nothing else
// would end its transaction, which holds a connection and the claim's lock.
func (c *Consumer) settleTx(o *outcome.Outcome, tx InboxTx) {
	if tx == nil {
		return
	}
	if o.Handler.Kind != 0 {
		c.rollback(tx)
		o.Commit = outcome.CommitRolledBack
		return
	}
	// A Commit that panics or leaves by runtime.Goexit runs no more, and
	// nothing else would end its transaction, which holds a connection and
	// the claim's lock: it is rolled back once, by whichever comes second of
	// its break and the step giving up on it. One still running when the
	// step gives up may yet commit: no rollback races it.
	var state atomic.Int32
	commit := func(ctx context.Context) (error, error) {
		returned := false
		defer func() {
			if !returned && !state.CompareAndSwap(commitRunning, commitBroke) {
				c.rollback(tx) // broke after the step gave up on it
			}
		}()
		said := tx.Commit(ctx)
		returned = true
		return said, nil
	}
	said, err := userCall(c, nil, time.Time{}, commit, nil)
	switch {
	case err != nil:
		// The commit did not return in time or broke: its outcome is unknown.
		o.Commit, said = outcome.CommitAmbiguous, err
		if !state.CompareAndSwap(commitRunning, commitGivenUp) && state.Load() == commitBroke {
			c.rollback(tx)
		}
	case said == nil:
		o.Commit = outcome.CommitCommitted
		return
	case errors.Is(said, ErrCommitAmbiguous):
		o.Commit = outcome.CommitAmbiguous
	default:
		o.Commit = outcome.CommitFailed
	}
	o.Reason = sanitize.Text("commit: "+said.Error(), decide.MaxCause)
}

// The states of a commit step, as its break and the step giving up on it
// see them.
const (
	commitRunning = iota
	commitBroke   // it panicked or left by runtime.Goexit
	commitGivenUp // the step stopped waiting for it while it ran
)

// rollback rolls tx back within a step of its own, even when the delivery's
// budget is spent.
func (c *Consumer) rollback(tx InboxTx) {
	_ = c.userStep(nil, time.Time{}, func(ctx context.Context) error { tx.Rollback(ctx); return nil })
}

// userStep runs a step of user or adapter code (scope, inbox, cleanup,
// after_delivery) within the step timeout and the deadline, turning a panic
// into an error. While it runs, it holds the lane of sl, the journey's slot
// (nil: none).
func (c *Consumer) userStep(sl *slot, deadline time.Time, run func(context.Context) error) error {
	_, err := userCall(c, sl, deadline, func(ctx context.Context) (struct{}, error) { return struct{}{}, run(ctx) }, nil)
	return err
}

// userCall is userStep for a step with a result. A step that does not return
// in time keeps running on its own goroutine; a result that arrives after
// that goes to discard (when not nil), which releases what it holds.
func userCall[T any](c *Consumer, sl *slot, deadline time.Time, run func(context.Context) (T, error), discard func(T)) (T, error) {
	ctx, cancel := step.Context(c.cfg.StepTimeout, deadline)
	defer cancel()
	// The lane is held here, while the journey holds it too, and the step
	// takes the hold over as it starts. One given up on before it started
	// (or not started at all, its time up) is let go of below, and held
	// anew should it start late.
	lane := sl.holdLane()
	var taken atomic.Bool
	v, err := step.Open(ctx, func() (v T, err error) {
		held := lane
		if taken.Swap(true) {
			held = sl.holdLane()
		}
		defer held()
		c.userSteps.Add(1)
		defer c.userSteps.Add(-1)
		if p := recovered(func() { v, err = run(ctx) }); p != nil {
			return v, fmt.Errorf("panic: %v", p)
		}
		return v, err
	}, discard)
	if !taken.Swap(true) {
		lane()
	}
	if errors.Is(err, step.ErrTimeout) {
		// The user's code, or the database behind an inbox, was slow: not
		// the broker, which step's own error would name.
		err = step.Described(err, errUserStepTimeout)
	}
	return v, err
}

// gaveUp reports whether err, userCall's, says its step was given up on
// while it ran, and may be running still: userCall returns
// errUserStepTimeout itself then, and wrapped for one that failed as its
// time ran out, which has returned.
func gaveUp(err error) bool { return err == errUserStepTimeout }

// errUserStepTimeout: a step of user or adapter code did not return in time.
var errUserStepTimeout = errors.New("did not return within Config.StepTimeout (or the delivery's budget, when less was left)")
