package pgoutbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/internal/faults"
	"github.com/lily-mq/lily/internal/pgschema"
	"github.com/lily-mq/lily/internal/services"
	_ "github.com/lily-mq/lily/internal/update"
	"github.com/lily-mq/lily/outbox/pgoutbox"
	"github.com/lily-mq/lily/runtime"
)

// The outbox and its relay on the real PostgreSQL and RabbitMQ: each test
// asserts where every message is, in the table and in the queues.

// env is one test's schema (its own lily_outbox, through the pool's
// search_path), its queues' name prefix and a connection to the broker.
type env struct {
	t         *testing.T
	ctx       context.Context
	pgURL     string
	pool      *pgxpool.Pool
	brokerURL string
	conn      *amqp.Connection
	prefix    string
}

var unique atomic.Int64

// name is a name no other test of any run uses.
func name() string { return fmt.Sprintf("%d_%d", time.Now().UnixNano(), unique.Add(1)) }

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvNamed(t, "lily_outbox_test_", "lily.outbox."+strings.ReplaceAll(t.Name(), "/", ".")+".")
}

// newEnvNamed is newEnv with its schema and its queues' prefix named by
// the prefixes given.
func newEnvNamed(t *testing.T, schemaPrefix, queuePrefix string) *env {
	t.Helper()
	e := &env{t: t, pgURL: services.PostgreSQL(t), brokerURL: services.RabbitMQ(t)}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	e.ctx = ctx
	n := name()
	schema := schemaPrefix + n
	e.pool = e.poolIn(schema)
	if _, err := e.pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatalf("PostgreSQL at %s (set LILY_PG_DSN to another): %v", e.pgURL, err)
	}
	t.Cleanup(func() {
		if _, err := e.pool.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Error(err)
		}
	})
	// Twice on purpose: Migrate must be idempotent.
	for range 2 {
		if err := pgoutbox.Migrate(ctx, e.pool); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := amqp.Dial(e.brokerURL)
	if err != nil {
		t.Fatalf("RabbitMQ is not reachable at %s: %v", e.brokerURL, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	e.conn = conn
	e.prefix = queuePrefix + n
	return e
}

// proxy returns a frame-aware proxy to the broker (internal/faults), closed
// when the test ends, and the broker's URL through it.
func (e *env) proxy() (*faults.Proxy, string) {
	e.t.Helper()
	p, url, err := faults.ListenFor(e.brokerURL)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = p.Close() })
	return p, url
}

// poolIn is a pool whose connections have schema alone in their search_path.
func (e *env) poolIn(schema string) *pgxpool.Pool {
	e.t.Helper()
	pool, err := pgschema.Pool(context.Background(), e.pgURL, schema, "", 0)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(pool.Close)
	return pool
}

func (e *env) channel() *amqp.Channel {
	e.t.Helper()
	ch, err := e.conn.Channel()
	if err != nil {
		e.t.Fatal(err)
	}
	return ch
}

// queue declares the test's queue <prefix>.<suffix>, deleted when it ends.
func (e *env) queue(suffix string, args amqp.Table) string {
	e.t.Helper()
	q := e.prefix + "." + suffix
	ch := e.channel()
	defer ch.Close()
	if _, err := ch.QueueDeclare(q, false, false, false, false, args); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		ch, err := e.conn.Channel()
		if err == nil {
			_, _ = ch.QueueDelete(q, false, false, false)
			_ = ch.Close()
		}
	})
	return q
}

// ready counts the messages ready in queue.
func (e *env) ready(queue string) int {
	e.t.Helper()
	ch := e.channel()
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, false, false, false, false, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	return q.Messages
}

// take takes every message out of queue, in queue order.
func (e *env) take(queue string) []amqp.Delivery {
	e.t.Helper()
	ch := e.channel()
	defer ch.Close()
	var out []amqp.Delivery
	for {
		d, ok, err := ch.Get(queue, true)
		if err != nil {
			e.t.Fatal(err)
		}
		if !ok {
			return out
		}
		out = append(out, d)
	}
}

// takeOne takes the first message out of queue.
func (e *env) takeOne(queue string) amqp.Delivery {
	e.t.Helper()
	ch := e.channel()
	defer ch.Close()
	d, ok, err := ch.Get(queue, true)
	if err != nil || !ok {
		e.t.Fatalf("get %s: %v, %v", queue, ok, err)
	}
	return d
}

// ids counts the message ids in deliveries.
func ids(ds []amqp.Delivery) map[string]int {
	out := map[string]int{}
	for _, d := range ds {
		out[d.MessageId]++
	}
	return out
}

// write writes msgs in one transaction and commits it.
func (e *env) write(msgs ...runtime.Message) {
	e.t.Helper()
	err := pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error { return pgoutbox.Write(e.ctx, tx, msgs...) })
	if err != nil {
		e.t.Fatal(err)
	}
}

// message is a Payment v1 with id to queue by the default exchange.
func message(queue, id string) runtime.Message {
	return runtime.Message{RoutingKey: queue, Publishing: runtime.NewPublishing(envelope.Message{Type: "Payment"}, 1, id, []byte(`{"id":"`+id+`"}`))}
}

// outboxRow is what a test reads of a row of lily_outbox.
type outboxRow struct {
	ID                int64
	MessageID         string
	Attempts          int
	LastError, Leaser string
}

// rows reads the test's lily_outbox, by message id.
func (e *env) rows() map[string]outboxRow {
	e.t.Helper()
	rs, err := e.pool.Query(e.ctx, `SELECT id, properties->>'message_id', attempts,
		coalesce(last_error, ''), coalesce(lease_owner, '') FROM lily_outbox`)
	if err != nil {
		e.t.Fatal(err)
	}
	got, err := pgx.CollectRows(rs, pgx.RowToStructByPos[outboxRow])
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]outboxRow{}
	for _, r := range got {
		out[r.MessageID] = r
	}
	return out
}

// relayStep and relayLease are the step timeout and the Lease (by default)
// of a test's relay that no timeout is meant to end: a broker under load
// may take seconds to confirm a persistent message, and a confirm that
// outlasts the step leaves the publish unconfirmed and its row to be
// published again, a copy the test counts. The Lease stays above five
// steps, as Options.Lease asks.
const (
	relayStep  = 30 * time.Second
	relayLease = 5 * time.Minute
)

// relay runs a relay on the test's pool and broker, with relayStep and, when
// opts has none, relayLease; see relayOn.
func (e *env) relay(opts pgoutbox.Options) (stop func() *runtime.Report) {
	e.t.Helper()
	if opts.Lease == 0 {
		opts.Lease = relayLease
	}
	_, stop = e.relayOn(e.pool, e.brokerURL, relayStep, opts)
	return stop
}

