package runtime

import (
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// shutdown runs the stop phases in order and returns the report:
//
//  1. stop intake: cancel the consumer, so the broker sends nothing more;
//  2. requeue deliveries received but not started (after the cancel, so the
//     broker does not hand them straight back);
//  3. cooperative window (ShutdownGrace): in-flight work runs and settles normally;
//  4. force notification: handlers' contexts are cancelled; settlement authority
//     stays valid on a healthy channel, so work that completes still settles
//     within ForceWindow and its own budget;
//  5. final abort: authority is revoked; goroutines still running are counted
//     as abandoned and their deliveries stay unresolved (the broker redelivers
//     them when the channel closes);
//  6. close the channels and the connection.
func (c *Consumer) shutdown(r *run, ch *amqp.Channel, tag string, deliveries <-chan amqp.Delivery, held *amqp.Delivery) *Report {
	start := time.Now()
	close(r.stopping)
	err := ch.Cancel(tag, false)
	// Requeued only after the cancel, so the broker cannot hand it straight back.
	if held != nil {
		c.notStarted(r, held)
	}
	if err == nil {
		// Once the cancel is done the client closes deliveries after handing
		// over what it had buffered; those were never started.
		for d := range deliveries {
			c.notStarted(r, &d)
		}
	}
	r.report.phase("stop intake", start)

	start = time.Now()
	finished := waitChan(&r.deliveries)
	if !waitFor(finished, c.cfg.ShutdownGrace) {
		r.report.phase("cooperative window", start)
		start = time.Now()
		r.force()
		waitFor(finished, c.cfg.ForceWindow)
		r.report.phase("force window", start)
	} else {
		r.report.phase("cooperative window", start)
	}

	start = time.Now()
	r.gen.revoke()
	r.force()
	_ = r.handoff.close()
	_ = ch.Close()
	r.report.phase("close", start)

	r.report.mu.Lock()
	defer r.report.mu.Unlock()
	rep := r.report.r
	rep.Stopped = time.Now()
	rep.Abandoned = int(r.handlers.Load())
	return &rep
}

// notStarted requeues a delivery that was received but never started.
func (c *Consumer) notStarted(r *run, d *amqp.Delivery) {
	auth := newAuthority(d, r.gen)
	o := Outcome{Settlement: auth.nack(true)}
	rec := newRecord(c.spec, d, nil, 0, o, Plan{Reason: "received but not started before shutdown"}, 0)
	if o.Settlement.Status == NackSent {
		rec.Path = PathNotStarted
	}
	c.record(r, rec)
}

func waitChan(wg interface{ Wait() }) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	return done
}

// waitFor reports whether done closed within d.
func waitFor(done <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		select {
		case <-done:
			return true
		default:
			return false
		}
	}
}
