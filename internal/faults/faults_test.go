package faults

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/internal/queue"
	"github.com/lily-mq/lily/internal/services"
	_ "github.com/lily-mq/lily/internal/update"
	"github.com/lily-mq/lily/runtime"
)

// These tests need RabbitMQ (and rabbitmqctl) and PostgreSQL; a missing one
// fails them.

func brokerURL(t testing.TB) string {
	t.Helper()
	return services.RabbitMQ(t)
}

// testQueue declares a queue of its own for the test, deleted at its end.
func testQueue(t *testing.T) string {
	t.Helper()
	var b [3]byte
	_, _ = rand.Read(b[:])
	name := "lilyfaults." + t.Name() + "." + hex.EncodeToString(b[:])
	ch := channel(t, dial(t, brokerURL(t), nil))
	if _, err := ch.QueueDeclare(name, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn, err := amqp.Dial(brokerURL(t))
		if err != nil {
			return
		}
		defer conn.Close()
		if ch, err := conn.Channel(); err == nil {
			_, _ = ch.QueueDelete(name, false, false, false)
		}
	})
	return name
}

func dial(t *testing.T, url string, props amqp.Table) *amqp.Connection {
	t.Helper()
	conn, err := amqp.DialConfig(url, amqp.Config{Properties: props})
	if err != nil {
		t.Fatalf("RabbitMQ is not reachable at %s: %v", url, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func channel(t *testing.T, conn *amqp.Connection) *amqp.Channel {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

func publish(t *testing.T, ch *amqp.Channel, queue, id string) *amqp.DeferredConfirmation {
	t.Helper()
	dc, err := ch.PublishWithDeferredConfirm("", queue, true, false, amqp.Publishing{MessageId: id, DeliveryMode: amqp.Persistent})
	if err != nil {
		t.Fatal(err)
	}
	return dc
}

func confirmed(t *testing.T, url, queue string, ids ...string) {
	t.Helper()
	ch := channel(t, dial(t, url, nil))
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if !publish(t, ch, queue, id).Wait() {
			t.Fatalf("publish of %s nacked", id)
		}
	}
}

func ready(t *testing.T, queue string) int {
	t.Helper()
	q, err := channel(t, dial(t, brokerURL(t), nil)).QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return q.Messages
}

func proxy(t *testing.T) (*Proxy, string) {
	t.Helper()
	p, url, err := ListenFor(brokerURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p, url
}

// The client's ACK is cut at the moment it passes: the client wrote it, the
// broker never saw it, and the message is back in the queue.
func TestProxyCutsBeforeTheAck(t *testing.T) {
	t.Parallel()
	q := testQueue(t)
	confirmed(t, brokerURL(t), q, "m1")
	p, url := proxy(t)
	name := ConnectionName(q, "consume")
	seen := make(chan Frame, 1)
	p.Intercept(func(f Frame) Action {
		if f.Dir == ToBroker && f.Is(BasicAck) && f.Conn == name {
			seen <- f
			return CutBefore
		}
		return Forward
	})
	conn := dial(t, url, amqp.Table{"connection_name": name})
	ch := channel(t, conn)
	d, ok, err := ch.Get(q, false)
	if err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	if names := p.Conns(); len(names) != 1 || names[0] != name {
		t.Errorf("connections through the proxy: %q", names)
	}
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	if err := d.Ack(false); err != nil {
		t.Fatalf("the ACK write failed on the client: %v", err)
	}
	if f := <-seen; f.Channel != 1 {
		t.Errorf("frame %+v", f)
	}
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("the connection was not cut")
	}
	// The broker requeues the message only once it sees its side of the
	// connection close, which can come after the client's side did.
	deadline := time.Now().Add(30 * time.Second)
	n := ready(t, q)
	for n != 1 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		n = ready(t, q)
	}
	if n != 1 {
		t.Errorf("%d messages ready after the lost ACK, want 1", n)
	}
}

// A stall holds the broker's confirm back without losing it; Resume lets it
// through. A delay adds latency to every frame.
func TestProxyStallsAndDelays(t *testing.T) {
	t.Parallel()
	q := testQueue(t)
	p, url := proxy(t)
	ch := channel(t, dial(t, url, nil))
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	p.Stall(ToClient)
	dc := publish(t, ch, q, "stalled")
	select {
	case <-dc.Done():
		t.Fatal("the confirm passed a stalled proxy")
	case <-time.After(300 * time.Millisecond):
	}
	p.Resume()
	select {
	case <-dc.Done():
		if !dc.Acked() {
			t.Fatal("nacked")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no confirm after Resume")
	}
	p.Delay(150 * time.Millisecond)
	start := time.Now()
	if !publish(t, ch, q, "delayed").Wait() {
		t.Fatal("nacked")
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Errorf("a delayed round trip took %s, want at least 300ms", took)
	}
	p.Delay(0)
	if n := ready(t, q); n != 2 {
		t.Errorf("%d messages, want 2", n)
	}
}

// A queue made to refuse publishes nacks them; healing restores what it held
// and lets publishes in again.
func TestRejectPublishesNacksAndHealRestores(t *testing.T) {
	t.Parallel()
	q := testQueue(t)
	confirmed(t, brokerURL(t), q, "kept-1", "kept-2")
	ctx := context.Background()
	heal, err := RejectPublishes(ctx, brokerURL(t), q)
	if err != nil {
		t.Fatal(err)
	}
	ch := channel(t, dial(t, brokerURL(t), nil))
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	if publish(t, ch, q, "refused").Wait() {
		t.Error("a publish to a refusing queue was confirmed")
	}
	if err := heal(ctx); err != nil {
		t.Fatal(err)
	}
	if !publish(t, ch, q, "after").Wait() {
		t.Error("a publish after heal was nacked")
	}
	var ids []string
	get := channel(t, dial(t, brokerURL(t), nil))
	for {
		d, ok, err := get.Get(q, true)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		ids = append(ids, d.MessageId)
	}
	if strings.Join(ids, ",") != "kept-1,kept-2,after" {
		t.Errorf("queue holds %v", ids)
	}
}

// A queue holding messages is not deleted; an empty one is, and a mandatory
// publish to it is returned until Restore.
func TestDeleteIfEmptyAndRestore(t *testing.T) {
	t.Parallel()
	q := testQueue(t)
	confirmed(t, brokerURL(t), q, "m1")
	if gone, err := DeleteIfEmpty(brokerURL(t), q); err != nil || gone {
		t.Fatalf("DeleteIfEmpty of a queue holding a message = %v, %v", gone, err)
	}
	if _, _, err := channel(t, dial(t, brokerURL(t), nil)).Get(q, true); err != nil {
		t.Fatal(err)
	}
	if gone, err := DeleteIfEmpty(brokerURL(t), q); err != nil || !gone {
		t.Fatalf("DeleteIfEmpty of an empty queue = %v, %v", gone, err)
	}
	ch := channel(t, dial(t, brokerURL(t), nil))
	returns := ch.NotifyReturn(make(chan amqp.Return, 1))
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	publish(t, ch, q, "lost?").Wait()
	select {
	case r := <-returns:
		if r.MessageId != "lost?" {
			t.Errorf("return %+v", r)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no Return for a deleted queue")
	}
	if err := Restore(brokerURL(t), queue.Declaration{Name: q, Args: amqp.Table{}}); err != nil {
		t.Fatal(err)
	}
	if n := ready(t, q); n != 0 {
		t.Errorf("%d messages", n)
	}
}

func TestCloseConnectionsByName(t *testing.T) {
	t.Parallel()
	name := ConnectionName("lilyfaults."+t.Name(), "handoff")
	conn := dial(t, brokerURL(t), amqp.Table{"connection_name": name})
	other := dial(t, brokerURL(t), amqp.Table{"connection_name": name + "-not"})
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	got, err := CloseConnections(context.Background(), func(n string) bool { return n == name }, "faults test")
	if err != nil || len(got) != 1 {
		t.Fatalf("closed %v: %v", got, err)
	}
	select {
	case e := <-closed:
		if e == nil || e.Code != amqp.ConnectionForced {
			t.Errorf("closed with %v", e)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the connection is still open")
	}
	if other.IsClosed() {
		t.Error("a connection of another name was closed")
	}
}

// A backend killed during its COMMIT: the client sees its connection lost,
// and the transaction did not commit.
func TestKillInCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var b [3]byte
	_, _ = rand.Read(b[:])
	table := "lily_faults_" + hex.EncodeToString(b[:])
	pgDSN := services.PostgreSQL(t)
	if _, err := Psql(ctx, pgDSN, "CREATE TABLE "+table+" (id text);"+SlowCommitSQL(table, 2*time.Second, "true")); err != nil {
		t.Fatalf("PostgreSQL is not reachable at %s: %v", pgDSN, err)
	}
	t.Cleanup(func() { _, _ = Psql(ctx, pgDSN, "DROP TABLE "+table+"; DROP FUNCTION "+table+"_faults_slow_commit()") })
	app := "lily-faults-" + hex.EncodeToString(b[:])
	victim := make(chan error, 1)
	go func() {
		// Three statements, so that COMMIT runs on its own as a driver sends it.
		psql := exec.Command("psql", "-X", "-v", "ON_ERROR_STOP=1", "-d", pgDSN,
			"-c", "BEGIN", "-c", "INSERT INTO "+table+" VALUES ('x')", "-c", "COMMIT")
		psql.Env = append(os.Environ(), "PGAPPNAME="+app)
		victim <- psql.Run()
	}()
	pid, err := KillInCommit(ctx, pgDSN, app, 2*time.Minute)
	if err != nil || pid == 0 {
		t.Fatalf("KillInCommit = %d, %v", pid, err)
	}
	if err := <-victim; err == nil {
		t.Error("the killed COMMIT reported success")
	}
	if n, err := Psql(ctx, pgDSN, "SELECT count(*) FROM "+table); err != nil || n != "0" {
		t.Errorf("rows after the killed commit: %s %v", n, err)
	}
}

// KillInCommit kills the COMMIT that SlowCommitSQL's trigger makes sleep,
// not another COMMIT of the application: here one that waits at commit
// time for a lock, and went into COMMIT first. That one commits.
func TestKillInCommitKillsTheSleepingCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var b [3]byte
	_, _ = rand.Read(b[:])
	table := "fx_faults_" + hex.EncodeToString(b[:])
	lock := int(b[0])<<16 | int(b[1])<<8 | int(b[2])
	pgDSN := services.PostgreSQL(t)
	held := fmt.Sprintf(`CREATE FUNCTION %[1]s_held() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_advisory_xact_lock(%[2]d); RETURN NULL; END $$;
CREATE CONSTRAINT TRIGGER %[1]s_held AFTER INSERT ON %[1]s DEFERRABLE INITIALLY DEFERRED
FOR EACH ROW WHEN (NEW.id = 'held') EXECUTE FUNCTION %[1]s_held();`, table, lock)
	if _, err := Psql(ctx, pgDSN, "CREATE TABLE "+table+" (id text);"+held+SlowCommitSQL(table, 2*time.Second, "NEW.id = 'slow'")); err != nil {
		t.Fatalf("PostgreSQL is not reachable at %s: %v", pgDSN, err)
	}
	t.Cleanup(func() {
		_, _ = Psql(ctx, pgDSN, "DROP TABLE "+table+"; DROP FUNCTION "+table+"_faults_slow_commit(); DROP FUNCTION "+table+"_held()")
	})
	app := "fx-faults-" + hex.EncodeToString(b[:])
	// psql runs statements one by one as app, so that COMMIT runs on its own
	// as a driver sends it.
	psql := func(app string, sql ...string) <-chan error {
		args := []string{"-X", "-v", "ON_ERROR_STOP=1", "-d", pgDSN}
		for _, s := range sql {
			args = append(args, "-c", s)
		}
		cmd := exec.Command("psql", args...)
		cmd.Env = append(os.Environ(), "PGAPPNAME="+app)
		done := make(chan error, 1)
		go func() { done <- cmd.Run() }()
		return done
	}
	until := func(what, sql string) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if n, err := Psql(ctx, pgDSN, sql); err == nil && n == "1" {
				return
			} else if time.Now().After(deadline) {
				t.Fatalf("%s: %s %v", what, n, err)
			}
		}
	}
	// The holder keeps the lock until the test cancels its sleep, once the
	// kill is done: a fixed sleep could end before the COMMITs are in place
	// on a loaded machine (three seconds did, twice).
	holder := psql(app+"-holder", fmt.Sprintf("SELECT pg_advisory_lock(%d)", lock), "SELECT pg_sleep(120)")
	until("the lock held", fmt.Sprintf("SELECT count(*) FROM pg_stat_activity WHERE application_name = '%s-holder' AND wait_event = 'PgSleep'", app))
	waiting := psql(app, "BEGIN", "INSERT INTO "+table+" VALUES ('held')", "COMMIT")
	until("a COMMIT waiting for the lock", fmt.Sprintf("SELECT count(*) FROM pg_stat_activity WHERE application_name = '%s' AND query ILIKE 'commit%%' AND wait_event_type = 'Lock'", app))
	killed := make(chan int, 1)
	go func() {
		pid, err := KillInCommit(ctx, pgDSN, app, 30*time.Second)
		if err != nil {
			t.Error(err)
		}
		killed <- pid
	}()
	sleeping := psql(app, "BEGIN", "INSERT INTO "+table+" VALUES ('slow')", "COMMIT")
	if pid := <-killed; pid == 0 {
		t.Fatal("KillInCommit killed no backend")
	}
	if err := <-sleeping; err == nil {
		t.Error("the sleeping COMMIT reported success")
	}
	if n, err := Psql(ctx, pgDSN, fmt.Sprintf("SELECT count(*) FROM pg_stat_activity WHERE application_name = '%s' AND wait_event_type = 'Lock'", app)); err != nil || n != "1" {
		t.Errorf("COMMITs still waiting for the lock after the kill: %s %v", n, err)
	}
	// Its sleep cancelled, psql stops there and its session, ending, lets
	// the lock go. The holder's pid is found first (MATERIALIZED): in one
	// WHERE, PostgreSQL may call pg_cancel_backend on every backend.
	if n, err := Psql(ctx, pgDSN, fmt.Sprintf("WITH h AS MATERIALIZED (SELECT pid FROM pg_stat_activity WHERE application_name = '%s-holder') SELECT count(*) FROM h WHERE pg_cancel_backend(h.pid)", app)); err != nil || n != "1" {
		t.Fatalf("the holder's sleep cancelled: %s %v", n, err)
	}
	if err := <-holder; err == nil {
		t.Error("the lock's holder slept on past its cancel")
	}
	if err := <-waiting; err != nil {
		t.Errorf("the COMMIT waiting for a lock: %v", err)
	}
	if rows, err := Psql(ctx, pgDSN, "SELECT string_agg(id, ',') FROM "+table); err != nil || rows != "held" {
		t.Errorf("rows after the kill: %q %v", rows, err)
	}
}

func TestHandlerFaults(t *testing.T) {
	func() {
		defer func() {
			if p := recover(); p != "boom" {
				t.Errorf("recovered %v", p)
			}
		}()
		_ = Panics("boom")(context.Background(), runtime.RawDelivery{})
	}()
	release := make(chan struct{})
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- Hangs(release)(ctx, runtime.RawDelivery{}) }()
	cancel()
	select {
	case <-done:
		t.Fatal("a hanging handler returned on cancel")
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if err := <-done; err != nil {
		t.Errorf("Hangs returned %v", err)
	}
}

// Unroute empties the queue aside, deletes it (publishes are returned), and
// heal brings it back with what it held.
func TestUnrouteAndHeal(t *testing.T) {
	t.Parallel()
	q := testQueue(t)
	confirmed(t, brokerURL(t), q, "held-1", "held-2")
	heal, err := Unroute(brokerURL(t), queue.Declaration{Name: q, Args: amqp.Table{}}, 5)
	if err != nil {
		t.Fatal(err)
	}
	ch := channel(t, dial(t, brokerURL(t), nil))
	returns := ch.NotifyReturn(make(chan amqp.Return, 1))
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	publish(t, ch, q, "returned").Wait()
	select {
	case <-returns:
	case <-time.After(30 * time.Second):
		t.Fatal("no Return while the queue is away")
	}
	if err := heal(); err != nil {
		t.Fatal(err)
	}
	if n := ready(t, q); n != 2 {
		t.Errorf("%d messages after heal, want 2", n)
	}
}

// exclusiveQueue declares a queue of ch's connection's own, gone with it.
func exclusiveQueue(t *testing.T, ch *amqp.Channel) string {
	t.Helper()
	var b [3]byte
	_, _ = rand.Read(b[:])
	q, err := ch.QueueDeclare("fx-faults-"+t.Name()+"-"+hex.EncodeToString(b[:]), false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return q.Name
}

// CancelConsumers cancels only the consumers the client still has: not one
// it cancelled, nor one on a channel it closed (a basic.cancel there makes
// the client close its connection).
func TestCancelConsumersCancelsOnlyLiveConsumers(t *testing.T) {
	t.Parallel()
	p, url := proxy(t)
	name := ConnectionName("fx-faults-"+t.Name(), "consume")
	conn := dial(t, url, amqp.Table{"connection_name": name})
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	consume := func(ch *amqp.Channel, tag string) <-chan amqp.Delivery {
		t.Helper()
		ds, err := ch.Consume(exclusiveQueue(t, ch), tag, false, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		return ds
	}
	cancelled := channel(t, conn)
	consume(cancelled, "cancelled")
	if err := cancelled.Cancel("cancelled", false); err != nil {
		t.Fatal(err)
	}
	gone := channel(t, conn)
	consume(gone, "on-a-closed-channel")
	if err := gone.Close(); err != nil {
		t.Fatal(err)
	}
	live := channel(t, conn)
	deliveries := consume(live, "live")
	if n := p.CancelConsumers(func(n string) bool { return n == name }); n != 1 {
		t.Errorf("CancelConsumers = %d, want 1", n)
	}
	select {
	case _, open := <-deliveries:
		if open {
			t.Fatal("a delivery from a queue nobody published to")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the live consumer is still open at the client")
	}
	// The connection outlives the cancel: a round trip on a new channel.
	if _, err := channel(t, conn).QueueDeclarePassive(exclusiveQueue(t, live), false, true, true, false, nil); err != nil {
		t.Fatalf("the connection after CancelConsumers: %v", err)
	}
	select {
	case e := <-closed:
		t.Fatalf("the client closed its connection: %v", e)
	default:
	}
}
