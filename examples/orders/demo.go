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

	"github.com/lily-mq/lily/examples/orders/ordersmsg"
	"github.com/lily-mq/lily/runtime"
)

// demoMessage is one message the demo publishes, and what it shows.
type demoMessage struct {
	shows string
	msg   runtime.Publishing
}

// demoMessages builds what the demo publishes. Well-formed messages come from
// the generated producers; the others are built by hand on purpose, as a
// producer outside this schema might send them, since the generated
// producers refuse to build them.
func demoMessages() ([]demoMessage, error) {
	v1 := func(id string, cents int64) (runtime.Publishing, error) {
		return ordersmsg.NewOrderPlacedV1(id, &ordersmsg.OrderPlacedV1{OrderID: id, AmountCents: cents})
	}
	v2, err := ordersmsg.NewOrderPlacedV2("order-ok", &ordersmsg.OrderPlacedV2{
		OrderID:     "order-ok",
		AmountCents: 4200,
		Customer:    ordersmsg.OrderPlacedV2Customer{Email: "ada@example.com", Name: ptr("Ada")},
		Items:       []ordersmsg.OrderPlacedV2ItemsItem{{SKU: "LILY-1", Qty: 2}},
		PlacedAt:    time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC),
		Channel:     ordersmsg.OrderPlacedV2ChannelWeb,
		Headers:     ordersmsg.OrderPlacedV2Headers{XTenant: "acme"},
	})
	if err != nil {
		return nil, err
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
	zero := runtime.NewPublishing(ordersmsg.OrderPlacedType, 1, "order-zero", []byte(`{"order_id":"order-zero","amount_cents":0}`))
	v3 := runtime.NewPublishing(ordersmsg.OrderPlacedType, 3, "order-v3", []byte(`{"order_id":"order-v3"}`))
	huge := runtime.NewPublishing(ordersmsg.OrderPlacedType, 1, "order-huge",
		fmt.Appendf(nil, `{"order_id":"order-huge","amount_cents":100,"note":%q}`, strings.Repeat("x", 20000)))
	return []demoMessage{
		{"succeeds", v2},
		{"fails once, succeeds on retry", flaky},
		{"fails permanently", refused},
		{"breaks a bound of the schema", zero},
		{"has an unsupported version", v3},
		{"has bad metadata", badMeta},
		{"is too large", huge},
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
func runDemo(url string) error {
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
	fmt.Printf("Lily demo: the shop team publishes to its topic exchange %q with key %q;\n", shopExchange, orderKey)
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
			if len(settled) == len(specs())*len(msgs) && !finished {
				finished = true
				close(done)
			}
		}
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	config := func(spec runtime.QueueSpec) runtime.Config {
		return runtime.Config{URLs: []string{url}, Logger: quiet, Observe: observe(spec)}
	}
	ordersConsumer, err := ordersmsg.NewOrdersConsumer(orders{log: quiet}, config(ordersmsg.OrdersQueueSpec()))
	if err != nil {
		return err
	}
	auditConsumer, err := ordersmsg.NewOrdersAuditConsumer(audit{}, config(ordersmsg.OrdersAuditQueueSpec()))
	if err != nil {
		return err
	}
	if err := publishAll(url, msgs); err != nil {
		return err
	}
	for _, m := range msgs {
		fmt.Printf("published %-20s which %s\n", m.msg.MessageId, m.shows)
	}
	fmt.Println("\nwhere each delivery went:")
	ctx, stop := context.WithCancel(context.Background())
	type result struct {
		report *runtime.Report
		err    error
	}
	ran := make(chan result, 2)
	for _, c := range []*runtime.Consumer{ordersConsumer, auditConsumer} {
		go func() {
			report, err := c.Run(ctx)
			ran <- result{report, err}
		}()
	}
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
	fmt.Println()
	for range 2 {
		res := <-ran
		if res.err != nil {
			return res.err
		}
		fmt.Printf("shutdown report: %s\n", res.report)
	}
	for _, spec := range specs() {
		if err := printQueues(url, spec); err != nil {
			return err
		}
	}
	return runPartners(url)
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
			fmt.Fprintf(w, "deleted queue %-20s (%d messages)\n", q, n)
		}
		return nil
	})
}

// cleanUp deletes the demo's queues and the exchange it declared for the shop
// team.
func cleanUp(url string, w io.Writer) error {
	for _, spec := range append(specs(), ordersmsg.OrdersPartnersQueueSpec()) {
		if err := deleteQueues(url, spec, w); err != nil {
			return err
		}
	}
	return withChannel(url, func(ch *amqp.Channel) error {
		if err := ch.ExchangeDelete(shopExchange, false, false); err != nil {
			return fmt.Errorf("delete exchange %s: %w", shopExchange, err)
		}
		fmt.Fprintf(w, "deleted exchange %s\n", shopExchange)
		return nil
	})
}

// publishAll publishes msgs to the shop team's exchange, as that team does.
func publishAll(url string, msgs []demoMessage) error {
	return publishTo(url, shopExchange, orderKey, msgs)
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