// relayOn runs a relay on pool with a publisher of its own that reaches the
// broker at url, with the step timeout given. It returns the relay and the
// function that stops it and returns its report (the test's cleanup stops it
// too).
func (e *env) relayOn(pool *pgxpool.Pool, url string, step time.Duration, opts pgoutbox.Options) (relay *pgoutbox.Relay, stop func() *runtime.Report) {
	e.t.Helper()
	return e.relayWith(pool, e.publisher(url, step), opts)
}

// publisher is a publisher that reaches the broker at url, with the step
// timeout given.
func (e *env) publisher(url string, step time.Duration) *runtime.Publisher {
	e.t.Helper()
	p, err := runtime.NewPublisher(runtime.Config{URLs: []string{url}, StepTimeout: step}, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

// relayWith runs a relay on pool that publishes through p, which its stop
// closes; see relayOn.
func (e *env) relayWith(pool *pgxpool.Pool, p *runtime.Publisher, opts pgoutbox.Options) (relay *pgoutbox.Relay, stop func() *runtime.Report) {
	e.t.Helper()
	if opts.Logger == nil {
		opts.Logger = e.logger()
	}
	relay = pgoutbox.NewRelay(pool, p, opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan *runtime.Report, 1)
	go func() {
		rep, err := relay.Run(ctx)
		if err != nil {
			e.t.Errorf("Run: %v", err)
		}
		done <- rep
	}()
	var once sync.Once
	var rep *runtime.Report
	stop = func() *runtime.Report {
		once.Do(func() {
			cancel()
			rep = <-done
			p.Close()
		})
		return rep
	}
	e.t.Cleanup(func() { stop() })
	return relay, stop
}

// logger writes warnings and errors to the test's output.
func (e *env) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(e.t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// eventually polls ok until it holds, for two minutes at most.
func (e *env) eventually(what string, ok func() bool) {
	e.t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); !ok(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			e.t.Fatalf("%s: not within two minutes", what)
		}
	}
}

func counts(rep *runtime.Report) map[runtime.Path]int {
	out := map[runtime.Path]int{}
	for p, n := range rep.Counts {
		if n != 0 {
			out[p] = n
		}
	}
	return out
}

// 1. A rolled-back write publishes nothing; a committed one is published
// once, with its body, properties and typed headers intact, and its row is
// deleted.
func TestCommittedRowIsPublishedIntactRolledBackIsNot(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue("q", nil)
	ts := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	kept := runtime.Publishing{
		Headers: amqp.Table{
			"x-lily-version": int64(1), "string": "text", "bytes": []byte{0, 1, 2, 255}, "bool": true,
			"int8": int8(-8), "int16": int16(-16), "int32": int32(-32), "int64": int64(math.MinInt64),
			"float32": float32(1.5), "float64": math.Pi, "time": ts, "decimal": amqp.Decimal{Scale: 2, Value: -12345},
			"nil":   nil,
			"table": amqp.Table{"inner": "x", "deeper": amqp.Table{"n": int32(1)}},
			"array": []any{"a", int64(2), amqp.Table{"b": false}, []any{"c"}},
		},
		ContentType: "application/json", ContentEncoding: "identity", DeliveryMode: amqp.Persistent, Priority: 3,
		CorrelationId: "corr-1", ReplyTo: "replies", Expiration: "600000", MessageId: "kept", Timestamp: ts,
		Type: "Payment", UserId: "guest", AppId: "lily-test", Body: []byte(`{"amount":1}`),
	}
	tx, err := e.pool.Begin(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := pgoutbox.Write(e.ctx, tx, message(q, "rolled-back")); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.write(runtime.Message{RoutingKey: q, Publishing: kept})

	stop := e.relay(pgoutbox.Options{})
	e.eventually("the committed row published and deleted", func() bool { return e.ready(q) == 1 && len(e.rows()) == 0 })
	rep := stop()
	if want := map[runtime.Path]int{"published": 1}; !cmp.Equal(counts(rep), want) {
		t.Errorf("report counts %v, want %v", rep.Counts, want)
	}
	if !strings.HasPrefix(rep.Queue, "outbox lily_outbox_test_") || !strings.HasSuffix(rep.Queue, ".lily_outbox") {
		t.Errorf("report queue %q", rep.Queue)
	}
	got := e.take(q)
	if len(got) != 1 {
		t.Fatalf("%d messages in the queue, want 1", len(got))
	}
	d := got[0]
	delete(d.Headers, "x-lily-handoff-id") // the publisher's own
	arrived := runtime.Publishing{
		Headers: d.Headers, ContentType: d.ContentType, ContentEncoding: d.ContentEncoding, DeliveryMode: d.DeliveryMode,
		Priority: d.Priority, CorrelationId: d.CorrelationId, ReplyTo: d.ReplyTo, Expiration: d.Expiration,
		MessageId: d.MessageId, Timestamp: d.Timestamp, Type: d.Type, UserId: d.UserId, AppId: d.AppId, Body: d.Body,
	}
	if diff := cmp.Diff(kept, arrived); diff != "" {
		t.Errorf("the message arrived changed (-written +arrived):\n%s", diff)
	}
}

// A message of a profile without ids (id: none) has no message_id, and
// Write takes it, as Publisher.Send does: its generated producer sends
// through any Sender, the outbox's too. No inbox claims it, so its copies
// arrive as copies (docs/outbox.md).
func TestMessageWithoutAnIDIsRelayed(t *testing.T) {
	t.Parallel()
	e := newEnvNamed(t, "rv-pgfix-noid-", "rv-pgfix-noid.")
	q := e.queue("q", nil)
	noted := envelope.Message{Type: "audit.noted", Profile: envelope.Profile{Kind: envelope.Headers, TypeHeader: "event", NoID: true, Version: envelope.Version{Fixed: 1}}}
	m := runtime.Message{RoutingKey: q, Publishing: runtime.NewPublishing(noted, 1, "", []byte(`{}`))}
	if err := pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error { return pgoutbox.Outbox{}.Send(pgoutbox.WithTx(e.ctx, tx), m) }); err != nil {
		t.Fatalf("Send of a message without an id: %v", err)
	}
	stop := e.relay(pgoutbox.Options{Poll: 20 * time.Millisecond})
	e.eventually("the message published and its row deleted", func() bool { return e.ready(q) == 1 && len(e.rows()) == 0 })
	stop()
	if d := e.takeOne(q); d.MessageId != "" || d.Headers["event"] != "audit.noted" {
		t.Errorf("arrived with message_id %q, headers %v; want none, and its type in header event", d.MessageId, d.Headers)
	}
}

// An int header outside the int32 range, which amqp091-go would publish
// truncated to 32 bits, is refused by Write, naming it: nothing is stored.
// A transaction that writes the outbox commits durably even under
// synchronous_commit=off: the relay could otherwise publish a row that a
// server crash then loses with the work it announces. Any other setting,
// which asks as much or more, is kept.
func TestWriteMakesItsCommitDurable(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for set, want := range map[string]string{"off": "local", "local": "local", "on": "on", "remote_apply": "remote_apply"} {
		var got string
		if err := pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(e.ctx, "SELECT set_config('synchronous_commit', $1, true)", set); err != nil {
				return err
			}
			if err := pgoutbox.Write(e.ctx, tx, message("q", "durable-"+set)); err != nil {
				return err
			}
			return tx.QueryRow(e.ctx, "SELECT current_setting('synchronous_commit')").Scan(&got)
		}); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("synchronous_commit %s: %q after Write; want %q", set, got, want)
		}
	}
}

