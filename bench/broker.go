package main

import (
	"context"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/examples/orders/ordersmsg"
	"github.com/lily-mq/lily/internal/faults"
	"github.com/lily-mq/lily/internal/queue"
	"github.com/lily-mq/lily/runtime"
)

// retryDelay is the one retry bucket's delay. It is far longer than any run,
// so that the retry path's copies stay in the bucket and the run measures the
// first pass alone (fail, confirmed copy to the bucket, ACK).
const retryDelay = time.Hour

// benchSpec is the example's queue under a run's own name, with the run's
// prefetch and concurrency, unbound: the runs publish to it by name. All
// three consumers read the queue it declares.
func benchSpec(queue string, prefetch, concurrency int) runtime.QueueSpec {
	spec := ordersmsg.OrdersQueueSpec()
	spec.Name, spec.Topology.DeadLetterQueue = queue, queue+".dlq"
	spec.Topology.Exchanges, spec.Topology.Bindings = nil, nil
	spec.Prefetch, spec.Concurrency = prefetch, concurrency
	spec.Topology.RetryDelays = []time.Duration{retryDelay}
	return spec
}

// mainQueueArgs are the arguments Lily declares the main queue with; a peer
// that declares the queue itself must use the same, or the broker refuses it.
func mainQueueArgs(spec runtime.QueueSpec) amqp.Table {
	decls := queue.Declarations(topology(spec))
	return decls[len(decls)-1].Args
}

// topology is what spec's declarations depend on.
func topology(spec runtime.QueueSpec) queue.Topology {
	return queue.Topology{Name: spec.Name, Queue: spec.Topology}
}

// fillWindow is how many publishes the fill keeps unconfirmed. The fill is
// not measured; a wide window only makes it quicker.
const fillWindow = 1024

// declare declares spec's topology.
func declare(url string, spec runtime.QueueSpec) error {
	return faults.OnConnection(url, func(conn *amqp.Connection) error { return runtime.DeclareTopology(conn, spec) })
}

// fill publishes n persistent messages to queue, each confirmed: as fast as
// it can, or at rate messages per second when rate > 0.
func fill(url, queue string, tpl *template, n int, rate float64) error {
	return faults.OnChannel(url, func(ch *amqp.Channel) error { return publishConfirmed(ch, queue, tpl, n, rate) })
}

// publishConfirmed is fill on ch, a channel of its own.
func publishConfirmed(ch *amqp.Channel, queue string, tpl *template, n int, rate float64) error {
	if err := ch.Confirm(false); err != nil {
		return err
	}
	pending := make(chan *amqp.DeferredConfirmation, fillWindow)
	failed := make(chan error, 1)
	go func() {
		defer close(failed)
		for dc := range pending {
			if !dc.Wait() {
				failed <- fmt.Errorf("fill: publish %d nacked", dc.DeliveryTag)
				return
			}
		}
	}()
	start := time.Now()
	for seq := range n {
		if rate > 0 {
			// Message seq is due at start + seq/rate; sleeping only when a
			// millisecond ahead keeps the pace without a timer per message.
			if ahead := time.Until(start.Add(time.Duration(float64(seq) / rate * float64(time.Second)))); ahead > time.Millisecond {
				time.Sleep(ahead)
			}
		}
		dc, err := ch.PublishWithDeferredConfirm("", queue, true, false, tpl.stamp(seq, time.Now()))
		if err != nil {
			close(pending)
			return err
		}
		select {
		case pending <- dc:
		case err := <-failed:
			close(pending)
			return err
		}
	}
	close(pending)
	return <-failed
}

// awaitConsumers waits until queue has at least want consumers, or ctx ends.
func awaitConsumers(ctx context.Context, url, queue string, want int) error {
	return faults.OnChannel(url, func(ch *amqp.Channel) error {
		for {
			q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
			if err != nil {
				return err
			}
			if q.Consumers >= want {
				return nil
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%d of %d consumers on %s: %w", q.Consumers, want, queue, ctx.Err())
			case <-time.After(5 * time.Millisecond):
			}
		}
	})
}

// depth is how many messages wait in queue (ready, not unacknowledged).
func depth(url, queue string) (n int, err error) {
	err = faults.OnChannel(url, func(ch *amqp.Channel) error {
		q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		n = q.Messages
		return err
	})
	return n, err
}

// deleteTopology removes every queue of spec.
func deleteTopology(url string, spec runtime.QueueSpec) error {
	return faults.OnChannel(url, func(ch *amqp.Channel) error {
		for _, d := range queue.Declarations(topology(spec)) {
			if _, err := ch.QueueDelete(d.Name, false, false, false); err != nil {
				return err
			}
		}
		return nil
	})
}

// settleCheck waits until the consumer's closed channel has given its
// unacknowledged messages back (so that depth counts them) and checks where
// the n messages went.
func settleCheck(ctx context.Context, url string, spec runtime.QueueSpec, scenario string, n int) error {
	wantMain, wantBucket := 0, 0
	if scenario == scenarioRetry {
		wantBucket = n
	}
	var main, bucket int
	for {
		var err error
		if main, err = depth(url, spec.Name); err != nil {
			return err
		}
		if bucket, err = depth(url, queue.RetryBucket(spec.Name, retryDelay)); err != nil {
			return err
		}
		if main == wantMain && bucket == wantBucket {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("after the run %s holds %d (want %d) and its bucket %d (want %d)", spec.Name, main, wantMain, bucket, wantBucket)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
