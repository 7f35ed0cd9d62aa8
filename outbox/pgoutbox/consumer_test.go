package pgoutbox_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/inbox/pginbox"
	"github.com/lily-mq/lily/internal/queue"
	"github.com/lily-mq/lily/outbox/pgoutbox"
	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/topology"
)

// Outbox without a transaction in ctx writes nothing and says why.
func TestSendWithoutATransactionFails(t *testing.T) {
	err := pgoutbox.Outbox{}.Send(context.Background(), message("q", "m"))
	if !errors.Is(err, pgoutbox.ErrNoTx) {
		t.Errorf("Send = %v, want ErrNoTx", err)
	}
}

// WithTx binds a transaction of the caller's own: the row commits or rolls
// back with it.
func TestSendWritesIntoTheTransactionWithTxBinds(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, commit := range []bool{false, true} {
		tx, err := e.pool.Begin(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		id := map[bool]string{false: "rolled-back", true: "committed"}[commit]
		if err := (pgoutbox.Outbox{}).Send(pgoutbox.WithTx(e.ctx, tx), message("q", id)); err != nil {
			t.Fatal(err)
		}
		if n := len(e.rows()); n != 0 {
			t.Errorf("%d rows visible before the commit", n)
		}
		if commit {
			err = tx.Commit(e.ctx)
		} else {
			err = tx.Rollback(e.ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := e.rows(); len(got) != 1 || got["committed"].ID == 0 {
		t.Errorf("rows %v, want the committed one alone", got)
	}
}

// 6. A consumer with pginbox whose handler writes a business row and sends
// through the Outbox: the claim, the business row and the outbox row commit
// together, in the claim's transaction, and a handler error rolls all three
// back. The relay then publishes what committed.
func TestHandlerSendsCommitWithTheClaim(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if err := pginbox.Migrate(e.ctx, e.pool); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(e.ctx, "CREATE TABLE payments (id text PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	spec := runtime.QueueSpec{
		Name: e.prefix, Prefetch: 4, Concurrency: 2, MaxAttempts: 3,
		Topology:     topology.Queue{Type: topology.Classic, DeadLetterQueue: e.prefix + ".dlq", RetryDelays: []time.Duration{time.Second}},
		MaxBodyBytes: 4096, HandlerTimeout: 10 * time.Second,
		Messages: []envelope.Message{{Type: "Payment", Inbox: envelope.InboxRequired}},
	}
	if err := runtime.DeclareTopology(e.conn, spec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ch, err := e.conn.Channel()
		if err != nil {
			return
		}
		defer ch.Close()
		for _, d := range queue.Declarations(queue.Topology{Name: spec.Name, Queue: spec.Topology}) {
			_, _ = ch.QueueDelete(d.Name, false, false, false)
		}
	})
	out := e.queue("out", nil)

	var mu sync.Mutex
	seenOutside := map[string]int{} // outbox rows another connection saw while the handler ran
	handler := func(ctx context.Context, d runtime.RawDelivery) error {
		tx, ok := pginbox.Tx(ctx)
		if !ok {
			return runtime.Permanent(errors.New("no claim transaction"))
		}
		if _, err := tx.Exec(ctx, "INSERT INTO payments (id) VALUES ($1)", d.MessageID()); err != nil {
			return err
		}
		outID := "out-" + d.MessageID()
		if err := (pgoutbox.Outbox{}).Send(ctx, message(out, outID)); err != nil {
			return err
		}
		var n int
		if err := e.pool.QueryRow(ctx, "SELECT count(*) FROM lily_outbox WHERE properties->>'message_id' = $1", outID).Scan(&n); err != nil {
			return err
		}
		mu.Lock()
		seenOutside[d.MessageID()] = n
		mu.Unlock()
		if d.MessageID() == "fail-1" {
			return runtime.Permanent(errors.New("refused after the writes"))
		}
		return nil
	}
	records := make(chan runtime.Record, 8)
	consumer, err := runtime.NewConsumer(spec,
		runtime.Routes{{Type: "Payment", Version: 1, ContentType: "application/json"}: handler},
		runtime.Config{URLs: []string{e.brokerURL}, Inbox: pginbox.New(e.pool, pginbox.Options{}), ShutdownGrace: 5 * time.Second,
			Logger: e.logger(), Observe: func(r runtime.Record) { records <- r }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if _, err := consumer.Run(ctx); err != nil {
			t.Errorf("consumer: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })

	for _, id := range []string{"ok-1", "fail-1"} {
		if err := publishDirect(e, message(spec.Name, id)); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]runtime.Record{}
	for len(got) < 2 {
		select {
		case r := <-records:
			got[r.MessageID] = r
		case <-time.After(time.Minute):
			t.Fatalf("records after a minute: %+v", got)
		}
	}
	if r := got["ok-1"]; r.Commit != "committed" || r.Path != runtime.PathAcked {
		t.Errorf("ok-1: %+v", r)
	}
	if r := got["fail-1"]; r.Commit != "rolled back" || r.Path != runtime.PathDeadLettered {
		t.Errorf("fail-1: %+v", r)
	}
	if want := map[string]int{"ok-1": 0, "fail-1": 0}; !cmp.Equal(seenOutside, want) {
		t.Errorf("outbox rows seen outside the claim's transaction %v, want %v", seenOutside, want)
	}
	if got := e.strings("SELECT id FROM payments"); !cmp.Equal(got, []string{"ok-1"}) {
		t.Errorf("business rows %v", got)
	}
	if got := e.strings("SELECT message_id FROM lily_inbox WHERE consumer = $1", spec.Name); !cmp.Equal(got, []string{"ok-1"}) {
		t.Errorf("claims %v", got)
	}
	if rows := e.rows(); len(rows) != 1 || rows["out-ok-1"].ID == 0 {
		t.Errorf("outbox rows %v, want out-ok-1's alone", rows)
	}

	stop := e.relay(pgoutbox.Options{})
	e.eventually("the outbox row published", func() bool { return len(e.rows()) == 0 && e.ready(out) == 1 })
	if c := counts(stop()); !cmp.Equal(c, map[runtime.Path]int{"published": 1}) {
		t.Errorf("relay counts %v", c)
	}
	if got := ids(e.take(out)); !cmp.Equal(got, map[string]int{"out-ok-1": 1}) {
		t.Errorf("queue %s holds %v", out, got)
	}
	if got := ids(e.take(spec.Topology.DeadLetterQueue)); !cmp.Equal(got, map[string]int{"fail-1": 1}) {
		t.Errorf("DLQ holds %v", got)
	}
	if n := e.ready(spec.Name); n != 0 {
		t.Errorf("%d messages left in %s", n, spec.Name)
	}
}

// strings reads a column of text.
func (e *env) strings(sql string, args ...any) []string {
	e.t.Helper()
	rows, err := e.pool.Query(e.ctx, sql, args...)
	if err != nil {
		e.t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}
