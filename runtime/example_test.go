// Examples that need a RabbitMQ broker by their nature are compiled by go
// test but not run, so that go test -short needs no services: Example,
// ExampleConsumer_Run, ExampleConsumer_Force and ExampleServe run consumers
// against the broker, and ExamplePublisher_Send reports the broker's answer
// to a publish. The others run and check their output: where a broker would
// take part, package lilytest stands in for it.

package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/lily-mq/lily/examples/orders/ordersmsg"
	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/runtime/lilytest"
)

// orders handles queue "orders" of the example's schema. Embedding the
// generated UnimplementedOrdersHandler keeps the build working when the
// schema gains a version: until its method is written, that version's
// messages go to the DLQ.
type orders struct {
	ordersmsg.UnimplementedOrdersHandler
}

func (orders) HandleOrderPlacedV2(ctx context.Context, msg *ordersmsg.OrderPlacedV2, d runtime.RawDelivery) error {
	log.Printf("order %s of tenant %s, attempt %d", msg.OrderID, msg.Headers.XTenant, d.Attempt())
	return nil
}

// A service's main: the first SIGINT or SIGTERM stops intake and lets the
// work in flight settle through the shutdown's phases; a second one forces.
// The report lists every delivery not settled with proof.
func Example() {
	consumer, err := ordersmsg.NewOrdersConsumer(orders{}, runtime.Config{URLs: []string{os.Getenv("LILY_AMQP_URL")}})
	if err != nil {
		log.Fatal(err)
	}
	report, err := runtime.Serve(context.Background(), consumer)
	if err != nil {
		log.Fatal(err)
	}
	log.Print(report)
}

// A service that runs its consumer under a context of its own, here one a
// signal cancels, gets the same second-signal force: a SIGINT or SIGTERM
// during the shutdown forces it.
func ExampleConsumer_Run() {
	consumer, err := ordersmsg.NewOrdersConsumer(orders{}, runtime.Config{})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	report, err := consumer.Run(ctx)
	if err != nil {
		log.Fatal(err)
	}
	log.Print(report)
}

