// Package pgoutbox is Lily's transactional outbox on PostgreSQL (pgx v5).
//
// Write inserts messages into lily_outbox in the caller's transaction, so
// they exist exactly when the business rows written with them do. A Relay,
// run beside the consumers (runtime.Serve runs both), leases due rows,
// publishes them through a runtime.Publisher and deletes each row only after
// the broker confirmed it. A message is therefore published at least once
// after its commit, and twice only when a relay published it but did not
// delete its row (it died, lost the database, or got no confirm) and a relay
// publishes it again: the consumer's inbox drops such a copy by its message
// id. Messages with the same order key go one at a time, in write order.
// Relay.Health tells a probe or a monitor whether the relay runs, and
// whether its database and the broker answer it.
//
// In a handler, Outbox sends through the inbox's claim transaction, so that
// the claim, the business rows and the outbox rows commit together. Apply the
// schema with Migrate or the files of migrations/ in order; docs/outbox.md
// tells the whole contract.
package pgoutbox

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lily-mq/lily/inbox/pginbox"
	"github.com/lily-mq/lily/internal/outboxcodec"
	"github.com/lily-mq/lily/internal/sanitize"
	"github.com/lily-mq/lily/runtime"
)

// migrations are the schema's steps, applied in the order of their names.
//
//go:embed migrations/*.sql
var migrations embed.FS

// Migrate creates lily_outbox and its indexes in the pool's search path, or
// brings a table an earlier version made up to date, by applying each file
// of migrations/ in order (each is idempotent). A table that is up to date is
// left alone, without a lock. It is safe to call from every worker at
// start-up: an advisory lock lets one of them migrate while the others wait,
// and those find the table up to date once they have the lock, and leave it
// alone.
//
// Migrate refuses, changing nothing, when the first schema of the search
// path has no lily_outbox and a later one has a table that lacks a
// migration (one an earlier version made, in public, under the default
// "$user", public once a schema named after the role exists): it would
// create an empty table in the first schema, in front of the rows waiting in
// the other, and the relay and Write would use it. Set the search_path to
// start where the table is, or move the table into the first schema. A table
// up to date further down the path is left as it is.
// A migration that waits more than lockWait for a lock on the table (behind
// a long transaction that reads it, which the writes behind the migration
// would wait for too) fails instead.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	current, err := isCurrent(ctx, pool)
	if err != nil || current {
		return err
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("pgoutbox: migrate: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	// Concurrent CREATE TABLE IF NOT EXISTS can still fail on the catalog's
	// unique index; the lock serialises them. It is the schema's own, so
	// that migrating one schema's table waits for no other's.
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext('lily_outbox migrate ' || coalesce(current_schema(), '')))"); err != nil {
		return fmt.Errorf("pgoutbox: migrate: %w", err)
	}
	// A worker that found the table behind may have waited here for one
	// that brought it up to date: applying the files again would take locks
	// on the table (behind every transaction that wrote or read it, holding
	// off all that come after) for nothing.
	if current, err = isCurrent(ctx, tx); err != nil {
		return err
	}
	if !current {
		if err := notInFront(ctx, tx); err != nil {
			return err
		}
		if err := apply(ctx, tx); err != nil {
			return err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("pgoutbox: migrate: %w", err)
	}
	return nil
}

