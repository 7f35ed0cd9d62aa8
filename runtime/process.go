package runtime

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// process carries one delivery through its journey: guard, dispatch, handler;
// then the executor settles it by decide's plans, and the record is written.
func (c *Consumer) process(r *run, d *amqp.Delivery) {
	start := time.Now()
	auth := newAuthority(d, r.gen)
	var o Outcome
	env, verdict, reason := guard(d, c.spec.MaxBodyBytes, c.cfg.Limits, start)
	switch verdict {
	case guardOversized:
		o.Rejection, o.Reason = RejectOversized, reason
	case guardPoison:
		o.Rejection, o.Reason = RejectPoison, reason
	default:
		if route, ok := c.routes.dispatch(env); ok {
			o.Handler = c.callHandler(r, route, RawDelivery{d: d, env: env})
		} else {
			o.Rejection, o.Reason = RejectUnsupported, unsupported(env)
		}
	}
	attempt := 1
	if env != nil {
		attempt = env.Attempt
	}
	plan := c.execute(r, d, env, &o, auth, attempt, start.Add(c.spec.Budget()))
	c.record(r, newRecord(c.spec, d, env, attempt, o, plan, time.Since(start)))
}

func unsupported(env *Envelope) string {
	return sanitize(env.Type, 64) + " v" + strconv.Itoa(env.Version) + " as " + sanitize(env.ContentType, 64) + " has no route"
}

// callHandler runs the route under the handler timeout, in its own goroutine so
// that a handler ignoring its context cannot hold the settlement past the
// timeout. Such a handler is still tracked and may finish later, but its result
// no longer decides anything.
func (c *Consumer) callHandler(r *run, route Route, rd RawDelivery) HandlerResult {
	ctx, cancel := context.WithTimeout(r.work, c.spec.HandlerTimeout)
	defer cancel()
	ctx = context.WithValue(ctx, deliveryKey{}, rd)
	done := make(chan HandlerResult, 1)
	r.handlers.Add(1)
	go func() {
		defer r.handlers.Add(-1)
		done <- invoke(ctx, route, rd)
	}()
	select {
	case res := <-done:
		return res
	case <-ctx.Done():
		cause := "handler timed out after " + c.spec.HandlerTimeout.String()
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			cause = "handler cancelled by forced shutdown"
		}
		return HandlerResult{Ran: true, Kind: KindRetryable, Cause: cause, TimedOut: true}
	}
}

// invoke calls the route and turns a panic into a retryable failure: like a
// plain error it is unclassified, and the retry policy bounds how often it runs.
func invoke(ctx context.Context, route Route, rd RawDelivery) (res HandlerResult) {
	defer func() {
		if p := recover(); p != nil {
			res = HandlerResult{Ran: true, Kind: KindRetryable, Panicked: true, Cause: sanitize(fmt.Sprint("panic: ", p), maxCause)}
		}
	}()
	err := route(ctx, rd)
	res = HandlerResult{Ran: true, Kind: KindOf(err)}
	if qe, ok := err.(*QueueHandlerError); ok && qe.Cause != nil {
		err = qe.Cause // the kind is kept apart; the cause says what went wrong
	}
	if err != nil {
		res.Cause = sanitize(err.Error(), maxCause)
	}
	return res
}

// maxCause bounds a failure's text in records, logs and failure headers.
const maxCause = 200
