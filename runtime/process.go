package runtime

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/internal/quarantine"
	"github.com/lily-mq/lily/internal/queue"
	"github.com/lily-mq/lily/internal/sanitize"
	"github.com/lily-mq/lily/runtime/internal/decide"
	"github.com/lily-mq/lily/runtime/internal/guard"
	"github.com/lily-mq/lily/runtime/internal/memory"
	"github.com/lily-mq/lily/runtime/internal/outcome"
	"github.com/lily-mq/lily/runtime/internal/settle"
	"github.com/lily-mq/lily/wire"
)

// reading is what the guard made of a delivery: its envelope, or why it
// refused it.
type reading struct {
	env     *guard.Envelope
	verdict guard.Verdict
	reason  string
}

// read is the guard's reading of d received at now.
func (c *Consumer) read(d *amqp.Delivery, now time.Time) reading {
	env, verdict, reason := c.reader.Check(d, c.spec.MaxBodyBytes, c.tuning.limits, now)
	return reading{env, verdict, reason}
}

// process carries one delivery through its journey: guard, dispatch, handler;
// then the executor settles it by decide's plans, and the record is written.
// quarantined is why the connection's filter replaced the delivery's content
// header, which the client could not decode, or whose x-death the broker
// could not (its Why "" when it did not). It returns
// the delivery's record, for the test harness (trial.go). s is the session
// it came on, nil in a trial, and gen s's generation, or the trial's. read
// is the guard's reading of d made at intake, for an ordered queue's key;
// nil when the journey reads d itself.
func (c *Consumer) process(r *run, s *session, gen *settle.Generation, d *amqp.Delivery, received time.Time, quarantined quarantine.Verdict, read *reading, sl *slot) Record {
	auth := settle.NewAuthority(d.DeliveryTag, gen)
	if read == nil {
		own := c.read(d, received)
		read = &own
	}
	env, verdict, reason := read.env, read.verdict, read.reason
	id := idText(d, env)
	var delivered int // the attempt the delivery carries, which a redelivery of it carries too
	if env != nil {
		delivered = env.Attempt
	}
	token := r.report.begin(id, delivered)
	c.emit(event{stage: stageReceived, messageID: id, generation: gen.ID})
	ctx := r.work
	if c.telemetry.t != nil {
		seen := RawDelivery{d: d}
		if verdict == guard.Passed && quarantined.Why == "" {
			seen.env = env
		}
		ctx = c.telemetry.received(ctx, c.spec.Name, seen)
	}
	var o outcome.Outcome
	// release is the journey's share in freeing the delivery's work for a
	// redelivery of it (nil when there is none); the handler's return is the
	// other share.
	var release *shares
	defer func() {
		if release != nil {
			release.drop()
		}
	}()
	deadline := received.Add(c.spec.budget())
	attempt := 1
	var route routeFn
	var handlerDone *shares
	switch {
	case quarantined.XDeath:
		// Its x-death is one the broker's dead-lettering cannot read: the
		// NACK without requeue a quarantined or oversized delivery gets
		// would crash the queue. It is poison, whatever its body: Lily's
		// copy of its sanitized identity and body goes to the DLQ, read
		// from the delivery, not from the guard's reading of the stand-in
		// header.
		env = nil
		o.Rejection, o.Reason = outcome.RejectPoison, quarantinedXDeath(quarantined)
	case quarantined.Why != "":
		// The guard read the stand-in header, not the delivery's own. Before
		// the body's size: the settlement is the same NACK, and the record
		// keeps why the client could not read the delivery.
		o.Rejection, o.Reason = outcome.RejectQuarantined, quarantined.Why
	case verdict == guard.Oversized:
		o.Rejection, o.Reason = outcome.RejectOversized, reason
	case verdict == guard.Poison:
		o.Rejection, o.Reason = outcome.RejectPoison, reason
	default:
		attempt = env.Attempt
		work := workOf(env)
		if !r.busy.Start(work) {
			o.Deferred, o.Reason = true, "the same message and attempt is being handled by another delivery in this consumer"
			break
		}
		// The work is free again once the executor has remembered how it
		// ended (or requeues it), and its handler has returned, which may be
		// after this journey ends: the last of the shares frees it.
		handlerDone = &shares{busy: &r.busy, work: work}
		release = handlerDone.take()
		var ok bool
		if r.completed.Count(work) > 0 {
			o.CompletedEarlier = true
			c.emit(event{stage: stageFromRecord, messageID: id, attempt: attempt, generation: gen.ID})
		} else if route, ok = c.routes.dispatch(env); ok {
			o = c.handle(ctx, r, gen, sl, route, d, env, id, attempt, deadline, handlerDone)
		} else {
			o.Rejection, o.Reason = outcome.RejectUnsupported, unsupported(env)
		}
	}
	if env != nil {
		o.DeliveryCount = c.deliveryCount(env)
	}
	if o.Rejection != outcome.NotRejected && c.logs(stageRejected) {
		c.emit(event{stage: stageRejected, messageID: id, attempt: attempt, generation: gen.ID, detail: o.Rejection.String() + ": " + o.Reason})
	}
	free := release
	release = nil // execute frees it
	for {
		plan, hooks := c.execute(ctx, r, s, gen, token, d, env, &o, auth, attempt, deadline, free)
		if plan.Action != decide.ActPark {
			rec := newRecord(c.spec, d, id, env, attempt, o, plan, time.Since(received))
			c.record(ctx, r, gen.ID, token, rec, o, hooks, sl, sl.leaveLane)
			return rec
		}
		// Retried in line: the deliveries of its key wait behind it, and
		// other keys take its slot meanwhile.
		c.emit(event{stage: stageParked, messageID: id, attempt: attempt, generation: gen.ID, detail: plan.Reason})
		// The slot is waited for only while the budget still carries the
		// call and a handoff after it.
		lost := gen.Ended()
		waited := sl.lend(func() bool { return r.pause(plan.Delay, lost) }, r.stopping, lost, deadline.Add(-c.policy.CallCost-decide.HandoffReserve))
		if gen.Revoked() {
			// The channel was lost while it waited: the broker redelivers
			// it, and its key's deliveries behind it, at once; they must not
			// wait out the delay behind it here.
			o.Settlement = outcome.SettlementEvidence{Status: outcome.SettlementNotAttempted, Detail: "authority revoked while its retry waited in line"}
			continue
		}
		if !waited {
			// The handler is not called again. After the stop, the delivery
			// goes back to its place; when the wait for a slot spent the
			// budget the call needed, decide finds no room for a retry in
			// line any more, and sends it through its bucket.
			o.ParkEnded = closed(r.stopping)
			continue
		}
		attempt = plan.NextAttempt
		inLine := o.InLine + 1
		o = c.handle(ctx, r, gen, sl, route, d, env, id, attempt, deadline, handlerDone)
		o.InLine = inLine
	}
}

