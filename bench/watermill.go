package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/internal/queue"
)

// drainWatermill consumes with Watermill's AMQP subscriber under its router,
// as a Watermill user would. Its subscription handles one message at a time
// (it waits for the ACK before reading the next delivery), so concurrency
// comes from concurrency handlers on the same queue, each with its own
// channel; each channel's prefetch is prefetch/concurrency (rounded up), so
// that the broker holds the same number of unacknowledged messages for every
// consumer under test.
//
// On the retry path the handler fails and the poison-queue middleware
// publishes the message to the bucket with publisher confirms, then the
// router ACKs it. The publisher's channel pool has concurrency channels, its
// in-flight window; without a pool it opens a channel per publish.
//
// The settlement moment is taken in the outermost middleware, when the
// handler chain returns; the router then marks the message acked and the
// subscriber writes the ACK, one goroutine hand-off later.
//
// The router subscribes its handlers one after another (each Subscribe
// declares the queue on a channel of its own, then consumes on another in
// the background), and the first consumes while the others open: the run's
// clocks start, and its handlers work, only once the router runs and the
// broker counts all its consumers (see measure).
func drainWatermill(ctx context.Context, r runConfig, t *tracker) error {
	logger := watermill.NopLogger{}
	cfg := wamqp.NewDurableQueueConfig(r.url)
	cfg.Marshaler = lilyMarshaler{}
	cfg.Queue.Arguments = mainQueueArgs(r.spec)
	cfg.Consume.Qos.PrefetchCount = (r.prefetch + r.concurrency - 1) / r.concurrency
	sub, err := wamqp.NewSubscriber(cfg, logger)
	if err != nil {
		return err
	}
	defer sub.Close()
	router, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		return err
	}
	failed := make(chan error, 1)
	gate, closeGate := context.WithCancel(ctx)
	defer closeGate()
	ready := make(chan struct{})
	go func() {
		select {
		case <-router.Running():
		case <-gate.Done():
			return
		}
		if err := awaitConsumers(gate, r.url, r.spec.Name, consumersOf("watermill", r.concurrency)); err != nil {
			fail(failed, fmt.Errorf("watermill's subscriptions: %w", err))
			return
		}
		close(ready)
	}()
	router.AddMiddleware(measure(gate, ready, t, failed))
	handle := func(*message.Message) error { return nil }
	if r.scenario == scenarioRetry {
		pcfg := wamqp.NewDurableQueueConfig(r.url)
		pcfg.Marshaler = lilyMarshaler{}
		pcfg.Publish.ConfirmDelivery = true
		pcfg.Publish.Mandatory = true
		pcfg.Publish.ChannelPoolSize = r.concurrency
		pub, err := wamqp.NewPublisher(pcfg, logger)
		if err != nil {
			return err
		}
		defer pub.Close()
		poison, err := middleware.PoisonQueue(pub, queue.RetryBucket(r.spec.Name, retryDelay))
		if err != nil {
			return err
		}
		router.AddMiddleware(poison)
		handle = func(*message.Message) error { return errUnavailable }
	}
	for i := range r.concurrency {
		router.AddConsumerHandler("bench-"+strconv.Itoa(i), r.spec.Name, sub, handle)
	}
	runErr := make(chan error, 1)
	go func() { runErr <- router.Run(ctx) }()
	var result error
	select {
	case <-t.done:
	case result = <-failed:
	case result = <-runErr:
		if result == nil {
			result = errors.New("watermill: the router stopped")
		}
	case <-ctx.Done():
		result = ctx.Err()
	}
	if result == nil {
		// The settlement moment comes before the ACK is written, one hand-off
		// later; closing at once could requeue the last few. Not timed.
		time.Sleep(500 * time.Millisecond)
	}
	closeGate() // a handler still held returns: the router's close waits for it
	if err := router.Close(); err != nil && result == nil {
		result = err
	}
	return result
}

// measure is drainWatermill's outermost middleware. It holds each message
// until ready is closed, when every subscription consumes, so that the
// first delivery it notes (which starts the run's clocks) and every later
// one is handled at the run's full concurrency and prefetch; a message held
// when ctx ends is failed back to the router. It notes the settlement when
// the chain returns without error, and reports the first error on failed.
func measure(ctx context.Context, ready <-chan struct{}, t *tracker, failed chan<- error) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			select {
			case <-ready:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			t.deliver()
			out, err := h(msg)
			if err != nil {
				fail(failed, err)
				return out, err
			}
			t.settle(msg.UUID)
			return out, nil
		}
	}
}

// fail reports err on failed unless an error waits there already.
func fail(failed chan<- error, err error) {
	select {
	case failed <- err:
	default:
	}
}

// lilyMarshaler reads Lily's envelope into Watermill's message: the message
// id as its UUID, and every header as a string. Watermill's default
// marshaler refuses headers that are not strings (Lily's x-lily-version is an
// integer) and takes the UUID from a header of its own.
type lilyMarshaler struct{ wamqp.DefaultMarshaler }

func (m lilyMarshaler) Unmarshal(d amqp.Delivery) (*message.Message, error) {
	msg := message.NewMessage(d.MessageId, d.Body)
	msg.Metadata = make(message.Metadata, len(d.Headers))
	for k, v := range d.Headers {
		switch v := v.(type) {
		case string:
			msg.Metadata[k] = v
		case int64:
			msg.Metadata[k] = strconv.FormatInt(v, 10)
		default:
			msg.Metadata[k] = fmt.Sprint(v)
		}
	}
	return msg, nil
}

func (m lilyMarshaler) Marshal(msg *message.Message) (amqp.Publishing, error) {
	p, err := m.DefaultMarshaler.Marshal(msg)
	p.MessageId = msg.UUID
	return p, err
}
