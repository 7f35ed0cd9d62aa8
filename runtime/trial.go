package runtime

import (
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/internal/quarantine"
	"github.com/lily-mq/lily/runtime/internal/confirm"
	"github.com/lily-mq/lily/runtime/internal/decide"
	"github.com/lily-mq/lily/runtime/internal/guard"
	"github.com/lily-mq/lily/runtime/internal/outcome"
	"github.com/lily-mq/lily/runtime/internal/settle"
	"github.com/lily-mq/lily/runtime/internal/trial"
)

// The public test harness, package lilytest, carries deliveries through a
// consumer's own journey (guard, dispatch, pipeline, decide, the executor,
// the record) with a fake broker in RabbitMQ's place, so that what it shows
// is what the runtime does, not a second implementation of it. The journey's
// machinery stays unexported: this file hands it over through package trial.
func init() {
	trial.Open = openTrial
	trial.Read = readTrial
}

// journeys is one run of a consumer on a fake broker: a single channel
// generation that is never lost, whose settler writes on the fake.
type journeys struct {
	c   *Consumer
	r   *run
	gen *settle.Generation
	// observed is the last record written. notStarted writes its record
	// without returning it; Config.Observe hands it over here.
	observed Record
}

func openTrial(consumer any, b trial.Broker) trial.Journeys {
	c := consumer.(*Consumer)
	r := c.newRun()
	// newRun's publisher would dial at its first handoff; none reaches it.
	r.handoff = trialHandoffs{b, c.cfg.StepTimeout}
	gen := r.newGeneration()
	gen.Settler = settle.NewSettler(b, gen, c.spec.Prefetch)
	j := &journeys{c: c, r: r, gen: gen}
	// Records are written only on the goroutine of Deliver, which reads
	// observed after it: no lock is needed.
	observe := c.cfg.Observe
	c.cfg.Observe = func(rec Record) {
		j.observed = rec
		if observe != nil {
			observe(rec)
		}
	}
	return j
}

// Deliver does for d what consume and its worker do, on the caller's
// goroutine; then it proves the ACKs sent, as the channel's next reply would.
func (j *journeys) Deliver(d *amqp.Delivery) any {
	received := time.Now()
	quarantined := trialQuarantine(d)
	j.gen.Settler.Received(d.DeliveryTag, received)
	if closed(j.r.aborted) {
		// As after the final abort: no journey starts, no user code runs.
		j.c.notStarted(j.r, j.gen, d, nil, "not started: the consumer aborted")
		return j.observed
	}
	// An ordered queue's intake reads the delivery as it takes it in, and
	// calls OrderKey: its records name it by its key, even if it never
	// starts, and its journey uses that reading. It then waits for its turn
	// in its key's lane, as inOrder has it wait: until the delivery before
	// it of its key has ended (as it has, Deliver being one at a time) and
	// nothing it abandoned still runs (a handler past its timeout, a scope
	// step given up on), or that delivery's budget has ended. That wait
	// holds no slot, and its budget starts when the wait ends. (The trial's
	// run is never aborted while a delivery waits: Close waits for Deliver.)
	var read *reading
	var env *guard.Envelope
	sl := &slot{slots: j.r.slots}
	ran := false // the journey took its turn and ran
	if j.c.spec.OrderKey != nil {
		var key laneKey
		key, read = j.orderKey(d, quarantined)
		if read != nil { // nil for a quarantined delivery, which is never read
			env = read.env
		}
		if key != guardRefused {
			prev, own := j.r.lanes.enter(key)
			sl.turn = own
			sl.lane = func() { own.leave(ran, received.Add(j.c.spec.budget()), j.r.aborted) }
			defer sl.leaveLane()
			<-prev.free
			received = time.Now()
			j.gen.Settler.Started(d.DeliveryTag, received)
		}
	}
	// consume waits for a slot until the delivery has been unsettled for
	// recycleAfter (handlers past their timeout hold every slot); then the
	// channel is recycled and the delivery requeued, not started. The
	// trial's run is never aborted while a delivery waits: Close waits for
	// Deliver.
	recycle := time.NewTimer(j.c.recycleAfter())
	defer recycle.Stop()
	select {
	case j.r.slots <- struct{}{}:
	case <-recycle.C:
		// In recycle's words (the trial keeps its one channel), or, on an
		// ordered queue, laneSlot's: the recycle cancels intake under the
		// lane a step after the delivery's budget, which counts from its
		// turn in its lane, so the lane says its budget was spent while it
		// waited.
		why := "received but not started before its channel was recycled"
		if j.c.spec.OrderKey != nil {
			why = decide.SpentWaiting
		}
		j.c.notStarted(j.r, j.gen, d, env, why)
		return j.observed
	}
	// On an ordered queue, laneSlot's spent budget: the lane requeues the
	// delivery at the recycle, in the same words.
	if j.c.spentWaiting(j.r, j.gen, d, env, received) {
		return j.observed
	}
	sl.hold()
	defer sl.leave()
	ran = true
	rec := j.c.process(j.r, nil, j.gen, d, received, quarantined, read, sl)
	if acks := j.gen.Acks.Take(); len(acks) > 0 {
		j.c.acksProven(j.r, j.gen, acks)
		j.gen.Acks.Done(acks)
	}
	return rec
}

