package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/examples/orders/ordersmsg"
	"github.com/lily-mq/lily/outbox/pgoutbox"
	"github.com/lily-mq/lily/runtime"
)

// demoMessage is one message the demo publishes, and what it shows.
type demoMessage struct {
	shows string
	msg   runtime.Publishing
	// publish, when set, sends the message as the schema says; otherwise the
	// shop's Publisher sends msg to orderKey.
	publish func(context.Context, runtime.Sender) error
}

// demoMessages builds what the demo publishes. Well-formed messages come from
// the generated producers; the others are built by hand on purpose, as a
// producer outside this schema might send them, since the generated
// producers refuse to build them.
func demoMessages() ([]demoMessage, error) {
	v1 := func(id string, cents int64) (runtime.Publishing, error) {
		return ordersmsg.NewOrderPlacedV1(id, &ordersmsg.OrderPlacedV1{OrderID: id, AmountCents: cents})
	}
	ok := &ordersmsg.OrderPlacedV2{
		OrderID:     "order-ok",
		AmountCents: 4200,
		Customer:    ordersmsg.OrderPlacedV2Customer{Email: "ada@example.com", Name: ptr("Ada")},
		Items:       []ordersmsg.OrderPlacedV2ItemsItem{{SKU: "LILY-1", Qty: 2}},
		PlacedAt:    time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC),
		Channel:     ordersmsg.OrderPlacedV2ChannelWeb,
		Headers:     ordersmsg.OrderPlacedV2Headers{XTenant: "acme"},
	}
	v2, err := ordersmsg.NewOrderPlacedV2(ok.OrderID, ok)
	if err != nil {
		return nil, err
	}
	publishV2 := func(ctx context.Context, s runtime.Sender) error {
		return ordersmsg.PublishOrderPlacedV2(ctx, s, ok.OrderID, ok)
	}
	flaky, err := v1("order-flaky", 1500)
	if err != nil {
		return nil, err
	}
	refused, err := v1("order-refused", 990)
	if err != nil {
		return nil, err
	}
	badMeta, err := v1("order-bad-metadata", 100)
	if err != nil {
		return nil, err
	}
	badMeta.Headers["x-trace"] = strings.Repeat("\x1b[31m!", 2000)
	order := envelope.Message{Type: ordersmsg.OrderPlacedType}
	zero := runtime.NewPublishing(order, 1, "order-zero", []byte(`{"order_id":"order-zero","amount_cents":0}`))
	v3 := runtime.NewPublishing(order, 3, "order-v3", []byte(`{"order_id":"order-v3"}`))
	huge := runtime.NewPublishing(order, 1, "order-huge",
		fmt.Appendf(nil, `{"order_id":"order-huge","amount_cents":100,"note":%q}`, strings.Repeat("x", 20000)))
	return []demoMessage{
		{"succeeds", v2, publishV2},
		{"fails once, succeeds on retry", flaky, nil},
		{"fails permanently", refused, nil},
		{"breaks a bound of the schema", zero, nil},
		{"has an unsupported version", v3, nil},
		{"has bad metadata", badMeta, nil},
		{"is too large for orders", huge, nil},
	}, nil
}

func ptr[T any](v T) *T { return &v }

// shopExchange is the exchange the shop team publishes orders to, and
// orderKey the routing key of an order placed in the EU.
const (
	shopExchange = "shop.events"
	orderKey     = "order.placed.eu"
)

// specs are the demo's two queues: orders, and orders.audit, both bound to
// the shop team's exchange.
func specs() []runtime.QueueSpec {
	return []runtime.QueueSpec{ordersmsg.OrdersQueueSpec(), ordersmsg.OrdersAuditQueueSpec()}
}

