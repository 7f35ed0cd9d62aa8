// Package pgschema opens PostgreSQL pools on a schema of their own, for the
// ledgers, the outbox's tests and the relay benchmark. It is apart from
// internal/services so that a module whose tests name the services (the
// OpenTelemetry module's) does not need pgx.
package pgschema

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Pool opens a pool on dsn whose connections have schema alone as
// their search_path (a run's own tables), and app as their application_name
// when app is not empty (what the database faults of a ledger aim at). conns
// caps the pool when positive.
func Pool(ctx context.Context, dsn, schema, app string, conns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	if app != "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = app
	}
	if conns > 0 {
		cfg.MaxConns = conns
	}
	return pgxpool.NewWithConfig(ctx, cfg)
}