func TestWriteRefusesAnIntOutsideInt32(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := message("q", "big")
	m.Headers = amqp.Table{"n": int(5_000_000_000)}
	err := pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error { return pgoutbox.Write(e.ctx, tx, message("q", "fits"), m) })
	if want := `msgs[1]: headers["n"]: the int 5000000000 is outside the int32 range, and an int is sent as 32 bits: use int64`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Write: %v; want %q", err, want)
	}
	if rows := e.rows(); len(rows) != 0 {
		t.Errorf("rows stored: %v", rows)
	}
}

// A delivery mode the broker refuses (it closes the channel on any but 0, 1
// and 2) is refused by Write: nothing is stored, so no row of it fails at
// every attempt and closes the relay's channel under the publishes beside
// it, and the rows written after it all go once.
func TestWriteRefusesADeliveryModeTheBrokerRefuses(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue("q", nil)
	bad := message(q, "bad")
	bad.DeliveryMode = 3
	err := pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error { return pgoutbox.Write(e.ctx, tx, message(q, "fits"), bad) })
	if want := "msgs[1]: delivery_mode: 3, not 1 (transient), 2 (persistent) or 0 (none)"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Write: %v; want %q", err, want)
	}
	if rows := e.rows(); len(rows) != 0 {
		t.Errorf("rows stored: %v", rows)
	}
	msgs, want := messages(q, "ok-", 200)
	e.write(msgs...)
	stop := e.relay(pgoutbox.Options{Poll: 20 * time.Millisecond})
	e.eventually("every row published", func() bool { return len(e.rows()) == 0 })
	rep := stop()
	if got := counts(rep); !cmp.Equal(got, map[runtime.Path]int{"published": 200}) {
		t.Errorf("report counts %v, want 200 published", got)
	}
	wantIDs := map[string]int{}
	for _, id := range want {
		wantIDs[id] = 1
	}
	if got := ids(e.take(q)); !cmp.Equal(got, wantIDs) {
		t.Errorf("queue holds %v, want each of the 200 once", got)
	}
}

// A relay on a database without the table fails at once: no retry mends it.
func TestRelayWithoutTheTableFails(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p, err := runtime.NewPublisher(runtime.Config{URLs: []string{e.brokerURL}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	relay := pgoutbox.NewRelay(e.poolIn("lily_outbox_test_none_"+name()), p, pgoutbox.Options{})
	if _, err := relay.Run(e.ctx); err == nil || !strings.Contains(err.Error(), "lily_outbox does not exist") {
		t.Errorf("Run = %v, want the missing table", err)
	}
}

// 2. A relay leased rows and died (a fake owner holds them). Another relay
// leaves them alone while the leases last, and publishes them after they
// end. The dead relay had published one of them: that one is in the queue
// twice, which the consumer's inbox drops by its message id.
func TestExpiredLeasesOfADeadRelayAreTakenOver(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue("q", nil)
	var all []runtime.Message
	for i := range 10 {
		all = append(all, message(q, "m"+strconv.Itoa(i)))
	}
	e.write(all...)
	// m0-m4: a lease far from its end; m5-m9: one that ends in a second.
	if _, err := e.pool.Exec(e.ctx, `UPDATE lily_outbox SET lease_owner = 'dead relay',
		lease_until = now() + CASE WHEN properties->>'message_id' < 'm5' THEN interval '1 hour' ELSE interval '1 second' END`); err != nil {
		t.Fatal(err)
	}
	// The dead relay had published m5 before it died, and never deleted its row.
	if err := publishDirect(e, message(q, "m5")); err != nil {
		t.Fatal(err)
	}

	stop := e.relay(pgoutbox.Options{Poll: 50 * time.Millisecond})
	e.eventually("m5-m9 published after their leases", func() bool { return len(e.rows()) == 5 })
	for id, r := range e.rows() {
		if id >= "m5" || r.Leaser != "dead relay" || r.Attempts != 0 {
			t.Errorf("row %s: %+v; want only m0-m4, still the dead relay's", id, r)
		}
	}
	if n := e.ready(q); n != 6 {
		t.Errorf("%d messages in the queue; want m5 twice and m6-m9", n)
	}

	// The long leases end now.
	if _, err := e.pool.Exec(e.ctx, "UPDATE lily_outbox SET lease_until = now() - interval '1 second'"); err != nil {
		t.Fatal(err)
	}
	e.eventually("every row published", func() bool { return len(e.rows()) == 0 })
	rep := stop()
	if want := map[runtime.Path]int{"published": 10}; !cmp.Equal(counts(rep), want) {
		t.Errorf("report counts %v, want %v", rep.Counts, want)
	}
	want := map[string]int{}
	for i := range 10 {
		want["m"+strconv.Itoa(i)] = 1
	}
	want["m5"] = 2
	if got := ids(e.take(q)); !cmp.Equal(got, want) {
		t.Errorf("message ids in the queue %v, want %v", got, want)
	}
}

// publishDirect publishes m and waits for its confirm, as a relay would.
func publishDirect(e *env, m runtime.Message) error {
	ch := e.channel()
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		return err
	}
	dc, err := ch.PublishWithDeferredConfirm(m.Exchange, m.RoutingKey, true, false, m.Publishing)
	if err != nil {
		return err
	}
	if !dc.Wait() {
		return errors.New("nacked")
	}
	return nil
}

// 3. Three relays on one table of 2,000 rows: every message arrives, none
// twice, and the reports count each publish once.
func TestThreeRelaysPublishEveryRowOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue("q", nil)
	const n = 2000
	for tx := range n / 100 {
		var msgs []runtime.Message
		for i := range 100 {
			msgs = append(msgs, message(q, strconv.Itoa(tx*100+i)))
		}
		e.write(msgs...)
	}
	var stops []func() *runtime.Report
	for range 3 {
		stops = append(stops, e.relay(pgoutbox.Options{Batch: 50}))
	}
	e.eventually("every row published", func() bool { return len(e.rows()) == 0 && e.ready(q) >= n })
	published := 0
	for i, stop := range stops {
		rep := stop()
		c := counts(rep)
		published += c["published"]
		delete(c, "published")
		if len(c) != 0 {
			t.Errorf("relay %d: counts %v", i, rep.Counts)
		}
	}
	if published != n {
		t.Errorf("the relays published %d, want %d", published, n)
	}
	got := ids(e.take(q))
	for i := range n {
		if id := strconv.Itoa(i); got[id] != 1 {
			t.Errorf("message %s is %d times in the queue", id, got[id])
		}
	}
	if len(got) != n {
		t.Errorf("%d message ids in the queue, want %d", len(got), n)
	}
}