// runDemo plays the shop team, which declares its exchange, then starts from
// empty queues, publishes the demo messages to the exchange, consumes them
// with the example's handlers and prints where each went and why.
func runDemo(url, dsn string) error {
	if err := shopTeamDeclares(url); err != nil {
		return err
	}
	for _, spec := range specs() {
		if err := resetQueues(url, spec); err != nil {
			return err
		}
	}
	msgs, err := demoMessages()
	if err != nil {
		return err
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	pool, err := openCheckout(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	fmt.Printf("Lily demo: the shop team publishes to its topic exchange %q through Lily's Publisher, each message confirmed:\n", shopExchange)
	fmt.Printf("  the good order by the generated PublishOrderPlacedV2 (key %q, as the schema says), the hand-built ones with key %q;\n", ordersmsg.OrderPlacedV2RoutingKey, orderKey)
	for _, spec := range specs() {
		fmt.Printf("  queue %q (%s) is bound to it by %q; retry buckets %v, DLQ %q\n",
			spec.Name, spec.Topology.Type, spec.Topology.Bindings[0].RoutingKey, spec.Topology.RetryDelays, spec.Topology.DeadLetterQueue)
	}
	fmt.Println()

	var mu sync.Mutex
	settled := map[string]bool{}
	seen := map[string]int{} // deliveries of each message, by queue
	flaky := func(spec runtime.QueueSpec) int { return seen[spec.Name+"/order-flaky"] }
	done, finished := make(chan struct{}), false
	observe := func(spec runtime.QueueSpec) func(runtime.Record) {
		return func(rec runtime.Record) {
			mu.Lock()
			defer mu.Unlock()
			fmt.Printf("  %-13s %-20s attempt %d  %-36s %s\n", spec.Name, rec.MessageID, rec.Attempt, describe(spec, rec), rec.Reason)
			seen[spec.Name+"/"+rec.MessageID]++
			if rec.Path != runtime.PathRetried {
				settled[spec.Name+"/"+rec.MessageID] = true
			}
			// Each queue gets the shop's messages and the checkout's one.
			if len(settled) == len(specs())*(len(msgs)+1) && !finished {
				finished = true
				close(done)
			}
		}
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	// One Publisher sends the shop's orders and carries both consumers'
	// retry and DLQ copies, on one connection; the consumers consume on one
	// other.
	publisher, err := runtime.NewPublisher(runtime.Config{URLs: []string{url}, Logger: quiet}, 0)
	if err != nil {
		return err
	}
	defer publisher.Close()
	config := func(spec runtime.QueueSpec) runtime.Config {
		return runtime.Config{URLs: []string{url}, Logger: quiet, Observe: observe(spec), Publisher: publisher}
	}
	ordersConsumer, err := ordersmsg.NewOrdersConsumer(orders{log: quiet}, config(ordersmsg.OrdersQueueSpec()))
	if err != nil {
		return err
	}
	auditConsumer, err := ordersmsg.NewOrdersAuditConsumer(audit{}, config(ordersmsg.OrdersAuditQueueSpec()))
	if err != nil {
		return err
	}
	if err := shopPublishes(ctx, publisher, msgs); err != nil {
		return err
	}
	for _, m := range msgs {
		fmt.Printf("published %-20s which %s\n", m.msg.MessageId, m.shows)
	}
	// The checkout writes two orders, each with its event in the outbox, in
	// one transaction: one commits, one is rolled back. The relay, run with
	// the consumers, publishes what committed through the same Publisher.
	shop := checkout{pool: pool, out: pgoutbox.Outbox{}}
	if err := shop.place(ctx, "order-outbox", 2500, true); err != nil {
		return err
	}
	if err := shop.place(ctx, "order-cancelled", 700, false); err != errRolledBack {
		return fmt.Errorf("checkout: %v", err)
	}
	fmt.Printf("wrote     %-20s with its order row, through the outbox, in one transaction that committed\n", "order-outbox")
	fmt.Printf("wrote     %-20s the same way, and rolled back: the relay never sees it\n", "order-cancelled")
	relay := pgoutbox.NewRelay(pool, publisher, pgoutbox.Options{Logger: quiet})
	fmt.Println("\nwhere each delivery went:")
	type result struct {
		report *runtime.Report
		err    error
	}
	served := make(chan result, 1)
	go func() {
		report, err := runtime.Serve(ctx, ordersConsumer, auditConsumer, relay)
		served <- result{report, err}
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		fmt.Println("  (gave up waiting after 30 s)")
	}
	stop()
	mu.Lock()
	fmt.Printf("\norder-flaky reached orders %d times and orders.audit %d: a retry goes straight back to its own queue, never through %s.\n",
		flaky(ordersmsg.OrdersQueueSpec()), flaky(ordersmsg.OrdersAuditQueueSpec()), shopExchange)
	mu.Unlock()
	res := <-served
	if res.err != nil {
		return res.err
	}
	fmt.Printf("\nshutdown report: %s\n", res.report)
	for _, spec := range specs() {
		if err := printQueues(url, spec); err != nil {
			return err
		}
	}
	return runPartners(url, ordersmsg.OrdersPartnersQueueSpec())
}

// audit keeps every order event: it handles each version by accepting it.
type audit struct{}

func (audit) HandleOrderPlacedV1(context.Context, *ordersmsg.OrderPlacedV1, runtime.RawDelivery) error {
	return nil
}

func (audit) HandleOrderPlacedV2(context.Context, *ordersmsg.OrderPlacedV2, runtime.RawDelivery) error {
	return nil
}

// shopTeamDeclares declares the shop team's exchange, as that team's own
// service would: Lily only checks that it exists.
func shopTeamDeclares(url string) error {
	return withChannel(url, func(ch *amqp.Channel) error {
		return ch.ExchangeDeclare(shopExchange, "topic", true, false, false, false, nil)
	})
}

func describe(spec runtime.QueueSpec, rec runtime.Record) string {
	switch rec.Path {
	case runtime.PathRetried, runtime.PathDeadLettered:
		return fmt.Sprintf("%s → %s", rec.Path, rec.Destination)
	case runtime.PathBrokerDeadLettered:
		return fmt.Sprintf("%s → %s", rec.Path, spec.Topology.DeadLetterQueue)
	}
	return string(rec.Path)
}

func resetQueues(url string, spec runtime.QueueSpec) error {
	if err := withConnection(url, func(conn *amqp.Connection) error { return runtime.DeclareTopology(conn, spec) }); err != nil {
		return err
	}
	return withChannel(url, func(ch *amqp.Channel) error {
		for _, q := range queueNames(spec) {
			if _, err := ch.QueuePurge(q, false); err != nil {
				return err
			}
		}
		return nil
	})
}

// deleteQueues deletes every queue of spec (the queue, its retry buckets and
// its DLQ) with the messages they hold, and says so on w. The names come from
// the generated spec, as the demo's do, so the two cannot drift apart. A
// queue that is already gone is not an error: RabbitMQ's delete is idempotent.
// Deleting the queue deletes its bindings.
func deleteQueues(url string, spec runtime.QueueSpec, w io.Writer) error {
	return withChannel(url, func(ch *amqp.Channel) error {
		for _, q := range queueNames(spec) {
			n, err := ch.QueueDelete(q, false, false, false)
			if err != nil {
				return fmt.Errorf("delete queue %s: %w", q, err)
			}
			fmt.Fprintf(w, "deleted queue %-26s (%d messages)\n", q, n)
		}
		return nil
	})
}

// cleanUp deletes the demo's queues, the exchange it declared for the shop
// team, and its checkout's schema.
func cleanUp(url, dsn string, w io.Writer) error {
	for _, spec := range append(specs(), ordersmsg.OrdersPartnersQueueSpec()) {
		if err := deleteQueues(url, spec, w); err != nil {
			return err
		}
	}
	err := withChannel(url, func(ch *amqp.Channel) error {
		if err := ch.ExchangeDelete(shopExchange, false, false); err != nil {
			return fmt.Errorf("delete exchange %s: %w", shopExchange, err)
		}
		fmt.Fprintf(w, "deleted exchange %s\n", shopExchange)
		return nil
	})
	if err != nil {
		return err
	}
	if err := dropCheckout(context.Background(), dsn); err != nil {
		return fmt.Errorf("drop schema %s: %w", demoSchema, err)
	}
	fmt.Fprintf(w, "dropped PostgreSQL schema %s (the checkout's orders and outbox)\n", demoSchema)
	return nil
}

// shopPublishes publishes msgs to the shop team's exchange as that team's
// service does: through Lily's Publisher, each answered by the broker's
// confirm. The well-formed order goes through its generated Publish
// function, to the routing key the schema names; the others, built by hand,
// to orderKey.
func shopPublishes(ctx context.Context, publisher *runtime.Publisher, msgs []demoMessage) error {
	for _, m := range msgs {
		var err error
		if m.publish != nil {
			err = m.publish(ctx, publisher)
		} else {
			err = publisher.Send(ctx, runtime.Message{Exchange: shopExchange, RoutingKey: orderKey, Publishing: m.msg})
		}
		if err != nil {
			return fmt.Errorf("publish %s: %w", m.msg.MessageId, err)
		}
	}
	return nil
}

// publishTo publishes msgs to exchange with key, mandatory and confirmed.
func publishTo(url, exchange, key string, msgs []demoMessage) error {
	return withChannel(url, func(ch *amqp.Channel) error {
		if err := ch.Confirm(false); err != nil {
			return err
		}
		for _, m := range msgs {
			dc, err := ch.PublishWithDeferredConfirm(exchange, key, true, false, m.msg)
			if err != nil {
				return err
			}
			if !dc.Wait() {
				return fmt.Errorf("publish of %s not confirmed", m.msg.MessageId)
			}
		}
		return nil
	})
}

// printQueues shows what each queue holds after the consumer stopped.
func printQueues(url string, spec runtime.QueueSpec) error {
	return withChannel(url, func(ch *amqp.Channel) error {
		fmt.Printf("\nqueues of %s now:\n", spec.Name)
		for _, name := range queueNames(spec) {
			q, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
			if err != nil {
				return err
			}
			fmt.Printf("  %-20s %d messages\n", name, q.Messages)
		}
		for {
			d, ok, err := ch.Get(spec.Topology.DeadLetterQueue, false)
			if err != nil || !ok {
				return err
			}
			why, _ := d.Headers["x-lily-failure-reason"].(string)
			if why == "" {
				why = "dead-lettered by the broker (x-death: rejected)"
			}
			fmt.Printf("  in %s: %-20s %s\n", spec.Topology.DeadLetterQueue, d.MessageId, why)
		}
	})
}

// queueNames lists the queues of spec's topology: the main queue, a retry
// bucket <name>.retry.<delay> per delay, and the DLQ (docs/runtime.md).
func queueNames(spec runtime.QueueSpec) []string {
	names := []string{spec.Name}
	for _, d := range spec.Topology.RetryDelays {
		names = append(names, spec.Name+".retry."+d.String())
	}
	return append(names, spec.Topology.DeadLetterQueue)
}

func withChannel(url string, f func(*amqp.Channel) error) error {
	return withConnection(url, func(conn *amqp.Connection) error {
		ch, err := conn.Channel()
		if err != nil {
			return err
		}
		defer ch.Close()
		return f(ch)
	})
}

func withConnection(url string, f func(*amqp.Connection) error) error {
	conn, err := amqp.Dial(url)
	if err != nil {
		return fmt.Errorf("connect to %s: %w (is RabbitMQ running?)", url, err)
	}
	defer conn.Close()
	return f(conn)
}
