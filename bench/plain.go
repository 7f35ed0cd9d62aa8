package main

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/examples/orders/ordersmsg"
	"github.com/lily-mq/lily/internal/queue"
)

// drainPlain is the baseline: amqp091-go and nothing else. concurrency
// goroutines share the consumer channel's deliveries; on the ack path each
// ACKs what it gets, on the retry path each publishes a copy to the bucket on
// a confirm-mode channel of a second connection (as Lily does), waits for the
// confirm, then ACKs. Its in-flight window is therefore concurrency, as
// Lily's handoff window is.
//
// As "plain-extract" it also runs the generated extractor on each body before
// settling it: the difference to Lily is then the runtime's own cost. As
// "plain-facts" it does that too, and its retry copies carry Lily's failure
// facts and a handoff id as well (see withFacts). As "plain-duties" (the ack
// path only) it runs the extractor as a handler the way the settlement page
// needs a handler run, in the plainest code that does it: on a goroutine of
// its own under a timeout, so that a handler ignoring its context could be
// left behind, and with its ACK written by the channel's one writer, which
// the delivery waits for (see settleApart).
func drainPlain(ctx context.Context, r runConfig, t *tracker) error {
	conn, err := amqp.Dial(r.url)
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	if err := ch.Qos(r.prefetch, 0, false); err != nil {
		return err
	}
	var pub *amqp.Channel
	if r.scenario == scenarioRetry {
		pubConn, err := amqp.Dial(r.url)
		if err != nil {
			return err
		}
		defer pubConn.Close()
		if pub, err = pubConn.Channel(); err != nil {
			return err
		}
		if err := pub.Confirm(false); err != nil {
			return err
		}
	}
	bucket := queue.RetryBucket(r.spec.Name, retryDelay)
	deliveries, err := ch.Consume(r.spec.Name, "", false, false, false, false, nil)
	if err != nil {
		return err
	}
	if r.consumer == "plain-duties" {
		if pub != nil {
			return errors.New("plain-duties runs the ack path only")
		}
		return settleApart(ctx, ch, deliveries, r.concurrency, r.spec.HandlerTimeout, t)
	}
	return drainWith(ctx, ch, deliveries, r.concurrency, t, func(d *amqp.Delivery) error {
		if r.consumer != "plain" {
			if _, err := ordersmsg.ExtractOrderPlacedV2(d.Body); err != nil {
				return err
			}
		}
		if pub != nil {
			if err := copyTo(pub, bucket, d, r.consumer == "plain-facts", r.spec.Name); err != nil {
				return err
			}
		}
		return d.Ack(false)
	})
}

// drainWith runs concurrency goroutines that share deliveries and settle
// each with settle, until the tracker has seen every message settled, a
// settle fails or ctx ends.
func drainWith(ctx context.Context, ch *amqp.Channel, deliveries <-chan amqp.Delivery, concurrency int, t *tracker, settle func(*amqp.Delivery) error) error {
	errs := make(chan error, concurrency)
	var wg sync.WaitGroup
	for range concurrency {
		wg.Go(func() {
			for d := range deliveries {
				if err := settle(&d); err != nil {
					errs <- err
					return
				}
				t.settle(d.MessageId)
			}
		})
	}
	var runErr error
	select {
	case <-t.done:
	case runErr = <-errs:
	case <-ctx.Done():
		runErr = ctx.Err()
	}
	// Closing the channel ends deliveries, and with it every worker.
	_ = ch.Close()
	wg.Wait()
	return runErr
}

// copyTo publishes d's copy to queue dest, mandatory, and waits for its
// confirm. The copy carries d's properties and headers with the next attempt,
// as a retry copy must; the body is shared, not copied.
func copyTo(pub *amqp.Channel, dest string, d *amqp.Delivery, facts bool, source string) error {
	h := make(amqp.Table, len(d.Headers)+7)
	for k, v := range d.Headers {
		h[k] = v
	}
	h["x-lily-attempt"] = int64(2)
	if facts {
		withFacts(h, source)
	}
	dc, err := pub.PublishWithDeferredConfirm("", dest, true, false, amqp.Publishing{
		Headers: h, Body: d.Body, DeliveryMode: amqp.Persistent,
		MessageId: d.MessageId, Type: d.Type, ContentType: d.ContentType, Timestamp: d.Timestamp,
	})
	if err != nil {
		return err
	}
	if !dc.Wait() {
		return errors.New("copy nacked")
	}
	return nil
}

// withFacts adds the headers a Lily retry copy of the bench's messages
// carries beyond the plain copy's, with values of the same types and sizes.
func withFacts(h amqp.Table, source string) {
	h["x-lily-failure-reason"] = "retryable failure on attempt 1 of 3: " + errUnavailable.Error()
	h["x-lily-failure-kind"] = "retryable"
	h["x-lily-failure-attempt"] = int64(1)
	h["x-lily-failure-queue"] = source
	h["x-lily-failure-time"] = time.Now().UTC().Truncate(time.Second)
	h["x-lily-handoff-id"] = "0123456789ab-" + strconv.FormatInt(time.Now().UnixNano()%1e7, 36)
}

// settleApart is plain-duties' drain of the ack path: each of concurrency
// goroutines takes a delivery, runs the extractor on a goroutine of its own
// and waits for it until a handler timeout, then hands the ACK to the
// channel's writer and waits for the write. These are the hand-offs Lily's
// journey makes (docs/benchmarks.md, "What stands in the way"), without
// Lily's records, budgets or multiple ACKs.
func settleApart(ctx context.Context, ch *amqp.Channel, deliveries <-chan amqp.Delivery, concurrency int, handlerTimeout time.Duration, t *tracker) error {
	type ack struct {
		tag     uint64
		written chan error
	}
	acks := make(chan ack, concurrency)
	go func() {
		for a := range acks {
			a.written <- ch.Ack(a.tag, false)
		}
	}()
	defer close(acks)
	return drainWith(ctx, ch, deliveries, concurrency, t, func(d *amqp.Delivery) error {
		handled := make(chan error, 1)
		timeout, cancel := context.WithTimeout(ctx, handlerTimeout)
		defer cancel()
		go func() {
			_, err := ordersmsg.ExtractOrderPlacedV2(d.Body)
			handled <- err
		}()
		select {
		case err := <-handled:
			if err != nil {
				return err
			}
		case <-timeout.Done():
			return timeout.Err()
		}
		written := make(chan error, 1)
		acks <- ack{d.DeliveryTag, written}
		return <-written
	})
}