// quarantinedXDeath is the poison reason of a delivery the filter
// quarantined for its x-death (v.XDeath).
func quarantinedXDeath(v quarantine.Verdict) string { return "quarantined: " + v.Why }

// handle runs the route for attempt of the delivery, whose sanitized message
// id is id (a retry in line runs a later attempt than its envelope says),
// with the journey's context ctx, and gathers the outcome. The handler's return drops a share of the work;
// an abandoned handler drops it when it returns late.
func (c *Consumer) handle(ctx context.Context, r *run, gen *settle.Generation, sl *slot, route routeFn, d *amqp.Delivery, env *guard.Envelope, id string, attempt int, deadline time.Time, work *shares) outcome.Outcome {
	rd := RawDelivery{d: d, env: runEnvelope(env, attempt)}
	o, handlerReturned := c.pipeline(ctx, r, sl, route, rd, deadline, work.take())
	c.emit(event{stage: stageHandled, messageID: id, attempt: attempt, generation: gen.ID, detail: o.Handler.Cause})
	if handlerReturned != nil {
		handlerReturned.drop()
	}
	o.DeliveryCount = c.deliveryCount(env)
	return o
}

// deliveryCount is env's x-delivery-count where the broker writes it: on a
// quorum queue. On a classic queue the header can only be a producer's, and
// its count would stretch each requeue's pause to the longest.
func (c *Consumer) deliveryCount(env *guard.Envelope) int {
	if c.spec.Topology.Type != queue.Quorum {
		return 0
	}
	return env.DeliveryCount
}

// deliveryKey names the message of a delivery to the consumer's memory and
// its records: its envelope's key once the guard has read one, else its
// message_id as sent.
func deliveryKey(d *amqp.Delivery, env *guard.Envelope) string {
	if env != nil {
		return env.Key()
	}
	return d.MessageId
}