// 4. The rows of four keys (one of them long), written interleaved in
// several transactions with unordered rows between them, are published by
// two relays: each key's messages arrive in write order.
func TestOneKeysMessagesArriveInWriteOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue("q", nil)
	keys := []string{"a", "b", "c", "d"}
	const perKey = 40
	for tx := range perKey / 5 {
		var msgs []runtime.Message
		for i := range 5 {
			seq := tx*5 + i
			for _, k := range keys {
				m := message(q, k+"-"+strconv.Itoa(seq))
				m.OrderKey = k
				if k == "d" {
					m.OrderKey = strings.Repeat("d", 2000) // stored as its SHA-256
				}
				msgs = append(msgs, m)
			}
			msgs = append(msgs, message(q, "free-"+strconv.Itoa(seq)))
		}
		e.write(msgs...)
	}
	for range 2 {
		e.relay(pgoutbox.Options{Batch: 8, Poll: 20 * time.Millisecond})
	}
	total := perKey * (len(keys) + 1)
	e.eventually("every row published", func() bool { return len(e.rows()) == 0 && e.ready(q) >= total })
	got := e.take(q)
	if len(got) != total {
		t.Errorf("%d messages in the queue, want %d", len(got), total)
	}
	seen := map[string][]int{}
	for _, d := range got {
		k, seq, _ := strings.Cut(d.MessageId, "-")
		n, _ := strconv.Atoi(seq)
		seen[k] = append(seen[k], n)
	}
	for _, k := range keys {
		if !slices.Equal(seen[k], sequence(perKey)) {
			t.Errorf("key %s arrived in the order %v", k, seen[k])
		}
	}
}

func sequence(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

// 5a. A row that no queue takes (returned) stays, with its attempts and why,
// and is tried again; the rows of its key wait behind it; other rows go.
// Once the queue exists, the retries go, in order.
func TestReturnedRowStaysAndBlocksOnlyItsKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue("q", nil)
	nowhere := e.prefix + ".nowhere" // declared later
	keyed := func(m runtime.Message, k string) runtime.Message { m.OrderKey = k; return m }
	e.write(
		message(nowhere, "lost-1"),
		message(q, "free-1"),
		keyed(message(nowhere, "k-1"), "k"),
		keyed(message(q, "k-2"), "k"),
		keyed(message(q, "other-1"), "other"),
	)
	stop := e.relay(pgoutbox.Options{Poll: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond})
	e.eventually("the returned rows tried twice, the others published", func() bool {
		r := e.rows()
		return len(r) == 3 && r["lost-1"].Attempts >= 2 && r["k-1"].Attempts >= 2
	})
	rows := e.rows()
	for _, id := range []string{"lost-1", "k-1"} {
		if !strings.Contains(rows[id].LastError, "returned") {
			t.Errorf("row %s: last_error %q", id, rows[id].LastError)
		}
	}
	if r := rows["k-2"]; r.Attempts != 0 || r.LastError != "" {
		t.Errorf("k-2 was tried before k-1 went: %+v", r)
	}
	if got := ids(e.take(q)); !cmp.Equal(got, map[string]int{"free-1": 1, "other-1": 1}) {
		t.Errorf("queue %s holds %v", q, got)
	}

	e.queue("nowhere", nil)
	e.eventually("the retries published", func() bool { return len(e.rows()) == 0 && e.ready(q) == 1 })
	rep := stop()
	if c := counts(rep); c["published"] != 5 || c["returned"] < 4 || len(c) != 2 {
		t.Errorf("report counts %v", rep.Counts)
	}
	var order []string
	for _, d := range e.take(nowhere) {
		order = append(order, d.MessageId)
	}
	if !slices.Equal(order, []string{"lost-1", "k-1"}) && !slices.Equal(order, []string{"k-1", "lost-1"}) {
		t.Errorf("queue %s holds %v", nowhere, order)
	}
	if got := ids(e.take(q)); !cmp.Equal(got, map[string]int{"k-2": 1}) {
		t.Errorf("queue %s holds %v", q, got)
	}
}

// Rows that keep failing have the older ids and are always due again: a
// row written after them is still published at the next look, while they
// go on failing.
func TestFailingRowsLeaveRoomForNewOnes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue("q", nil)
	nowhere := e.prefix + ".nowhere" // never declared: every publish returns
	var failing []runtime.Message
	for i := range 300 {
		failing = append(failing, message(nowhere, fmt.Sprint("lost-", i)))
	}
	e.write(failing...)
	stop := e.relay(pgoutbox.Options{Poll: 20 * time.Millisecond, Batch: 10, MaxBackoff: time.Millisecond})
	e.eventually("every failing row tried", func() bool {
		for _, r := range e.rows() {
			if r.Attempts == 0 {
				return false
			}
		}
		return true
	})
	e.write(message(q, "fresh"))
	e.eventually("the fresh row published and deleted", func() bool {
		_, left := e.rows()["fresh"]
		return e.ready(q) == 1 && !left
	})
	rows := e.rows()
	stop()
	if _, ok := rows["fresh"]; ok || len(rows) != 300 {
		t.Errorf("the table holds %d rows, fresh among them %v; want the 300 failing ones", len(rows), ok)
	}
	if got := ids(e.take(q)); !cmp.Equal(got, map[string]int{"fresh": 1}) {
		t.Errorf("queue %s holds %v", q, got)
	}
}

