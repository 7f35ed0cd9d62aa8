package ledger

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/lily-mq/lily/internal/services"
	"github.com/lily-mq/lily/topology"
)

// An openDB that fails after it created the business table leaves no table
// behind. Its DSN names a search_path, which pgx sends as a setting and
// psql, which creates the trigger, refuses as an option: it fails there.
func TestOpenDBLeavesNothingWhenItFails(t *testing.T) {
	dsn := services.PostgreSQL(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	const schema = "lily_ledger_opendb_test"
	if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE; CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE")
	r := newRun(Config{PostgresDSN: dsn + " search_path=" + schema}, spec("opendb-test", topology.Classic))
	if err := r.openDB(ctx, "opendbtest"); err == nil {
		r.closeDB()
		t.Fatal("openDB did not fail")
	}
	var left int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename = $2", schema, r.table).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("openDB failed and left its table %s.%s behind", schema, r.table)
	}
}
