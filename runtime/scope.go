package runtime

import (
	"context"
	"fmt"
	"time"
)

// Scope opens per-delivery resources after dispatch (never for a rejected or
// unsupported delivery). It returns the context the handler runs in (derived
// from ctx) and a cleanup that runs after the handler and the commit. A scope
// that fails to open is a retryable failure, and the handler does not run.
type Scope func(ctx context.Context, d RawDelivery) (context.Context, func(context.Context) error, error)

// AfterDelivery runs last in the pipeline, after the commit and the cleanup,
// and sees the outcome so far. A failure keeps the delivery from being ACKed,
// as a cleanup failure does; a success is no evidence of the ACK, which comes
// later and may fail.
type AfterDelivery func(ctx context.Context, d RawDelivery, o Outcome) error

// pipeline runs a dispatched delivery: scope open → inbox claim → handler in
// the claim's transaction → commit or rollback → cleanup → after_delivery.
// It returns the evidence; nothing here talks to the broker.
//
// A cleanup or after_delivery failure after a committed transaction is a
// retryable failure: the retry copy then meets the inbox's record of the
// commit and is ACKed as a duplicate, without running the handler again.
func (c *Consumer) pipeline(r *run, sl *slot, route Route, rd RawDelivery, deadline time.Time) Outcome {
	var o Outcome
	base := r.work
	var cleanup func(context.Context) error
	if c.cfg.Scope != nil {
		var err error
		if base, cleanup, err = c.cfg.Scope(base, rd); err != nil {
			o.Handler = HandlerResult{Kind: KindRetryable, Cause: sanitize("scope: "+err.Error(), maxCause)}
			return o
		}
	}
	var tx InboxTx
	if c.cfg.Inbox != nil {
		tx = c.claim(&o, rd, deadline)
		if tx != nil {
			base = tx.Bind(base)
		}
	}
	if c.cfg.Inbox == nil || tx != nil {
		o.Handler = c.callHandler(r, sl, base, route, rd)
		c.settleTx(&o, tx, deadline)
	}
	if cleanup != nil {
		if err := c.bounded(deadline, cleanup); err != nil {
			o.Cleanup = sanitize(err.Error(), maxCause)
		}
	}
	if c.cfg.AfterDelivery != nil {
		if err := c.bounded(deadline, func(ctx context.Context) error { return c.cfg.AfterDelivery(ctx, rd, o) }); err != nil {
			o.AfterDelivery = sanitize(err.Error(), maxCause)
		}
	}
	return o
}

// claim asks the inbox for the delivery's message id. An inbox that cannot
// answer defers the delivery: that is the database's trouble, not the
// message's, and costs no application retry.
func (c *Consumer) claim(o *Outcome, rd RawDelivery, deadline time.Time) InboxTx {
	ctx, cancel := stepContext(c.cfg.StepTimeout, deadline)
	defer cancel()
	tx, status, reason, err := c.cfg.Inbox.Begin(ctx, c.spec.Name, rd.env.MessageID)
	switch {
	case err != nil:
		o.Claim, o.Deferred, o.Reason = InboxDeferred, true, sanitize("inbox: "+err.Error(), maxCause)
	case status == InboxClaimed && tx != nil:
		o.Claim = InboxClaimed
		return tx
	case status == InboxDuplicate:
		o.Claim, o.Reason = InboxDuplicate, sanitize(reason, maxCause)
	default:
		o.Claim, o.Deferred, o.Reason = InboxDeferred, true, sanitize("inbox: "+reason, maxCause)
	}
	return nil
}

// settleTx commits the claim's transaction after a handler that succeeded, and
// rolls it back otherwise (a handler abandoned at its timeout included: its
// work must not commit behind the retry).
func (c *Consumer) settleTx(o *Outcome, tx InboxTx, deadline time.Time) {
	if tx == nil {
		return
	}
	ctx, cancel := stepContext(c.cfg.StepTimeout, deadline)
	defer cancel()
	if o.Handler.Kind != 0 {
		tx.Rollback(ctx)
		o.Commit = CommitRolledBack
		return
	}
	var detail string
	o.Commit, detail = tx.Commit(ctx)
	if o.Commit != CommitCommitted && detail != "" {
		o.Reason = sanitize("commit: "+detail, maxCause)
	}
}

// bounded runs a user step (cleanup, after_delivery) within the step timeout
// and the deadline, turning a panic into an error.
func (c *Consumer) bounded(deadline time.Time, step func(context.Context) error) (err error) {
	ctx, cancel := stepContext(c.cfg.StepTimeout, deadline)
	defer cancel()
	return boundedErr(ctx, func() (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("panic: %v", p)
			}
		}()
		return step(ctx)
	})
}