// A relay holds no more bodies in flight than MaxBytes, and the one row
// that reaches it: with the confirms held back, three rows of 400 KiB are
// leased against 1 MiB and the other seven wait, untouched; once the
// confirms come, every row goes.
func TestRelayHoldsNoMoreBodiesThanMaxBytes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue("q", nil)
	proxy, url := e.proxy()
	// A step of a minute: the look below must end before a held confirm's
	// step, which would release its row's lease and lease others.
	_, stop := e.relayOn(e.pool, url, time.Minute, pgoutbox.Options{Poll: 20 * time.Millisecond, Batch: 10, MaxBytes: 1 << 20, Lease: 10 * time.Minute})
	e.write(message(q, "first")) // the relay's connection opens for it
	e.eventually("the first row published", func() bool { return len(e.rows()) == 0 })
	proxy.Stall(faults.ToClient)
	var big []runtime.Message
	for i := range 10 {
		m := message(q, fmt.Sprint("big-", i))
		m.Body = bytes.Repeat([]byte{'x'}, 400<<10)
		big = append(big, m)
	}
	e.write(big...)
	leased := func() (n int) {
		for _, r := range e.rows() {
			if r.Leaser != "" {
				n++
			}
		}
		return n
	}
	e.eventually("three rows leased", func() bool { return leased() == 3 })
	for range 50 { // the relay looks every 20 ms meanwhile
		time.Sleep(20 * time.Millisecond)
		if n := leased(); n != 3 {
			t.Fatalf("%d rows leased with 1.2 MiB of bodies in flight; want 3", n)
		}
	}
	proxy.Resume()
	e.eventually("every row published", func() bool { return len(e.rows()) == 0 })
	if c := counts(stop()); c["published"] != 11 || len(c) != 1 {
		t.Errorf("report counts %v", c)
	}
	if got := e.take(q); len(got) != 11 {
		t.Errorf("queue %s holds %d messages; want 11", q, len(got))
	}
}

// A look that MaxBytes cut short looks again as soon as answers make room,
// not a Poll later: more rows are due. With a Poll of ten minutes, six rows
// of which each look may lease two all go.
func TestALookCutShortByMaxBytesLooksAgainAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue("q", nil)
	var msgs []runtime.Message
	for i := range 6 {
		m := message(q, fmt.Sprint("row-", i))
		m.Body = bytes.Repeat([]byte{'x'}, 600)
		msgs = append(msgs, m)
	}
	e.write(msgs...)
	stop := e.relay(pgoutbox.Options{Poll: 10 * time.Minute, MaxBytes: 1000})
	e.eventually("every row published", func() bool { return len(e.rows()) == 0 })
	if c := counts(stop()); c["published"] != 6 || len(c) != 1 {
		t.Errorf("report counts %v", c)
	}
	if got := ids(e.take(q)); len(got) != 6 {
		t.Errorf("queue %s holds %v; want the six rows once each", q, got)
	}
}

// 5c. A row to an exchange that does not exist fails alone, not written:
// the rows sent beside it are published once each, none a possible copy.
// Once the exchange exists, the row goes.
func TestRowToAMissingExchangeFailsAlone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q, later := e.queue("q", nil), e.queue("later", nil)
	exchange := e.prefix + ".x" // declared later
	msgs := []runtime.Message{{Exchange: exchange, RoutingKey: "k", Publishing: message(later, "lost").Publishing}}
	want := map[string]int{}
	for i := range 40 {
		id := "free-" + strconv.Itoa(i)
		msgs = append(msgs, message(q, id))
		want[id] = 1
	}
	e.write(msgs...)
	stop := e.relay(pgoutbox.Options{Poll: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond})
	e.eventually("the row to the missing exchange tried twice, the others published", func() bool {
		r := e.rows()
		return len(r) == 1 && r["lost"].Attempts >= 2
	})
	if r := e.rows()["lost"]; !strings.Contains(r.LastError, "no exchange "+exchange) {
		t.Errorf("last_error %q", r.LastError)
	}
	if got := ids(e.take(q)); !cmp.Equal(got, want) {
		t.Errorf("queue %s holds %v", q, got)
	}

	ch := e.channel()
	defer ch.Close()
	if err := ch.ExchangeDeclare(exchange, "fanout", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(later, "", exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	e.eventually("the row published once the exchange exists", func() bool { return len(e.rows()) == 0 && e.ready(later) == 1 })
	rep := stop()
	// A retry that comes between the exchange's declare and its binding is
	// returned (the exchange routes to no queue yet), and retried again.
	c := counts(rep)
	returned := c["returned"]
	delete(c, "returned")
	if c["published"] != 41 || c["failed"] < 2 || len(c) != 2 {
		t.Errorf("report counts %v (%d returned)", c, returned)
	}
	if len(rep.PossibleCopies) != 0 {
		t.Errorf("possible copies %+v", rep.PossibleCopies)
	}
	if got := ids(e.take(later)); !cmp.Equal(got, map[string]int{"lost": 1}) {
		t.Errorf("queue %s holds %v", later, got)
	}
}

// 5b. A queue that is full refuses (nacks) the publish: the row stays and is
// tried again; once the queue has room, it goes.
func TestNackedRowIsRetriedUntilTheQueueHasRoom(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	full := e.queue("full", amqp.Table{"x-max-length": int32(1), "x-overflow": "reject-publish"})
	if err := publishDirect(e, message(full, "filler")); err != nil {
		t.Fatal(err)
	}
	e.write(message(full, "waits"))
	stop := e.relay(pgoutbox.Options{Poll: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond})
	e.eventually("the row nacked twice", func() bool { return e.rows()["waits"].Attempts >= 2 })
	if r := e.rows()["waits"]; !strings.Contains(r.LastError, "nacked") {
		t.Errorf("last_error %q", r.LastError)
	}
	// Make room: the retry may fill it at once.
	if d := e.takeOne(full); d.MessageId != "filler" {
		t.Errorf("queue %s held %q", full, d.MessageId)
	}
	e.eventually("the row published once the queue has room", func() bool { return len(e.rows()) == 0 })
	rep := stop()
	if c := counts(rep); c["published"] != 1 || c["nacked"] < 2 || len(c) != 2 {
		t.Errorf("report counts %v", rep.Counts)
	}
	if got := ids(e.take(full)); !cmp.Equal(got, map[string]int{"waits": 1}) {
		t.Errorf("queue %s holds %v", full, got)
	}
}

// 5c. A nack through the default exchange does not say the message is in no
// queue: the queue named by its CC header took it beside the full queue
// that refused it. Each nack is a possible copy in the report, and the CC
// queue holds one copy for each.
func TestNackedRowIsAPossibleCopyWhereACCQueueTookIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	full := e.queue("full", amqp.Table{"x-max-length": int32(1), "x-overflow": "reject-publish"})
	cc := e.queue("cc", nil)
	if err := publishDirect(e, message(full, "filler")); err != nil {
		t.Fatal(err)
	}
	m := message(full, "refused")
	m.Headers = amqp.Table{"CC": []any{cc}}
	e.write(m)
	stop := e.relay(pgoutbox.Options{Poll: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond})
	e.eventually("the row nacked twice", func() bool { return e.rows()["refused"].Attempts >= 2 })
	rep := stop()
	nacked := counts(rep)["nacked"]
	if c := counts(rep); nacked < 2 || len(c) != 1 {
		t.Errorf("report counts %v", rep.Counts)
	}
	if len(rep.PossibleCopies) != nacked {
		t.Errorf("%d nacks, possible copies %+v", nacked, rep.PossibleCopies)
	}
	for _, r := range rep.PossibleCopies {
		if r.MessageID != "refused" || r.Destination != full {
			t.Errorf("possible copy %+v", r)
		}
	}
	if got := ids(e.take(cc)); !cmp.Equal(got, map[string]int{"refused": nacked}) {
		t.Errorf("queue %s holds %v after %d nacks", cc, got, nacked)
	}
}

