package pgoutbox_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/inbox/pginbox"
	"github.com/lily-mq/lily/outbox/pgoutbox"
	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/topology"
)

// A consumer whose handler marks an order paid and announces it through the
// outbox, and the relay that publishes the announcements, run together. The
// inbox's claim, the UPDATE and the outbox row commit in one transaction.
func Example() {
	ctx := context.Background()
	// 8 claims, 1 commit look-up, 3 for the relay, 4 handlers abandoned at once: docs/inbox.md, "Size the pool".
	pool, err := pgxpool.New(ctx, "postgres://localhost/shop?pool_max_conns=16")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := pginbox.Migrate(ctx, pool); err != nil {
		log.Fatal(err)
	}
	if err := pgoutbox.Migrate(ctx, pool); err != nil {
		log.Fatal(err)
	}
	publisher, err := runtime.NewPublisher(runtime.Config{URLs: []string{"amqp://localhost/"}}, 0)
	if err != nil {
		log.Fatal(err)
	}
	defer publisher.Close()

	paid := func(ctx context.Context, d runtime.RawDelivery) error {
		tx, _ := pginbox.Tx(ctx)
		if _, err := tx.Exec(ctx, "UPDATE orders SET paid = true WHERE payment_id = $1", d.MessageID()); err != nil {
			return err
		}
		return pgoutbox.Outbox{}.Send(ctx, runtime.Message{
			Exchange: "shop.events", RoutingKey: "order.paid", OrderKey: d.MessageID(),
			Publishing: runtime.NewPublishing(envelope.Message{Type: "OrderPaid"}, 1, "paid-"+d.MessageID(), d.Body()),
		})
	}
	spec := runtime.QueueSpec{
		Name: "payments", Prefetch: 16, Concurrency: 8, MaxAttempts: 5, MaxBodyBytes: 1 << 16, HandlerTimeout: 10 * time.Second,
		Topology: topology.Queue{Type: topology.Quorum, DeadLetterQueue: "payments.dlq", RetryDelays: []time.Duration{time.Second}},
		Messages: []envelope.Message{{Type: "Payment", Inbox: envelope.InboxRequired}},
	}
	consumer, err := runtime.NewConsumer(spec,
		runtime.Routes{{Type: "Payment", Version: 1, ContentType: "application/json"}: paid},
		runtime.Config{Inbox: pginbox.New(pool, pginbox.Options{}), Publisher: publisher})
	if err != nil {
		log.Fatal(err)
	}
	relay := pgoutbox.NewRelay(pool, publisher, pgoutbox.Options{})
	report, err := runtime.Serve(ctx, consumer, relay)
	fmt.Println(report, err)
}
