package main

import (
	"context"
	"errors"
	"regexp"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/examples/orders/ordersmsg"
	"github.com/lily-mq/lily/internal/queue"
	"github.com/lily-mq/lily/wire"
)

// drainPlain is the baseline: amqp091-go and nothing else. concurrency
// goroutines share the consumer channel's deliveries; on the ack path each
// ACKs what it gets, on the retry path each publishes a copy to the bucket on
// a confirm-mode channel of a second connection (as Lily does), waits for the
// confirm, then ACKs. Its in-flight window is therefore concurrency, as
// Lily's handoff window is.
//
// As "plain-extract" it also reads each delivery as the generated route does
// before settling it (extract: the body's extractor and the typed headers'):
// the difference to Lily is then the runtime's own cost. As
// "plain-facts" it does that too, and its retry copies carry Lily's failure
// facts and a handoff id as well (see withFacts). As "plain-duties" (the ack
// path only) it runs the extractor as a handler the way the settlement page
// needs a handler run, in the plainest code that does it: extract on a
// goroutine of its own under a timeout, so that a handler ignoring its context could be
// left behind, and with its ACK written by the channel's one writer, which
// the delivery waits for (see settleApart). As "plain-batch" it is
// plain-extract sending multiple ACKs (see batchAcker), to tell what Lily's
// settler's multiple ACKs give from the rest of Lily.
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
	var batch *batchAcker
	if r.consumer == "plain-batch" {
		batch = &batchAcker{ch: ch, t: t, done: make(map[uint64]string, r.prefetch)}
	}
	return drainWith(ctx, ch, deliveries, r.concurrency, t, func(d *amqp.Delivery) error {
		if batch != nil {
			batch.take()
		}
		if r.consumer != "plain" {
			if _, err := extract(d); err != nil {
				return err
			}
		}
		if pub != nil {
			if err := copyTo(pub, bucket, d, r.consumer == "plain-facts", r.spec.Name); err != nil {
				return err
			}
		}
		if batch != nil {
			return batch.finish(d.DeliveryTag, d.MessageId)
		}
		if err := d.Ack(false); err != nil {
			return err
		}
		t.settle(d.MessageId)
		return nil
	})
}

// ackBatch is how many done deliveries plain-batch gathers into one multiple
// ACK while others are still in hand.
const ackBatch = 32

// batchAcker is plain-batch's ACKs. A multiple ACK settles every delivery
// of the channel up to its tag, so it may only name a tag below which every
// delivery is done: a done tag waits until all below it are done too. Then
// one ACK covers them, once ackBatch wait, or at once when no delivery is in
// hand (none would come to join them). The ACK is written under the lock, so
// that a later one never goes before an earlier one: RabbitMQ closes the
// channel on an ACK of a tag already settled.
type batchAcker struct {
	ch     amqp.Acknowledger // the consumer's channel
	t      *tracker
	mu     sync.Mutex
	inHand int               // deliveries taken and not done
	acked  uint64            // every tag up to it is ACKed
	top    uint64            // every tag up to it is done
	done   map[uint64]string // done tags above acked: their message ids
}

// take notes a delivery taken in hand.
func (b *batchAcker) take() {
	b.mu.Lock()
	b.inHand++
	b.mu.Unlock()
}

// finish notes the delivery of tag done, and ACKs what may be ACKed.
func (b *batchAcker) finish(tag uint64, messageID string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.inHand--
	b.done[tag] = messageID
	for {
		if _, ok := b.done[b.top+1]; !ok {
			break
		}
		b.top++
	}
	if b.top == b.acked || (b.top-b.acked < ackBatch && b.inHand > 0) {
		return nil
	}
	if err := b.ch.Ack(b.top, true); err != nil {
		return err
	}
	for ; b.acked < b.top; b.acked++ {
		b.t.settle(b.done[b.acked+1])
		delete(b.done, b.acked+1)
	}
	return nil
}