// A row may hold any UTF-8 without NUL in its message id, exchange and
// routing key: what the relay logs of it (each attribute, through a handler
// that writes them as they are) and what its report lists are sanitized,
// without a control, format (U+202E, U+200B) or separator (U+2028) rune,
// and bounded. One row is returned (its key routes nowhere), one nacked
// (its queue refuses it), so a possible copy.
func TestRelayLogsAndReportsHostileTextSanitized(t *testing.T) {
	t.Parallel()
	e := newEnvNamed(t, "fx-sanitize-", "fx-sanitize-")
	const hostile = "\nERROR forged=1 \x1b[31m\u009b2J\u202eevil\u200b\u2028\ufeff\U000e0041"
	// The broker drops whitespace from a queue's name: this one keeps the rest.
	full := e.queue("full\x1b[31m\u009b2J\u202eevil\u200b\u2028\ufeff\U000e0041", amqp.Table{"x-max-length": int32(1), "x-overflow": "reject-publish"})
	if err := publishDirect(e, message(full, "filler")); err != nil {
		t.Fatal(err)
	}
	nacked := message(full, "nacked") // NewPublishing takes printable ids alone
	nacked.MessageId = "nacked" + hostile
	returned := message(e.prefix+".missing"+hostile, "returned")
	returned.Exchange = "amq.direct"
	returned.MessageId = "returned" + hostile
	e.write(nacked, returned)

	logs := &attrRecorder{}
	stop := e.relay(pgoutbox.Options{Poll: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, Logger: slog.New(logs)})
	e.eventually("both rows failed once", func() bool {
		rows := e.rows()
		return len(rows) == 2 && rows["nacked"+hostile].Attempts >= 1 && rows[returned.MessageId].Attempts >= 1
	})
	rep := stop()
	if got := e.ready(full); got != 1 {
		t.Errorf("%d messages ready in the full queue, want the filler alone", got)
	}

	lines := logs.lines()
	var failures int
	for _, l := range lines {
		for _, a := range l {
			if bad := unsafeRunes(a.Value); bad != "" || len(a.Value) > 1024 {
				t.Errorf("a log attribute %s holds %s (%d bytes): %.200q", a.Key, bad, len(a.Value), a.Value)
			}
			if a.Key == "detail" && (strings.Contains(a.Value, "returned") || strings.Contains(a.Value, "nacked")) {
				failures++
			}
		}
	}
	if failures < 2 {
		t.Errorf("%d failures logged, want the return and the nack: %q", failures, lines)
	}
	if len(rep.PossibleCopies) == 0 {
		t.Fatalf("no possible copy in the report: %s", rep)
	}
	for _, r := range rep.PossibleCopies {
		for _, f := range []string{r.Queue, r.MessageID, r.Destination, r.Reason} {
			if bad := unsafeRunes(f); bad != "" || len(f) > 1024 {
				t.Errorf("a possible copy holds %s in %.200q", bad, f)
			}
		}
	}
	// The report's own lines are "\n  "-separated.
	if bad := unsafeRunes(strings.ReplaceAll(rep.String(), "\n  ", "")); bad != "" {
		t.Errorf("the report's text holds %s: %q", bad, rep.String())
	}
}

// A schema may be named with any UTF-8 but NUL: the relay's queue, "outbox"
// and the table's schema-qualified name, is sanitized where the relay finds
// the table, so that no log line, report or possible copy holds the
// schema's escape or bidi override as it is.
func TestRelayNamesAHostileSchemaSanitized(t *testing.T) {
	t.Parallel()
	e := newEnvNamed(t, "rv-pgfix-\x1b[31m\u202eevil\u200b-", "rv-pgfix-schema.")
	full := e.queue("full", amqp.Table{"x-max-length": int32(1), "x-overflow": "reject-publish"})
	if err := publishDirect(e, message(full, "filler")); err != nil {
		t.Fatal(err)
	}
	q := e.queue("q", nil)
	e.write(message(q, "published"), message(full, "nacked"))

	logs := &attrRecorder{}
	stop := e.relay(pgoutbox.Options{Poll: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, Logger: slog.New(logs)})
	e.eventually("one row published, the other nacked", func() bool {
		rows := e.rows()
		return len(rows) == 1 && rows["nacked"].Attempts >= 1
	})
	rep := stop()

	if !strings.HasPrefix(rep.Queue, "outbox ") || !strings.Contains(rep.Queue, "rv-pgfix-") || !strings.HasSuffix(rep.Queue, ".lily_outbox") {
		t.Errorf("report queue %q; want outbox and the table's schema-qualified name", rep.Queue)
	}
	var queues int
	for _, l := range logs.lines() {
		for _, a := range l {
			if a.Key != "queue" {
				continue
			}
			queues++
			if bad := unsafeRunes(a.Value); bad != "" || a.Value != rep.Queue {
				t.Errorf("a logged queue holds %s: %q; want the report's %q", bad, a.Value, rep.Queue)
			}
		}
	}
	if queues < 4 {
		t.Errorf("%d log lines name the queue; want the start, the publish, the nack and the stop at least", queues)
	}
	if len(rep.PossibleCopies) == 0 {
		t.Fatalf("no possible copy in the report: %s", rep)
	}
	for _, r := range rep.PossibleCopies {
		if r.Queue != rep.Queue {
			t.Errorf("a possible copy's queue %q; want the report's %q", r.Queue, rep.Queue)
		}
	}
	// The report's own lines are "\n  "-separated.
	if bad := unsafeRunes(strings.ReplaceAll(rep.String(), "\n  ", "")); bad != "" {
		t.Errorf("the report's text holds %s: %q", bad, rep.String())
	}
}

// unsafeRunes names the first rune of s that a log or a terminal does not
// show as itself, or "" when there is none.
func unsafeRunes(s string) string {
	for i, r := range s {
		switch {
		case r == utf8.RuneError:
			return fmt.Sprintf("invalid UTF-8 at byte %d", i)
		case unicode.IsControl(r), unicode.Is(unicode.Cf, r), unicode.Is(unicode.Zl, r), unicode.Is(unicode.Zp, r):
			return fmt.Sprintf("%U at byte %d", r, i)
		}
	}
	return ""
}

