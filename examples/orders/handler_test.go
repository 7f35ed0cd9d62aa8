package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/lily-mq/lily/examples/orders/ordersmsg"
	"github.com/lily-mq/lily/outbox/pgoutbox"
	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/runtime/lilytest"
	"github.com/lily-mq/lily/wire"
)

// The example's handlers, tested without a broker: each message the demo
// publishes takes the path the demo prints for it, through the runtime's own
// journey (package lilytest).

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// ordersHarness is the consumer of queue "orders" with the demo's handler.
func ordersHarness(t *testing.T, cfg runtime.Config) *lilytest.Harness {
	t.Helper()
	cfg.Logger = quiet
	h, err := lilytest.New(ordersmsg.OrdersQueueSpec(), ordersmsg.OrdersRoutes(orders{log: quiet}), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

// where is the path a demo message takes, as the demo prints it.
type where struct {
	path        runtime.Path
	destination string
	rejection   string
	reason      string
}

func TestOrdersHandlerTakesTheDemosPaths(t *testing.T) {
	msgs, err := demoMessages()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]where{
		"succeeds":                      {path: runtime.PathAcked, reason: "handled"},
		"fails once, succeeds on retry": {path: runtime.PathRetried, destination: "orders.retry.1s", reason: "retryable failure on attempt 1 of 3: payment service unavailable"},
		"fails permanently":             {path: runtime.PathDeadLettered, destination: "orders.dlq", reason: "permanent failure: customer account closed"},
		"breaks a bound of the schema":  {path: runtime.PathDeadLettered, destination: "orders.dlq", reason: "permanent failure: field amount_cents: less than 1"},
		"has an unsupported version":    {path: runtime.PathDeadLettered, destination: "orders.dlq", rejection: "unsupported", reason: "unsupported: OrderPlaced v3 as application/json has no route"},
		"has bad metadata":              {path: runtime.PathDeadLettered, destination: "orders.dlq", rejection: "poison"},
		"is too large for orders":       {path: runtime.PathBrokerDeadLettered, rejection: "oversized", reason: "body of 20054 bytes over the limit of 16384"},
	}
	h := ordersHarness(t, runtime.Config{})
	for _, m := range msgs {
		t.Run(m.shows, func(t *testing.T) {
			w, ok := want[m.shows]
			if !ok {
				t.Fatalf("no expectation for a message that %s", m.shows)
			}
			res := h.Deliver(m.msg)
			got := where{path: res.Path, destination: res.Destination, rejection: res.Rejection, reason: res.Reason}
			if w.reason == "" {
				got.reason = "" // the poison reason quotes the escapes, sanitized
			}
			if got != w {
				t.Errorf("went %+v, want %+v", got, w)
			}
		})
	}
}

// The flaky order's retry copy comes back as attempt 2 and is acked; the
// handler's own error, and the extractor's, are what Err holds.
func TestOrdersHandlerRetryAndErrors(t *testing.T) {
	h := ordersHarness(t, runtime.Config{})
	flaky, err := ordersmsg.NewOrderPlacedV1("order-flaky", &ordersmsg.OrderPlacedV1{OrderID: "order-flaky", AmountCents: 1500})
	if err != nil {
		t.Fatal(err)
	}
	res := h.Deliver(flaky)
	if res.NextAttempt() != 2 || res.Err == nil || res.Err.Error() != "retryable: payment service unavailable" {
		t.Fatalf("first attempt: %+v, next attempt %d", res, res.NextAttempt())
	}
	res = h.Deliver(*res.Copy)
	if res.Path != runtime.PathAcked || res.Attempt != 2 || res.Err != nil {
		t.Errorf("second attempt: %+v", res)
	}

	zero := runtime.NewPublishing(ordersmsg.OrdersQueueSpec().Messages[0], 1, "order-zero", []byte(`{"order_id":"order-zero","amount_cents":0}`))
	res = h.Deliver(zero)
	if fe, ok := errors.AsType[*wire.FieldError](res.Err); !ok || fe.Path != "amount_cents" || res.Handler != "permanent" {
		t.Errorf("schema bound: Err %v, result %+v", res.Err, res)
	}
}

// With an inbox, an order handled once is, delivered again, a duplicate:
// acked without running the handler.
func TestOrdersHandlerDuplicateThroughTheInbox(t *testing.T) {
	h := ordersHarness(t, runtime.Config{Inbox: &lilytest.Inbox{}})
	msgs, err := demoMessages()
	if err != nil {
		t.Fatal(err)
	}
	ok := msgs[0].msg
	if res := h.Deliver(ok); res.Path != runtime.PathAcked || res.Commit != "committed" || res.Handler != "ok" {
		t.Fatalf("first: %+v", res)
	}
	res := h.Deliver(ok, lilytest.Redelivered())
	if res.Path != runtime.PathAcked || res.Commit != "duplicate" || res.Handler != "" {
		t.Errorf("again: %+v", res)
	}
}

// What the checkout sends goes where the schema says, and the orders
// handler takes it as sent. The Recorder keeps it as announce sends it:
// that the outbox publishes it only once the checkout's transaction commits
// is pgoutbox's to show. An outbox Recorder, like pgoutbox.Outbox, refuses
// a send outside a transaction.
func TestCheckoutEventReachesTheOrdersHandler(t *testing.T) {
	for _, outbox := range []runtime.Sender{pgoutbox.Outbox{}, &lilytest.Recorder{Outbox: true}} {
		if err := (checkout{out: outbox}).announce(context.Background(), "order-outbox", 2500); err == nil {
			t.Errorf("%T sent outside a transaction", outbox)
		}
	}
	var out lilytest.Recorder
	if err := (checkout{out: &out}).announce(context.Background(), "order-outbox", 2500); err != nil {
		t.Fatal(err)
	}
	sent := out.Sent()
	if len(sent) != 1 {
		t.Fatalf("sent %d messages, want 1", len(sent))
	}
	m := sent[0]
	if m.Exchange != ordersmsg.OrderPlacedExchange || m.RoutingKey != ordersmsg.OrderPlacedV1RoutingKey || m.OrderKey != "order-outbox" || m.MessageId != "order-outbox" {
		t.Errorf("sent %+v", m)
	}
	res := ordersHarness(t, runtime.Config{}).Deliver(m.Publishing, lilytest.Via(m.Exchange, m.RoutingKey))
	if res.Path != runtime.PathAcked || res.MessageID != "order-outbox" {
		t.Errorf("delivered: %+v", res)
	}
}

// The partners' messages, each in its producer's envelope, take the paths
// the demo prints for them.
func TestPartnersHandlerTakesTheDemosPaths(t *testing.T) {
	h, err := lilytest.New(ordersmsg.OrdersPartnersQueueSpec(), ordersmsg.OrdersPartnersRoutes(partners{log: quiet}), runtime.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	want := map[string]where{
		"a CloudEvent, binary mode: succeeds":             {path: runtime.PathAcked},
		"a CloudEvent, structured mode: breaks a bound":   {path: runtime.PathDeadLettered, destination: "orders.partners.dlq"},
		"a Spring message: succeeds":                      {path: runtime.PathAcked},
		"a Spring message: fails once, succeeds on retry": {path: runtime.PathRetried, destination: "orders.partners.retry.1s"},
		"a CloudEvents batch: not supported":              {path: runtime.PathDeadLettered, destination: "orders.partners.dlq", rejection: "poison"},
	}
	for _, m := range partnerMessages() {
		res := h.Deliver(m.msg)
		if got := (where{path: res.Path, destination: res.Destination, rejection: res.Rejection}); got != want[m.shows] {
			t.Errorf("%s: went %+v (%s), want %+v", m.shows, got, res.Reason, want[m.shows])
		}
	}
}