// notInFront refuses to migrate when the lily_outbox the search_path finds
// (what the relay and Write use) is not in its first schema, which has none:
// 001 would create one there, and the later steps would bring that one up
// to date, so that the relay and Write would use a new, empty table in front
// of the rows waiting in the other, and never publish them. A temporary
// table is left out: the relay refuses it anyway.
func notInFront(ctx context.Context, tx pgx.Tx) error {
	var schema, elsewhere *string
	var path string
	if err := tx.QueryRow(ctx, `SELECT current_schema(), current_setting('search_path'),
		(SELECT n.nspname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE c.oid = to_regclass('lily_outbox') AND c.relpersistence <> 't'
			AND n.nspname IS DISTINCT FROM current_schema())`).Scan(&schema, &path, &elsewhere); err != nil {
		return fmt.Errorf("pgoutbox: migrate: %w", err)
	}
	if elsewhere == nil || schema == nil {
		return nil
	}
	return fmt.Errorf("pgoutbox: migrate: lily_outbox is in schema %q, later in the search_path (%q) than its first schema %q, which has none, and it lacks a migration: "+
		"applying them would create one in %q, and the relay and Write would use that empty table and never publish the rows waiting in %q. "+
		"Set the search_path to start at %q, or move the table into %q (ALTER TABLE %s SET SCHEMA %s), then Migrate; "+
		"if %q's table is another service's, create this one's in %q with the files of migrations/ in order",
		*elsewhere, path, *schema, *schema, *elsewhere, *elsewhere, *schema,
		quoted(*elsewhere, "lily_outbox"), quoted(*schema),
		*elsewhere, *schema)
}

// quoted is names as SQL quotes them, sanitized as a destination's names
// are, for an error that suggests a statement: a schema may be named with
// any UTF-8 but NUL. Each name takes 63 bytes at most (PostgreSQL's limit),
// each byte escaped in four, in quotes, with a dot.
func quoted(names ...string) string {
	return sanitize.Name(pgx.Identifier(names).Sanitize(), len(names)*(4*63+3))
}

// apply applies each file of migrations/ in tx, in order, waiting at most
// lockWait for each lock on the table.
func apply(ctx context.Context, tx pgx.Tx) error {
	steps, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return fmt.Errorf("pgoutbox: migrate: %w", err)
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", lockWait.Milliseconds())); err != nil {
		return fmt.Errorf("pgoutbox: migrate: %w", err)
	}
	for _, name := range steps {
		sql, err := migrations.ReadFile(name)
		if err != nil {
			return fmt.Errorf("pgoutbox: migrate: %w", err)
		}
		if _, err := tx.Exec(ctx, string(sql)); err != nil {
			return fmt.Errorf("pgoutbox: migrate: %s: %w", name, err)
		}
	}
	return nil
}

// lockWait bounds Migrate's wait for a lock on lily_outbox.
const lockWait = 10 * time.Second