// requeueKey names the message of delivery d to the memory of requeues that
// paces its next one (the hot-loop guard): its key (deliveryKey), or, for a
// message without one, whose key no memory keeps, a fingerprint of what a
// redelivery keeps of it: its type, correlation id, timestamp and body.
// Without it a keyless message's pause would never grow, and a handoff that
// keeps failing would requeue it every 250 ms for as long as it fails.
// Identical keyless messages share a count: their pacing is stricter. The
// fingerprint starts with a byte no id the guard passes has (they are
// printable ASCII), so it meets no message's key; only a refused delivery's
// raw message_id could be the same nine bytes, and then the two share a
// count too. It is a key of this memory alone: the inbox, the memory of
// completed work and the records name the message as deliveryKey and
// idText do.
func requeueKey(d *amqp.Delivery, env *guard.Envelope) string {
	if key := deliveryKey(d, env); !memory.Keyless(key) {
		return key
	}
	var h maphash.Hash
	h.SetSeed(fingerprintSeed)
	var n [8]byte
	for _, s := range [...]string{d.Type, d.CorrelationId} {
		h.Write(binary.BigEndian.AppendUint64(n[:0], uint64(len(s))))
		h.WriteString(s)
	}
	h.Write(binary.BigEndian.AppendUint64(n[:0], uint64(d.Timestamp.Unix())))
	h.Write(d.Body)
	var key [9]byte
	key[0] = keylessMark
	binary.BigEndian.PutUint64(key[1:], h.Sum64())
	return string(key[:])
}

// keylessMark starts a keyless message's requeue key: no printable byte.
const keylessMark = 0x00

// fingerprintSeed keeps a keyless message's fingerprint the same across
// its redeliveries to this process, which is as long as the memory lasts.
var fingerprintSeed = maphash.MakeSeed()

// workOf is the work a delivery of env does, as the consumer's memory and
// its set of work being handled know it. A copy lilydlq re-drove is work of
// its own, counted by x-lily-redriven: it carries its original's id and,
// unless re-driven with -keep-attempt, attempt 1, and the original's
// confirmed handoff to the DLQ must not settle it from the record.
func workOf(env *guard.Envelope) memory.Work {
	redriven, _ := wire.HeaderInt(env.Headers[envelope.HeaderRedriven])
	return memory.Work{ID: env.Key(), Attempt: env.Attempt, Redriven: redriven}
}

func unsupported(env *guard.Envelope) string {
	return sanitize.Text(env.Type, 64) + " v" + strconv.Itoa(env.Version) + " as " + sanitize.Text(env.ContentType, 64) + " has no route"
}

// callHandler runs the route under the handler timeout, on a worker of its own so
// that a handler ignoring its context cannot hold the settlement past the
// timeout. Such a handler is abandoned: it keeps its concurrency slot, its
// result no longer decides anything, and late is finished on its goroutine
// once it returns (its transaction rolled back and its scope cleaned up,
// which it may still be using until then).
func (c *Consumer) callHandler(r *run, sl *slot, base context.Context, route routeFn, rd RawDelivery, late abandoned) outcome.HandlerResult {
	if !r.handlers.start() {
		// The final abort came first. Not started, so nothing is abandoned:
		// the caller ends the scope.
		return outcome.HandlerResult{Kind: outcome.KindRetryable, Cause: "not started: the consumer aborted", Cancelled: true}
	}
	timesOut := time.Now().Add(c.spec.HandlerTimeout)
	ctx, cancel := context.WithDeadlineCause(base, timesOut, errHandlerTimeout)
	defer cancel()
	call := handlerCalls.Get().(*handlerCall)
	call.gaveUp, call.returned = false, false
	sl.hold()
	lane := sl.holdLane()
	r.workers.Run(func() {
		defer sl.release()
		// Its key's next delivery starts once it returns, and what it
		// abandoned is finished, or at the budget's end.
		defer lane()
		// A handler that calls runtime.Goexit (t.FailNow does, off its
		// test's goroutine) never returns, but its goroutine still ends
		// through the deferred calls: its end is a failure like a panic.
		res := goexited
		defer func() { c.handlerEnded(r, call, late, res) }()
		res = invoke(ctx, route, rd)
	})
	done := call.done
	// received returns the handler's result, sent after the worker's last
	// use of call, which is then used again for another handler.
	received := func(res outcome.HandlerResult) outcome.HandlerResult {
		handlerCalls.Put(call)
		return c.handled(r, res)
	}
	giveUp := func(res outcome.HandlerResult) outcome.HandlerResult {
		call.mu.Lock()
		if call.returned {
			// The handler returned just now: its result is on its way.
			call.mu.Unlock()
			return received(<-done)
		}
		call.gaveUp = true
		r.stuck.abandoned()
		call.mu.Unlock()
		res.Abandoned = true
		return res
	}
	// The force notification (or the scope) may cancel ctx, which does not end
	// the wait: work that completes in the force window still settles. Only
	// the handler timeout and the final abort stop waiting.
	timedOut := func() outcome.HandlerResult {
		return outcome.HandlerResult{Ran: true, Kind: outcome.KindRetryable, Cause: "handler timed out after " + c.spec.HandlerTimeout.String(), TimedOut: true}
	}
	aborted := outcome.HandlerResult{Ran: true, Kind: outcome.KindRetryable, Cause: "handler abandoned at the final abort", Cancelled: true}
	select {
	case res := <-done:
		return received(res)
	case <-r.aborted:
		return giveUp(aborted)
	case <-ctx.Done():
	}
	if context.Cause(ctx) == errHandlerTimeout {
		return giveUp(timedOut())
	}
	timeout := time.NewTimer(time.Until(timesOut))
	defer timeout.Stop()
	select {
	case res := <-done:
		return received(res)
	case <-timeout.C:
		return giveUp(timedOut())
	case <-r.aborted:
		return giveUp(aborted)
	}
}

