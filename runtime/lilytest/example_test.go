package lilytest_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/lily-mq/lily/examples/orders/ordersmsg"
	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/runtime/lilytest"
)

// payments is a handler of the example schema's queue "orders": it fails
// the first attempt of an order, as a payment service that is down would.
type payments struct {
	ordersmsg.UnimplementedOrdersHandler
}

var errPaymentsDown = errors.New("payment service unavailable")

func (payments) HandleOrderPlacedV1(_ context.Context, msg *ordersmsg.OrderPlacedV1, d runtime.RawDelivery) error {
	if d.Attempt() == 1 {
		return runtime.Retryable(errPaymentsDown)
	}
	return nil
}

// A handler's retryable failure goes to the queue's first retry bucket as
// the next attempt; the copy, delivered as the bucket hands it back, is
// handled and acked.
func Example() {
	h, err := lilytest.New(ordersmsg.OrdersQueueSpec(), ordersmsg.OrdersRoutes(payments{}), runtime.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close()
	p, err := ordersmsg.NewOrderPlacedV1("order-1", &ordersmsg.OrderPlacedV1{OrderID: "order-1", AmountCents: 1250})
	if err != nil {
		log.Fatal(err)
	}

	res := h.Deliver(p)
	fmt.Println(res.Path, "to", res.Destination, "as attempt", res.NextAttempt())
	fmt.Println(res.Reason)
	fmt.Println("the handler's own error:", errors.Is(res.Err, errPaymentsDown))

	res = h.Deliver(*res.Copy)
	fmt.Println(res.Path, "on attempt", res.Attempt)
	// Output:
	// retried to orders.retry.1s as attempt 2
	// retryable failure on attempt 1 of 3: payment service unavailable
	// the handler's own error: true
	// acked on attempt 2
}

// A handoff the broker does not confirm is followed by one NACK with
// requeue: the message is back in its queue, and no retry was spent.
func ExampleHarness_AnswerHandoffs() {
	h, err := lilytest.New(ordersmsg.OrdersQueueSpec(), ordersmsg.OrdersRoutes(payments{}), runtime.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close()
	p, err := ordersmsg.NewOrderPlacedV1("order-2", &ordersmsg.OrderPlacedV1{OrderID: "order-2", AmountCents: 990})
	if err != nil {
		log.Fatal(err)
	}

	h.AnswerHandoffs("returned")
	res := h.Deliver(p)
	fmt.Println(res.Path, res.Settlement, "after the handoff was", res.Handoff)
	// Output:
	// requeued requeue after the handoff was returned
}

// shipping sends a follow-up for each order it handles, through whatever
// Sender it is given: in production a Publisher or an outbox, here a
// Recorder. It sends before it checks the order, so that an order over
// the limit fails after its follow-up was sent.
type shipping struct {
	ordersmsg.UnimplementedOrdersHandler
	out runtime.Sender
}

func (s shipping) HandleOrderPlacedV1(ctx context.Context, msg *ordersmsg.OrderPlacedV1, _ runtime.RawDelivery) error {
	if err := ordersmsg.PublishOrderPlacedV1(ctx, s.out, "ship-"+msg.OrderID, msg); err != nil {
		return err
	}
	if msg.AmountCents > 100_000 {
		return runtime.Permanent(errors.New("over the shipping limit"))
	}
	return nil
}

// A Publisher's send is on the broker as soon as it returns: the follow-up
// of the order that failed after sending it was sent all the same. An
// outbox's row is published only once its transaction, the Inbox claim,
// commits: the failed order's rolled back with the claim. The second
// delivery of a message whose work committed is a duplicate, acked without
// the handler, and sends nothing.
func ExampleRecorder() {
	small, _ := ordersmsg.NewOrderPlacedV1("order-3", &ordersmsg.OrderPlacedV1{OrderID: "order-3", AmountCents: 100})
	huge, _ := ordersmsg.NewOrderPlacedV1("order-4", &ordersmsg.OrderPlacedV1{OrderID: "order-4", AmountCents: 5_000_000})
	for _, out := range []*lilytest.Recorder{{}, {Outbox: true}} {
		h, err := lilytest.New(ordersmsg.OrdersQueueSpec(), ordersmsg.OrdersRoutes(shipping{out: out}), runtime.Config{Inbox: &lilytest.Inbox{}})
		if err != nil {
			log.Fatal(err)
		}
		for _, p := range []runtime.Publishing{small, huge, small} {
			res := h.Deliver(p)
			fmt.Println(res.MessageID, res.Path, res.Commit)
		}
		h.Close()
		fmt.Print("outbox ", out.Outbox, ", sent:")
		for _, m := range out.Sent() {
			fmt.Print(" ", m.MessageId)
		}
		fmt.Println()
	}
	// Output:
	// order-3 acked committed
	// order-4 dead-lettered rolled back
	// order-3 acked duplicate
	// outbox false, sent: ship-order-3 ship-order-4
	// order-3 acked committed
	// order-4 dead-lettered rolled back
	// order-3 acked duplicate
	// outbox true, sent: ship-order-3
}

// A handler method called directly gets its delivery as the runtime reads
// it: through the guard, and dispatch.
func ExampleRawDelivery() {
	spec, routes := ordersmsg.OrdersQueueSpec(), ordersmsg.OrdersRoutes(payments{})
	p, _ := ordersmsg.NewOrderPlacedV1("order-5", &ordersmsg.OrderPlacedV1{OrderID: "order-5", AmountCents: 700})
	d, err := lilytest.RawDelivery(spec, routes, p, lilytest.Attempt(2))
	if err != nil {
		log.Fatal(err)
	}
	err = payments{}.HandleOrderPlacedV1(context.Background(), &ordersmsg.OrderPlacedV1{OrderID: "order-5", AmountCents: 700}, d)
	fmt.Println(d.MessageID(), "attempt", d.Attempt(), "error", err)

	p.Headers["x-lily-attempt"] = "2"
	_, err = lilytest.RawDelivery(spec, routes, p)
	fmt.Println(errors.Is(err, lilytest.ErrRejected), err)
	// Output:
	// order-5 attempt 2 error <nil>
	// true lilytest: rejected before any handler as poison: header x-lily-attempt not an integer
}