// attrRecorder is a slog.Handler that keeps each record's message and
// attributes as the text a pass-through handler would write, unescaped.
type attrRecorder struct {
	mu   sync.Mutex
	recs [][]slog.Attr
}

func (h *attrRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (h *attrRecorder) Handle(_ context.Context, r slog.Record) error {
	attrs := []slog.Attr{slog.String("msg", r.Message)}
	r.Attrs(func(a slog.Attr) bool { attrs = append(attrs, a); return true })
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, attrs)
	return nil
}

func (h *attrRecorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *attrRecorder) WithGroup(string) slog.Handler      { return h }

// lines is each record's attributes as key and text.
func (h *attrRecorder) lines() [][]struct{ Key, Value string } {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out [][]struct{ Key, Value string }
	for _, rec := range h.recs {
		var l []struct{ Key, Value string }
		for _, a := range rec {
			l = append(l, struct{ Key, Value string }{a.Key, a.Value.Resolve().String()})
		}
		out = append(out, l)
	}
	return out
}

// Force: a stopping relay waits for a send whose confirm has not come, until
// Force gives it up. The report counts it unconfirmed and lists it as a
// possible copy; its row stays, to be tried again; the message is in its
// queue, so the retry puts it there twice, a copy the consumer's inbox drops.
func TestForceGivesUpSendsInFlight(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue("q", nil)
	proxy, url := e.proxy()
	var dropped atomic.Int32
	proxy.Intercept(func(f faults.Frame) faults.Action {
		if f.Dir == faults.ToClient && f.Is(faults.BasicAck) { // a publisher confirm
			dropped.Add(1)
			return faults.Drop
		}
		return faults.Forward
	})
	e.write(message(q, "m1"))
	relay, stop := e.relayOn(e.pool, url, time.Minute, pgoutbox.Options{MaxBackoff: 100 * time.Millisecond})
	e.eventually("the publish written and its confirm dropped", func() bool { return dropped.Load() == 1 && e.ready(q) == 1 })

	reported := make(chan *runtime.Report, 1)
	go func() { reported <- stop() }()
	select {
	case <-reported:
		t.Fatal("the relay stopped without waiting for its send")
	case <-time.After(300 * time.Millisecond):
	}
	relay.Force()
	rep := <-reported
	if want := map[runtime.Path]int{"unconfirmed": 1}; !cmp.Equal(counts(rep), want) {
		t.Errorf("report counts %v, want %v", rep.Counts, want)
	}
	if len(rep.PossibleCopies) != 1 || rep.PossibleCopies[0].MessageID != "m1" {
		t.Errorf("possible copies %+v", rep.PossibleCopies)
	}
	if r := e.rows()["m1"]; r.Attempts != 1 || r.Leaser != "" || !strings.Contains(r.LastError, "unconfirmed") {
		t.Errorf("row m1 after Force: %+v", r)
	}

	proxy.Intercept(nil)
	e.relay(pgoutbox.Options{})
	e.eventually("m1 published again", func() bool { return len(e.rows()) == 0 })
	if got := ids(e.take(q)); !cmp.Equal(got, map[string]int{"m1": 2}) {
		t.Errorf("queue holds %v, want m1 twice", got)
	}
}

// The database connections of a relay are killed again and again while it
// works: it logs, pauses, and goes on, and every message arrives.
func TestRelayGoesOnWhenItsDatabaseConnectionsAreKilled(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue("q", nil)
	app := "lily outbox test " + name()
	cfg := e.pool.Config()
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	pool, err := pgxpool.NewWithConfig(e.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	// A row whose lease committed as its connection was killed, unread,
	// waits for the lease's end: a minute, above five steps, which the
	// polls outwait. A confirm the step cut short would be a copy the
	// report does not count published.
	_, stop := e.relayOn(pool, e.brokerURL, 10*time.Second, pgoutbox.Options{Poll: 10 * time.Millisecond, Lease: time.Minute, Batch: 10})
	const batches, perBatch = 20, 20
	killed := 0
	for b := range batches {
		var msgs []runtime.Message
		for i := range perBatch {
			msgs = append(msgs, message(q, strconv.Itoa(b*perBatch+i)))
		}
		e.write(msgs...)
		var n int
		if err := e.pool.QueryRow(e.ctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))
			FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&n); err != nil {
			t.Fatal(err)
		}
		killed += n
		time.Sleep(20 * time.Millisecond)
	}
	if killed == 0 {
		t.Fatal("no connection of the relay was killed")
	}
	e.eventually("every row published", func() bool { return len(e.rows()) == 0 && e.ready(q) >= batches*perBatch })
	rep := stop()
	got := ids(e.take(q))
	copies := 0
	for i := range batches * perBatch {
		switch n := got[strconv.Itoa(i)]; {
		case n == 0:
			t.Errorf("message %d is not in the queue", i)
		case n > 1:
			copies += n - 1
		}
	}
	t.Logf("%d connections killed; %d copies; report: %s", killed, copies, rep)
	if rep.Counts["published"] != batches*perBatch+copies {
		t.Errorf("report counts %v; %d copies", rep.Counts, copies)
	}
}

// A relay stopping while the broker blocks its publisher (a resource alarm)
// gives up the sends that wait to be written after its short wait, not at
// their deadline: nothing of theirs is in a queue, so nothing of theirs can
// be a copy. Their rows stay, released for the next relay, their attempts
// untouched; the report counts none of them.
func TestStopGivesUpSendsNotWrittenAfterAWait(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue("q", nil)
	proxy, url := e.proxy()
	e.write(message(q, "before"))
	_, stop := e.relayOn(e.pool, url, 2*time.Second, pgoutbox.Options{})
	e.eventually("the first message published", func() bool { return len(e.rows()) == 0 })
	e.blockWithThreeLeased(proxy, q)

	reported := make(chan *runtime.Report, 1)
	go func() { reported <- stop() }()
	var rep *runtime.Report
	select {
	case rep = <-reported:
	case <-time.After(15 * time.Second):
		// Past the stop's wait and its record, well before the sends'
		// deadline, 24s away.
		t.Fatal("the relay did not give up its sends waiting to be written")
	}
	e.threeReleasedUntried(rep)
	var leased int
	if err := e.pool.QueryRow(e.ctx, "SELECT count(*) FROM lily_outbox WHERE lease_until > now()").Scan(&leased); err != nil {
		t.Fatal(err)
	}
	if leased != 0 {
		t.Errorf("%d rows still leased: the next relay would wait for their lease", leased)
	}
	if got := ids(e.take(q)); !cmp.Equal(got, map[string]int{"before": 1}) {
		t.Errorf("queue holds %v, want the first message alone", got)
	}
}

