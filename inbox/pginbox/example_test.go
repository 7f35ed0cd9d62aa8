// Example needs PostgreSQL and a RabbitMQ broker, so go test compiles it but
// does not run it. runtime's Example_inbox shows the same claims at work,
// without either, and checks what they do.

package pginbox_test

import (
	"context"
	"errors"
	"log"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lily-mq/lily/examples/orders/ordersmsg"
	"github.com/lily-mq/lily/inbox/pginbox"
	"github.com/lily-mq/lily/runtime"
)

// orders stores each order it handles through the inbox claim's
// transaction.
type orders struct {
	ordersmsg.UnimplementedOrdersHandler
}

func (orders) HandleOrderPlacedV1(ctx context.Context, msg *ordersmsg.OrderPlacedV1, d runtime.RawDelivery) error {
	tx, ok := pginbox.Tx(ctx)
	if !ok {
		return runtime.Permanent(errors.New("no inbox transaction in the handler's context"))
	}
	_, err := tx.Exec(ctx, "INSERT INTO orders (id, amount_cents) VALUES ($1, $2)", msg.OrderID, msg.AmountCents)
	return err // nil commits the claim with the row; an error rolls both back
}

// A consumer whose handler writes through the inbox claim's transaction:
// the claim of the message id and the order's row commit together, so a
// redelivery of an order that was stored is ACKed without the handler, and
// one another worker is storing is requeued without spending a retry.
func Example() {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(os.Getenv("LILY_PG_DSN"))
	if err != nil {
		log.Fatal(err)
	}
	cfg.MaxConns = 4 + 1 + 3 // the queue's claims, a commit's look-up, handlers abandoned at once: docs/inbox.md, "Size the pool"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := pginbox.Migrate(ctx, pool); err != nil { // the inbox's own table, lily_inbox
		log.Fatal(err)
	}
	// The service's own table, which its handler writes.
	if _, err := pool.Exec(ctx, "CREATE TABLE IF NOT EXISTS orders (id text PRIMARY KEY, amount_cents bigint NOT NULL)"); err != nil {
		log.Fatal(err)
	}
	consumer, err := ordersmsg.NewOrdersConsumer(orders{}, runtime.Config{
		URLs:  []string{os.Getenv("LILY_AMQP_URL")},
		Inbox: pginbox.New(pool, pginbox.Options{}),
	})
	if err != nil {
		log.Fatal(err)
	}
	report, err := runtime.Serve(ctx, consumer)
	log.Print(report)
	if err != nil {
		log.Fatal(err)
	}
}
