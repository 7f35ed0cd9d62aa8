// Package lilytest tests Lily handlers without a broker. It hands a message
// to a consumer's generated routes and tells what Lily would do with it: the
// handler's result, the record of the delivery (acked; retried to which
// bucket, as which attempt; dead-lettered, and why; dead-lettered by the
// broker; rejected as poison or unsupported), the retry or DLQ copy it
// published, and the ACK or NACK it wrote.
//
// None of that is worked out here. A Harness runs a runtime.Consumer, built
// by runtime.NewConsumer, whose deliveries travel the runtime's own journey:
// the guard, dispatch, the Scope, the Inbox claim, the handler under its
// timeout, the commit, the cleanup, AfterDelivery, the decision table, the
// executor and the record. Only the broker is a fake: its channel keeps each
// ACK and NACK the runtime's settler writes, and its publisher keeps each
// retry or DLQ copy and confirms it, or answers as AnswerHandoffs says, so
// that a test can see the one paced requeue that follows a handoff that
// failed.
//
// A test builds a Harness from the generated spec and routes, with the
// handler under test, and delivers what the generated producers build:
//
//	h, err := lilytest.New(ordersmsg.OrdersQueueSpec(), ordersmsg.OrdersRoutes(handler), runtime.Config{})
//	...
//	defer h.Close()
//	p, _ := ordersmsg.NewOrderPlacedV1("order-1", &ordersmsg.OrderPlacedV1{OrderID: "order-1", AmountCents: 100})
//	res := h.Deliver(p)
//	// res.Path, res.Reason, res.Destination, res.NextAttempt(), res.Err ...
//
// Deliver the retry copy (res.Copy) to run the next attempt: it is as the
// retry bucket hands it back, with the x-death RabbitMQ adds. RawDelivery reads a message through the guard and
// dispatch alone, for a test that calls a handler method directly.
//
// Inbox is an in-memory inbox: a message whose work committed is a duplicate
// the next time, and a claim can be deferred or its commit made to fail.
// Recorder is a runtime.Sender that keeps what a handler sends: at once, as
// a Publisher's send is on the broker even if the handler then fails; or,
// as an Outbox, only once the Inbox claim commits, as an outbox's row is
// published. AfterCommit lets a fake of the handler's own store write as the
// claim's transaction would.
package lilytest