// extract reads d as the generated route of OrderPlaced v2 does before it
// calls the handler: the body through the generated extractor, then the
// typed headers.
func extract(d *amqp.Delivery) (*ordersmsg.OrderPlacedV2, error) {
	msg, err := ordersmsg.ExtractOrderPlacedV2(d.Body)
	if err != nil {
		return nil, err
	}
	msg.Headers, err = orderPlacedV2Headers(func(k string) (any, bool) {
		v, ok := d.Headers[k]
		return v, ok
	})
	if err != nil {
		return nil, err
	}
	return msg, nil
}

// xTenantPattern is the schema's pattern of header x-tenant.
var xTenantPattern = regexp.MustCompile("^[a-z][a-z0-9-]*$")

// orderPlacedV2Headers is the generated extractOrderPlacedV2Headers, which
// ordersmsg does not export, written out: the same checks in the same order,
// so that the plain loop pays what the route pays (TestExtract holds the two
// to the same answers).
func orderPlacedV2Headers(header func(string) (any, bool)) (ordersmsg.OrderPlacedV2Headers, error) {
	var out ordersmsg.OrderPlacedV2Headers
	raw, ok := header("x-tenant")
	if !ok || raw == nil {
		return ordersmsg.OrderPlacedV2Headers{}, &wire.FieldError{Path: "headers.x-tenant", Problem: "required"}
	}
	xTenant, ok := raw.(string)
	if !ok {
		return ordersmsg.OrderPlacedV2Headers{}, &wire.FieldError{Path: "headers.x-tenant", Problem: "not a string"}
	}
	if !utf8.ValidString(xTenant) {
		return ordersmsg.OrderPlacedV2Headers{}, &wire.FieldError{Path: "headers.x-tenant", Problem: "not UTF-8"}
	}
	switch n := utf8.RuneCountInString(xTenant); {
	case n < 1:
		return ordersmsg.OrderPlacedV2Headers{}, &wire.FieldError{Path: "headers.x-tenant", Problem: "empty"}
	case n > 32:
		return ordersmsg.OrderPlacedV2Headers{}, &wire.FieldError{Path: "headers.x-tenant", Problem: "longer than 32 characters"}
	}
	if !xTenantPattern.MatchString(xTenant) {
		return ordersmsg.OrderPlacedV2Headers{}, &wire.FieldError{Path: "headers.x-tenant", Problem: "does not match ^[a-z][a-z0-9-]*$"}
	}
	out.XTenant = xTenant
	if raw, ok := header("x-trace-id"); ok && raw != nil {
		xTraceID, ok := raw.(string)
		if !ok {
			return ordersmsg.OrderPlacedV2Headers{}, &wire.FieldError{Path: "headers.x-trace-id", Problem: "not a string"}
		}
		if !utf8.ValidString(xTraceID) {
			return ordersmsg.OrderPlacedV2Headers{}, &wire.FieldError{Path: "headers.x-trace-id", Problem: "not UTF-8"}
		}
		if utf8.RuneCountInString(xTraceID) > 64 {
			return ordersmsg.OrderPlacedV2Headers{}, &wire.FieldError{Path: "headers.x-trace-id", Problem: "longer than 64 characters"}
		}
		out.XTraceID = &xTraceID
	}
	return out, nil
}

// drainWith runs concurrency goroutines that share deliveries and settle
// each with settle, which tells the tracker, until the tracker has seen
// every message settled, a settle fails or ctx ends.
func drainWith(ctx context.Context, ch *amqp.Channel, deliveries <-chan amqp.Delivery, concurrency int, t *tracker, settle func(*amqp.Delivery) error) error {
	errs := make(chan error, concurrency)
	var wg sync.WaitGroup
	for range concurrency {
		wg.Go(func() {
			for d := range deliveries {
				t.deliver()
				if err := settle(&d); err != nil {
					errs <- err
					return
				}
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
			_, err := extract(d)
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
		if err := <-written; err != nil {
			return err
		}
		t.settle(d.MessageId)
		return nil
	})
}