// blockWithThreeLeased has the broker block the publisher behind proxy (a
// resource alarm), then writes m1 to m3 for queue q and waits until a relay
// has leased all three: their sends wait to be written.
func (e *env) blockWithThreeLeased(proxy *faults.Proxy, q string) {
	e.t.Helper()
	if proxy.Block(func(string) bool { return true }, "low on memory") != 1 {
		e.t.Fatal("no connection to block")
	}
	e.write(message(q, "m1"), message(q, "m2"), message(q, "m3"))
	e.eventually("the rows leased", func() bool {
		rows := e.rows()
		for _, r := range rows {
			if r.Leaser == "" {
				return false
			}
		}
		return len(rows) == 3
	})
}

// threeReleasedUntried checks what a stop left of blockWithThreeLeased's
// sends, none of them written: the report counts only the message before
// them, and their rows are released, their attempts untouched.
func (e *env) threeReleasedUntried(rep *runtime.Report) {
	e.t.Helper()
	if want := map[runtime.Path]int{"published": 1}; !cmp.Equal(counts(rep), want) {
		e.t.Errorf("report counts %v, want %v", rep.Counts, want)
	}
	rows := e.rows()
	for _, id := range []string{"m1", "m2", "m3"} {
		if r, ok := rows[id]; !ok || r.Leaser != "" || r.Attempts != 0 {
			e.t.Errorf("row %s after the stop: %+v (there: %v), want it unleased, not attempted", id, r, ok)
		}
	}
}

// A send not yet written when its relay's stop begins writes nothing, even
// when it could during the stop's wait: the broker blocks publishes at the
// stop and unblocks them just after it. Before, the sends went on and wrote
// during the wait, and a write the broker then did not read would have held
// the stop a step past it. Their rows stay, released, their attempts
// untouched, and nothing of theirs is in the queue.
func TestSendsNotWrittenWhenTheStopBeginsWriteNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue("q", nil)
	proxy, url := e.proxy()
	e.write(message(q, "before"))
	p, err := runtime.NewPublisher(runtime.Config{URLs: []string{url}, StepTimeout: 2 * time.Second}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	relay := pgoutbox.NewRelay(e.pool, p, pgoutbox.Options{Logger: e.logger()})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reported := make(chan *runtime.Report, 1)
	go func() {
		rep, err := relay.Run(ctx)
		if err != nil {
			t.Errorf("Run: %v", err)
		}
		reported <- rep
	}()
	e.eventually("the first message published", func() bool { return len(e.rows()) == 0 })
	e.blockWithThreeLeased(proxy, q)
	if n := e.ready(q); n != 1 {
		t.Fatalf("%d messages in the queue before the stop, want the first alone", n)
	}

	cancel()
	if proxy.Unblock(func(string) bool { return true }) != 1 {
		t.Fatal("no connection to unblock")
	}
	var rep *runtime.Report
	select {
	case rep = <-reported:
	case <-time.After(time.Minute):
		t.Fatal("the relay did not stop")
	}
	e.threeReleasedUntried(rep)
	if got := ids(e.take(q)); !cmp.Equal(got, map[string]int{"before": 1}) {
		t.Errorf("queue holds %v, want the first message alone", got)
	}
}

// heldSendEnds is a telemetry hook whose send ends wait until release is
// closed: spans exported synchronously to a collector that is away.
type heldSendEnds struct{ release chan struct{} }

func (heldSendEnds) Received(ctx context.Context, _ string, _ runtime.RawDelivery) context.Context {
	return ctx
}
func (h heldSendEnds) Publish(context.Context, string, string, *runtime.Publishing) func(string, time.Time) {
	return func(string, time.Time) { <-h.release }
}
func (heldSendEnds) Settle(context.Context, string) func(string, time.Time) { return nil }
func (heldSendEnds) Settled(context.Context, runtime.Record)                {}
func (heldSendEnds) Lost(string, string)                                    {}

// Two relays whose publishers' telemetry ends hang: the confirmed row is
// deleted at once, so its lease never ends for the other relay to publish
// it again, and each relay stops while the ends still hang. (Before, the
// send waited for its end: the row was published again at each lease's end,
// counted published each time, and the stop waited for the end.)
func TestSlowTelemetryEndHoldsNeitherTheRowNorTheStop(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue("q", nil)
	hook := heldSendEnds{release: make(chan struct{})}
	// Released at the latest long after the relays should have stopped (10
	// times what they need), so that without the fix the copies show.
	hold := time.AfterFunc(15*time.Second, func() { close(hook.release) })
	t.Cleanup(func() {
		if hold.Stop() {
			close(hook.release)
		}
	})
	e.write(message(q, "m1"))
	var stops []func() *runtime.Report
	for range 2 {
		p, err := runtime.NewPublisher(runtime.Config{URLs: []string{e.brokerURL}, StepTimeout: time.Second, Telemetry: hook,
			Logger: slog.New(slog.DiscardHandler)}, 0)
		if err != nil {
			t.Fatal(err)
		}
		relay := pgoutbox.NewRelay(e.pool, p, pgoutbox.Options{Lease: 6 * time.Second, Poll: 50 * time.Millisecond, Logger: e.logger()})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan *runtime.Report, 1)
		go func() {
			rep, err := relay.Run(ctx)
			if err != nil {
				t.Errorf("Run: %v", err)
			}
			done <- rep
			p.Close()
		}()
		var once sync.Once
		var rep *runtime.Report
		stop := func() *runtime.Report {
			once.Do(func() { cancel(); rep = <-done })
			return rep
		}
		stops = append(stops, stop)
		t.Cleanup(func() { stop() })
	}
	e.eventually("the row published and deleted", func() bool { return len(e.rows()) == 0 })
	if n := e.ready(q); n != 1 {
		t.Errorf("%d messages in the queue, want m1 once", n)
	}

	published := 0
	for i, stop := range stops {
		reported := make(chan *runtime.Report, 1)
		go func() { reported <- stop() }()
		var rep *runtime.Report
		select {
		case rep = <-reported:
		case <-hook.release:
			t.Fatalf("relay %d did not stop before the telemetry ends returned", i)
		}
		c := counts(rep)
		published += c["published"]
		delete(c, "published")
		if len(c) != 0 || len(rep.PossibleCopies) != 0 {
			t.Errorf("relay %d: counts %v, possible copies %+v", i, rep.Counts, rep.PossibleCopies)
		}
	}
	if published != 1 {
		t.Errorf("the relays published %d, want 1", published)
	}
	if got := ids(e.take(q)); !cmp.Equal(got, map[string]int{"m1": 1}) {
		t.Errorf("queue holds %v, want m1 once", got)
	}
}