// isCurrent reports whether lily_outbox exists with every migration's
// column and index. It reads the catalog alone: it takes no lock on the
// table. The indexes are looked for on the table the search_path finds,
// not by their names through the path: another schema further down it may
// hold indexes of the same names, on its own lily_outbox.
func isCurrent(ctx context.Context, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (bool, error) {
	var current bool
	err := db.QueryRow(ctx, `SELECT to_regclass('lily_outbox') IS NOT NULL
		AND EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('lily_outbox') AND attname = 'retry_at' AND NOT attisdropped)
		AND EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('lily_outbox') AND attname = 'behind' AND NOT attisdropped)
		AND (SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
			WHERE i.indrelid = to_regclass('lily_outbox')
			AND c.relname IN ('lily_outbox_order_key', 'lily_outbox_untried_head', 'lily_outbox_behind', 'lily_outbox_retry')) = 4`).Scan(&current)
	if err != nil {
		return false, fmt.Errorf("pgoutbox: migrate: %w", err)
	}
	return current, nil
}

// Write inserts msgs into lily_outbox in tx, in order: their ids, and so
// the order of messages with the same order key, follow it. It checks every
// message before it inserts any: an exchange or a routing key; the exchange,
// the routing key, each string property and each header name of at most 255
// bytes of UTF-8 without NUL; header values of the types amqp091-go
// publishes, no NaN or infinity among them, with tables and arrays nested
// at most 32 deep, the headers' own table included, each of at most 8,192
// entries, and a CC or BCC header an array; properties and headers within
// frame.MaxProperties bytes of content header; a body of at most 512 MiB,
// the most RabbitMQ takes whatever its max_message_size. Any order key is
// accepted, and an empty message id, as Publisher.Send takes it: a profile
// without ids sends none, and no inbox can drop that message's copies.
//
// A body must also cross the link to the broker, with the bodies sent
// beside it (MaxBytes and a row), within its send's deadline (four fifths
// of Lease: 24s by default, about 3 MiB/s for 64 MiB): past it, the
// attempt ends unconfirmed ("the publish did not return in time" in
// last_error), a possible copy, and closes the publisher's connection under
// every publish beside it. Keep such bodies off the broker, lower
// MaxBytes, or raise Lease; docs/outbox.md says how to find them.
//
// The transaction's commit is made durable on the server (synchronous_commit
// raised from off to local for tx alone): the relay may read its rows as
// soon as it commits.
//
// It inserts into the lily_outbox tx's search_path finds, which must be the
// table the relay reads (the one its pool's search_path found when it
// started). A session-level SET search_path (not SET LOCAL) that other code
// left on a pooled connection moves the writes of every later transaction
// on it: use SET LOCAL.
func Write(ctx context.Context, tx pgx.Tx, msgs ...runtime.Message) error {
	if tx == nil {
		return errors.New("pgoutbox: write: no transaction")
	}
	b := &pgx.Batch{}
	// Under synchronous_commit=off, COMMIT answers before its WAL is
	// flushed, and the relay may publish a row that a server crash then
	// loses with the business writes beside it: a message about work that
	// never happened. A transaction that writes the outbox commits durably
	// here at least; any other setting asks as much or more.
	b.Queue(`SELECT CASE current_setting('synchronous_commit')
		WHEN 'off' THEN set_config('synchronous_commit', 'local', true) END`)
	for i, m := range msgs {
		props, err := outboxcodec.Encode(m)
		if err != nil {
			return fmt.Errorf("pgoutbox: write: msgs[%d]: %w", i, err)
		}
		body := m.Body
		if body == nil {
			body = []byte{} // pgx writes a nil slice as NULL
		}
		b.Queue(`INSERT INTO lily_outbox (exchange, routing_key, order_key, properties, body)
			VALUES ($1, $2, NULLIF($3, ''), $4::jsonb, $5)`, m.Exchange, m.RoutingKey, outboxcodec.StoredOrderKey(m.OrderKey), string(props), body)
	}
	if len(msgs) == 0 {
		return nil
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("pgoutbox: write: %w", err)
	}
	return nil
}

// ErrNoTx is what Outbox.Send returns when ctx carries no transaction.
var ErrNoTx = errors.New("pgoutbox: no transaction in ctx: send from a handler whose message pginbox claimed, or bind one with pgoutbox.WithTx")

type txKey struct{}

// WithTx returns ctx carrying tx, for Outbox.Send outside a handler (or to
// write into another transaction than the inbox's claim).
func WithTx(ctx context.Context, tx pgx.Tx) context.Context {
	return context.WithValue(ctx, txKey{}, tx)
}

// Outbox is a runtime.Sender that writes each message into the transaction
// ctx carries: the one WithTx bound, or else the inbox's claim
// (pginbox.Tx). It never writes outside a transaction: without one, Send
// returns ErrNoTx. The zero value is ready to use.
type Outbox struct{}

var _ runtime.Sender = Outbox{}

// Send writes m as Write does, into ctx's transaction, and takes what Write
// takes: a body too large for the relay's publisher to write within its
// StepTimeout is stored and never published (Write says more). nil means
// written, not published: the relay publishes m once the transaction
// commits, and never if it rolls back.
func (Outbox) Send(ctx context.Context, m runtime.Message) error {
	tx, ok := ctx.Value(txKey{}).(pgx.Tx)
	if !ok {
		tx, ok = pginbox.Tx(ctx)
	}
	if !ok {
		return ErrNoTx
	}
	return Write(ctx, tx, m)
}