// orderKey reads d, quarantined as the filter would have (trialQuarantine),
// on an ordered queue, as the intake does (orderKey): the guard, then
// OrderKey, whose panic or runtime.Goexit is logged, and d
// goes on. It calls orderKey on a goroutine of its own, which a Goexit
// ends, as it ends the intake's, not Deliver's caller. It returns the lane
// d takes, and the guard's reading of d.
func (j *journeys) orderKey(d *amqp.Delivery, quarantined quarantine.Verdict) (laneKey, *reading) {
	k := &keyReading{done: make(chan struct{})}
	go func() {
		k.key, k.read = j.c.orderKey(d, quarantined, k)
		close(k.done)
	}()
	<-k.done
	return k.key, k.read
}

// keyReading is what journeys.orderKey waits for: the lane of its delivery
// and the guard's reading of it, once orderKey has returned them or, after
// a Goexit in OrderKey, handed them to exited.
type keyReading struct {
	key  laneKey
	read *reading
	done chan struct{}
}

func (k *keyReading) exited(_ *amqp.Delivery, key laneKey, read *reading) {
	k.key, k.read = key, read
	close(k.done)
}

// Close stops, cancels the handlers' context, as the force does, and ends
// the generation as the final abort does: a later delivery runs no user
// code and is not settled.
func (j *journeys) Close() {
	j.r.stopOnce.Do(func() { close(j.r.stopping) })
	j.r.force()
	close(j.r.aborted)
	j.r.handlers.seal()
	j.gen.Revoke()
	j.gen.Settler.Close()
	j.r.workers.Close()
}

// trialHandoffs hands a consumer's retry and DLQ copies to a trial broker,
// whose answer is the handoff evidence. It waits for nothing (no slot,
// connection or blocked broker), but refuses, unwritten, what the
// runtime's publisher refuses before and after those waits: user code
// between decide and the write (a slow Telemetry) may have spent the time
// the bounds leave for it.
type trialHandoffs struct {
	b           trial.Broker
	stepTimeout time.Duration
}

func (h trialHandoffs) Publish(bounds confirm.Bounds, exchange, key string, msg amqp.Publishing, writing func() error) outcome.HandoffEvidence {
	if ev := bounds.Refused(exchange, key, msg); ev.Status != outcome.HandoffNone {
		return ev
	}
	if ev := bounds.Late(h.stepTimeout, exchange, key); ev.Status != outcome.HandoffNone {
		return ev
	}
	// A trial's report is never sealed, but its generation is revoked once
	// the trial is closed.
	if err := writing(); err != nil {
		return outcome.HandoffEvidence{Destination: key, Status: outcome.HandoffFailed, Detail: err.Error()}
	}
	return h.b.Publish(exchange, key, msg)
}

func (trialHandoffs) CloseBy(time.Time) {}

// trialQuarantine does to d what the consumer connection's filter does on
// the broker, as far as d's decoded headers tell (quarantine.Decoded): an
// x-death RabbitMQ's dead-lettering cannot read has d's header table
// replaced by the filter's stand-in, and the verdict says so. A producer
// other than a Publisher can send such an x-death, and the broker delivers
// it.
func trialQuarantine(d *amqp.Delivery) quarantine.Verdict {
	v, headers := quarantine.Decoded(d.Headers)
	d.Headers = headers
	return v
}

// readTrial reads d as process does before it calls a handler: the filter's
// quarantine of its x-death, the guard, then dispatch. It refuses a spec and
// routes NewConsumer refuses: read by them, a message would be rejected for
// what is wrong with the spec (a zero MaxBodyBytes calls every body
// oversized).
func readTrial(spec, routes any, d *amqp.Delivery) (any, outcome.Rejection, string, error) {
	q := spec.(QueueSpec)
	reader, _, err := q.check(routes.(Routes))
	if err != nil {
		return nil, outcome.NotRejected, "", err
	}
	if v := trialQuarantine(d); v.XDeath {
		return nil, outcome.RejectPoison, quarantinedXDeath(v), nil
	}
	env, verdict, reason := reader.Check(d, q.MaxBodyBytes, defaultTuning.limits, time.Now())
	switch verdict {
	case guard.Oversized:
		return nil, outcome.RejectOversized, reason, nil
	case guard.Poison:
		return nil, outcome.RejectPoison, reason, nil
	}
	if _, ok := routes.(Routes).dispatch(env); !ok {
		return nil, outcome.RejectUnsupported, unsupported(env), nil
	}
	return RawDelivery{d: d, env: env}, outcome.NotRejected, "", nil
}
