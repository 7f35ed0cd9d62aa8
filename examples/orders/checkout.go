package main

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lily-mq/lily/examples/orders/ordersmsg"
	"github.com/lily-mq/lily/outbox/pgoutbox"
	"github.com/lily-mq/lily/runtime"
)

// demoSchema is the PostgreSQL schema the demo's checkout writes to: its
// orders and its outbox.
const demoSchema = "lily_demo"

// openCheckout connects to the shop's database with the demo's schema
// first in the search path, and starts it empty: the orders table and the
// outbox's.
func openCheckout(ctx context.Context, dsn string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("the outbox part needs PostgreSQL (-pg or LILY_PG_DSN): %w", err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = demoSchema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		_, err = pool.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+demoSchema)
	}
	if err == nil {
		err = pgoutbox.Migrate(ctx, pool)
	}
	if err == nil {
		_, err = pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS checkout_orders (id text PRIMARY KEY, amount_cents bigint NOT NULL);
			TRUNCATE checkout_orders, lily_outbox`)
	}
	if err != nil {
		if pool != nil {
			pool.Close()
		}
		return nil, fmt.Errorf("the outbox part needs PostgreSQL (-pg or LILY_PG_DSN): %w", err)
	}
	return pool, nil
}

// checkout is the shop's checkout: it records an order and its OrderPlaced
// event in one transaction, the event through out. The relay publishes the
// event once the transaction commits; an order rolled back publishes nothing.
type checkout struct {
	pool *pgxpool.Pool
	// out sends the event into the transaction ctx carries: the demo's is
	// pgoutbox.Outbox{}. A test's is a lilytest.Recorder, which keeps the
	// event as announce sends it, with no transaction: an outbox Recorder,
	// like pgoutbox.Outbox, refuses a send outside one.
	out runtime.Sender
}

// place writes order id with its event, and commits them, or (commit false)
// rolls them back.
func (c checkout) place(ctx context.Context, id string, cents int64, commit bool) error {
	return pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO checkout_orders (id, amount_cents) VALUES ($1, $2)", id, cents); err != nil {
			return err
		}
		if err := c.announce(pgoutbox.WithTx(ctx, tx), id, cents); err != nil {
			return err
		}
		if !commit {
			return errRolledBack
		}
		return nil
	})
}

// announce sends order id's OrderPlaced event through out, within ctx's
// transaction.
func (c checkout) announce(ctx context.Context, id string, cents int64) error {
	return ordersmsg.PublishOrderPlacedV1(ctx, c.out, id, &ordersmsg.OrderPlacedV1{OrderID: id, AmountCents: cents})
}

// errRolledBack rolls a checkout back on purpose.
var errRolledBack = fmt.Errorf("the customer cancelled")

// dropCheckout deletes the demo's schema, with its orders and its outbox.
func dropCheckout(ctx context.Context, dsn string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+demoSchema+" CASCADE")
	return err
}