// Force ends the cooperative window early from code: here a service whose
// handlers may need minutes gives them a long ShutdownGrace, yet forces
// when the platform's own termination deadline draws near, 20 s into a 30 s
// one, leaving the ForceWindow and a StepTimeout (5 s each) before it.
func ExampleConsumer_Force() {
	consumer, err := ordersmsg.NewOrdersConsumer(orders{}, runtime.Config{ShutdownGrace: 2 * time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		time.Sleep(20 * time.Second) // the grace has 100 s left
		consumer.Force()             // handlers' contexts are cancelled at once
	}()
	_, _ = consumer.Run(ctx)
}

// Several queues in one process: one Publisher sends the service's own
// messages and carries every consumer's retry and DLQ copies, on one
// connection; Serve runs the consumers with one signal handling and returns
// one report.
func ExampleServe() {
	cfg := runtime.Config{URLs: []string{os.Getenv("LILY_AMQP_URL")}}
	publisher, err := runtime.NewPublisher(cfg, 0)
	if err != nil {
		log.Fatal(err)
	}
	defer publisher.Close()
	cfg.Publisher = publisher
	orders, err := ordersmsg.NewOrdersConsumer(orders{}, cfg)
	if err != nil {
		log.Fatal(err)
	}
	audit, err := ordersmsg.NewOrdersAuditConsumer(ordersmsg.UnimplementedOrdersAuditHandler{}, cfg)
	if err != nil {
		log.Fatal(err)
	}
	report, err := runtime.Serve(context.Background(), orders, audit)
	log.Print(report) // each queue's report in report.Parts
	if err != nil {
		log.Fatal(err)
	}
}

// A Publisher answers each Send with the broker's word: nil only once the
// broker confirmed the message and routed it to a queue.
func ExamplePublisher_Send() {
	publisher, err := runtime.NewPublisher(runtime.Config{URLs: []string{os.Getenv("LILY_AMQP_URL")}}, 0)
	if err != nil {
		log.Fatal(err)
	}
	defer publisher.Close()
	msg, err := ordersmsg.NewOrderPlacedV1("order-1", &ordersmsg.OrderPlacedV1{OrderID: "order-1", AmountCents: 1250})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = publisher.Send(ctx, runtime.Message{Exchange: "shop.events", RoutingKey: "order.placed.v1", Publishing: msg})
	switch {
	case err == nil:
		log.Print("confirmed")
	case errors.Is(err, runtime.ErrReturned):
		log.Print("no queue is bound for it: ", err)
	case errors.Is(err, runtime.ErrNacked):
		log.Print("a queue refused it; another it was routed to may hold it, so sending it again may make a copy: ", err)
	case errors.Is(err, runtime.ErrUnconfirmed):
		log.Print("it may or may not have arrived; sending it again may make a copy: ", err)
	default:
		log.Print("not sent: ", err)
	}
}

// A handler says whether a failure may pass: a retryable one goes to a retry
// bucket while attempts are left, a permanent one to the DLQ at once. A plain
// error is retryable.
func ExampleRetryable() {
	errPaymentDown := errors.New("payment service unavailable")
	errAccountClosed := errors.New("customer account closed")
	for _, err := range []error{
		runtime.Retryable(errPaymentDown),
		runtime.Permanent(errAccountClosed),
		errPaymentDown,
	} {
		qe, classified := errors.AsType[*runtime.QueueHandlerError](err)
		fmt.Printf("%v: classified %v, permanent %v, wraps the cause %v\n",
			err, classified, classified && qe.Permanent, errors.Is(err, errPaymentDown) || errors.Is(err, errAccountClosed))
	}
	// Output:
	// retryable: payment service unavailable: classified true, permanent false, wraps the cause true
	// permanent: customer account closed: classified true, permanent true, wraps the cause true
	// payment service unavailable: classified false, permanent false, wraps the cause true
}

type fileKey struct{}

// receipts writes each order to the file its delivery's scope opened.
type receipts struct {
	ordersmsg.UnimplementedOrdersHandler
}

func (receipts) HandleOrderPlacedV1(ctx context.Context, msg *ordersmsg.OrderPlacedV1, d runtime.RawDelivery) error {
	f := ctx.Value(fileKey{}).(*os.File)
	_, err := fmt.Fprintf(f, "order %s: %d cents\n", msg.OrderID, msg.AmountCents)
	return err
}

// A scope opens a per-delivery resource after dispatch (never for a rejected
// or unsupported delivery) and hands it to the handler in its context; the
// cleanup runs after the handler and the commit, and a cleanup that fails
// keeps the delivery from being ACKed. Here package lilytest runs the
// consumer with a fake broker; a service gives the same Config to the
// generated constructor (ordersmsg.NewOrdersConsumer) and runs it with
// Serve.
func Example_scope() {
	cfg := runtime.Config{
		Scope: func(ctx context.Context, d runtime.RawDelivery) (context.Context, func(context.Context) error, error) {
			f, err := os.CreateTemp("", "order-"+d.MessageID())
			if err != nil {
				return nil, nil, err // a retryable failure; the handler does not run
			}
			cleanup := func(context.Context) error {
				f.Close()
				return os.Remove(f.Name())
			}
			return context.WithValue(ctx, fileKey{}, f), cleanup, nil
		},
		AfterDelivery: func(ctx context.Context, d runtime.RawDelivery, soFar runtime.Record) error {
			fmt.Printf("%s: handler %q, commit %q\n", soFar.MessageID, soFar.Handler, soFar.Commit)
			return nil
		},
	}
	h, err := lilytest.New(ordersmsg.OrdersQueueSpec(), ordersmsg.OrdersRoutes(receipts{}), cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close()
	msg, err := ordersmsg.NewOrderPlacedV1("order-1", &ordersmsg.OrderPlacedV1{OrderID: "order-1", AmountCents: 1250})
	if err != nil {
		log.Fatal(err)
	}
	res := h.Deliver(msg)
	fmt.Println(res.Path, res.Settlement)
	// Output:
	// order-1: handler "ok", commit ""
	// acked ack
}

// ledger writes each order it handles to its store (here a map, by
// lilytest.AfterCommit, as a write in the inbox claim's transaction), and
// counts the times it ran.
type ledger struct {
	ordersmsg.UnimplementedOrdersHandler
	stored map[string]int64
	runs   *int
}

func (l ledger) HandleOrderPlacedV1(ctx context.Context, msg *ordersmsg.OrderPlacedV1, d runtime.RawDelivery) error {
	*l.runs++
	return lilytest.AfterCommit(ctx, func() { l.stored[msg.OrderID] = msg.AmountCents })
}

// A transactional inbox claims each message id in the transaction that
// carries the handler's writes: a claim another worker holds is requeued
// without spending a retry, and a redelivery of work that committed is
// ACKed without the handler. Here lilytest's in-memory Inbox stands for the
// database; a service gives the Config pginbox.New(pool, pginbox.Options{})
// and writes through the claim's transaction, pginbox.Tx(ctx), as package
// pginbox's example shows.
func Example_inbox() {
	inbox := &lilytest.Inbox{}
	handler := ledger{stored: map[string]int64{}, runs: new(int)}
	h, err := lilytest.New(ordersmsg.OrdersQueueSpec(), ordersmsg.OrdersRoutes(handler), runtime.Config{Inbox: inbox})
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close()
	msg, err := ordersmsg.NewOrderPlacedV1("order-1", &ordersmsg.OrderPlacedV1{OrderID: "order-1", AmountCents: 1250})
	if err != nil {
		log.Fatal(err)
	}

	inbox.Defer("order-1", "another worker holds the claim")
	res := h.Deliver(msg)
	fmt.Println(res.Path, res.Commit, "on attempt", res.Attempt)
	for range 2 { // the broker hands the message back
		res = h.Deliver(msg, lilytest.Redelivered())
		fmt.Println(res.Path, res.Commit, "on attempt", res.Attempt)
	}
	fmt.Println("handler ran", *handler.runs, "time; stored", handler.stored)
	// Output:
	// requeued deferred on attempt 1
	// acked committed on attempt 1
	// acked duplicate on attempt 1
	// handler ran 1 time; stored map[order-1:1250]
}
