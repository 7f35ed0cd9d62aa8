package main

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lily-mq/lily/internal/pgschema"
	"github.com/lily-mq/lily/internal/services"
	"github.com/lily-mq/lily/outbox/pgoutbox"
	"github.com/lily-mq/lily/runtime"
)

// BenchmarkRelay is the outbox relay's rate without a broker: b.N rows of
// the 1 KiB message in lily_outbox (a PostgreSQL schema of the run's own),
// then one relay, with its default batch, publishes them through a
// runtime.Publisher to the replay, which confirms each at once, and deletes
// each row after its confirm. msg/s runs from the relay's start to the last
// row's deletion; cpu-ns/op is this process's CPU time per message over it
// (PostgreSQL's is its own). Run with -benchtime 20000x.
func BenchmarkRelay(b *testing.B) {
	dsn := services.PostgreSQL(b)
	ctx, cancel := context.WithTimeout(b.Context(), 10*time.Minute)
	defer cancel()
	pool := relaySchema(b, ctx, dsn)
	tpl, err := newTemplate()
	if err != nil {
		b.Fatal(err)
	}
	const perTx = 1000
	for i := 0; i < b.N; i += perTx {
		msgs := make([]runtime.Message, min(perTx, b.N-i))
		for j := range msgs {
			p := tpl.msg
			p.MessageId = "r-" + strconv.Itoa(i+j)
			msgs[j] = runtime.Message{RoutingKey: "relay", Publishing: p}
		}
		tx, err := pool.Begin(ctx)
		if err == nil {
			err = pgoutbox.Write(ctx, tx, msgs...)
		}
		if err == nil {
			err = tx.Commit(ctx)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	url, end := startReplay(b, 0)
	quiet := slog.New(slog.DiscardHandler)
	pub, err := runtime.NewPublisher(runtime.Config{URLs: []string{url}, Logger: quiet}, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer pub.Close()
	relay := pgoutbox.NewRelay(pool, pub, pgoutbox.Options{Logger: quiet})
	runCtx, stop := context.WithCancel(ctx)
	type ran struct {
		report *runtime.Report
		err    error
	}
	done := make(chan ran, 1)
	b.ResetTimer()
	start, cpu := time.Now(), selfCPU()
	go func() {
		report, err := relay.Run(runCtx)
		done <- ran{report, err}
	}()
	for left := -1; left != 0; {
		time.Sleep(10 * time.Millisecond)
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM lily_outbox").Scan(&left); err != nil {
			b.Fatal(err)
		}
	}
	elapsed, cpu := time.Since(start), selfCPU()-cpu
	b.StopTimer()
	stop()
	r := <-done
	if r.err != nil {
		b.Fatal(r.err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msg/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	if got := r.report.Counts["published"]; got != b.N {
		b.Fatalf("the relay published %d of %d: %s", got, b.N, r.report)
	}
	if err := end().want(0, int64(b.N)); err != nil {
		b.Fatal(err)
	}
}

// relaySchema is a pool on a schema of the run's own, with lily_outbox in
// it, dropped when the benchmark ends.
func relaySchema(b *testing.B, ctx context.Context, dsn string) *pgxpool.Pool {
	schema := fmt.Sprintf("lily_bench_relay_%d", time.Now().UnixNano())
	pool, err := pgschema.Pool(ctx, dsn, schema, "", 0)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		b.Fatalf("PostgreSQL at %s (set LILY_PG_DSN to another): %v", dsn, err)
	}
	b.Cleanup(func() {
		if _, err := pool.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			b.Error(err)
		}
	})
	if err := pgoutbox.Migrate(ctx, pool); err != nil {
		b.Fatal(err)
	}
	return pool
}