// handlerEnded answers the wait for a handler that returned (or exited), or,
// when the wait gave it up, finishes what it abandoned.
func (c *Consumer) handlerEnded(r *run, call *handlerCall, late abandoned, res outcome.HandlerResult) {
	call.mu.Lock()
	abandoned := call.gaveUp
	call.returned = true
	call.mu.Unlock()
	// The handler's end is counted for the report once it has returned;
	// an abandoned handler's rollback and cleanup are steps of user code,
	// which the report counts while they run.
	if abandoned {
		r.stuck.returned()
		r.handlers.end()
		c.finishAbandoned(late)
		return
	}
	r.handlers.end()
	// The last use of call by this worker: the wait takes it back.
	call.done <- res
}

// goexited is the result of a handler that ended its goroutine with
// runtime.Goexit instead of returning.
var goexited = outcome.HandlerResult{Ran: true, Kind: outcome.KindRetryable, Panicked: true, Cause: "the handler called runtime.Goexit instead of returning"}

// handlerCall is what a handler's worker and the wait for it share.
type handlerCall struct {
	mu sync.Mutex // orders the handler's return against the wait giving up
	// gaveUp: the wait abandoned the handler; returned: the handler
	// returned first, and its worker sends its result on done.
	gaveUp, returned bool
	done             chan outcome.HandlerResult
}

// handlerCalls are used again once their result was received; an abandoned
// handler's is left to the collector.
var handlerCalls = sync.Pool{New: func() any { return &handlerCall{done: make(chan outcome.HandlerResult, 1)} }}

// errHandlerTimeout is the cause of a handler context's end at the handler
// timeout, telling it apart from a cancellation by the shutdown or the scope.
var errHandlerTimeout = errors.New("lily: handler timeout")

// handled marks a handler that failed once the force notification cancelled
// it: it failed because of the shutdown.
func (c *Consumer) handled(r *run, res outcome.HandlerResult) outcome.HandlerResult {
	res.Cancelled = res.Kind != 0 && r.work.Err() != nil
	return res
}

// invoke calls the route and turns a panic into a retryable failure: like a
// plain error it is unclassified, and the retry policy bounds how often it runs.
// A nil *QueueHandlerError is a retryable failure too (kindOf), whose cause
// is its own Error.
func invoke(ctx context.Context, route routeFn, rd RawDelivery) outcome.HandlerResult {
	var err error
	rd.route = true // its extractor's first Body reads the delivery's own bytes
	if p := recovered(func() { err = route(ctx, rd) }); p != nil {
		return outcome.HandlerResult{Ran: true, Kind: outcome.KindRetryable, Panicked: true, Cause: sanitize.Text(fmt.Sprint("panic: ", p), decide.MaxCause)}
	}
	res := outcome.HandlerResult{Ran: true, Kind: kindOf(err)}
	if qe, ok := err.(*QueueHandlerError); ok && qe != nil && qe.cause != nil {
		err = qe.cause // the kind is kept apart; the cause says what went wrong
	}
	if err != nil {
		res.Cause = sanitize.Text(err.Error(), decide.MaxCause)
	}
	return res
}

// shares frees a delivery's work once every share taken has been dropped:
// the journey's, and each handler call's. A share is passed on as the
// *shares it was taken from, so that taking and dropping allocate nothing.
type shares struct {
	held atomic.Int32
	busy *memory.Busy
	work memory.Work
}

// take adds a share and returns s, whose drop drops it; each share taken is
// dropped once.
func (s *shares) take() *shares {
	s.held.Add(1)
	return s
}

// drop drops one share; the last frees the work.
func (s *shares) drop() {
	if s.held.Add(-1) == 0 {
		s.busy.Done(s.work)
	}
}
