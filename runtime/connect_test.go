package runtime_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lily-mq/lily/internal/faults"
	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/runtime/internal/fixture"
)

func ack(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error { return nil }

// Config.TLS carries the CA to trust and a client certificate: a TLS
// listener that accepts only clients whose certificate the test's CA signed
// lets the consumer and its handoff connection through, and refuses a
// consumer without one.
func TestBrokerTLSClientCertificate(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	f := tlsFront(t, ca, true)
	q := brokerSpec(t, hourRetry)
	declareTopology(t, q)
	publish(t, q.Name, order(t, "tls-1"))
	withCert := &tls.Config{RootCAs: ca.pool, Certificates: []tls.Certificate{ca.issue(t, "lily-consumer", x509.ExtKeyUsageClientAuth)}, MinVersion: tls.VersionTLS12}
	c := start(t, q, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error {
		return errors.New("retry it, over the handoff connection")
	}, func(cfg *runtime.Config) { cfg.URLs, cfg.TLS = []string{f.bare}, withCert })
	rec := c.await(1)[0]
	if rec.Path != runtime.PathRetried || rec.Handoff != "confirmed" {
		t.Errorf("record %+v, want retried with a confirmed handoff", rec)
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, bucket(q, time.Hour): {1, 0}})
	if n := f.clients.Load(); n < 2 {
		t.Errorf("%d connections with a verified client certificate, want the consumer's and its handoff's", n)
	}

	_, refused := prepare(t, q, ack, func(cfg *runtime.Config) {
		cfg.URLs, cfg.TLS = []string{f.bare}, &tls.Config{RootCAs: ca.pool, MinVersion: tls.VersionTLS12}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := refused.Run(ctx); err == nil {
		t.Error("a consumer without a client certificate connected")
	}
	if _, err := runtime.NewConsumer(q, fixture.LilytestRoutes(handler(ack)), runtime.Config{URLs: []string{brokerURL(t)}, TLS: withCert}); err == nil || !strings.Contains(err.Error(), "not amqps://") {
		t.Errorf("NewConsumer with TLS and an amqp:// URL: %v", err)
	}
}

// fakeNode is the URL of a node that hands each connection to serve. It
// keeps its port for the whole test: a port merely closed could be taken by
// another test's proxy, and lead somewhere after all.
func fakeNode(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go serve(conn)
		}
	}()
	return "amqp://guest:guest@" + ln.Addr().String() + "/"
}

// deadNode is the URL of a node that closes every connection at once.
func deadNode(t *testing.T) string {
	return fakeNode(t, func(conn net.Conn) { _ = conn.Close() })
}

// The URLs are tried in turn: a node that fails is passed over, and when
// the node in use goes away the consumer moves on to the next, losing
// nothing.
func TestBrokerURLsTriedInTurn(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t)
	declareTopology(t, q)
	a, b := newProxy(t), newProxy(t)
	c := start(t, q, ack, func(cfg *runtime.Config) {
		cfg.URLs = []string{deadNode(t), a.url(), b.url()}
	})
	publish(t, q.Name, order(t, "on-a"))
	if rec := c.await(1)[0]; rec.MessageID != "on-a" || rec.Path != runtime.PathAcked {
		t.Errorf("record %+v", rec)
	}
	if !a.connected() || b.connected() {
		t.Fatalf("connections through a: %v, through b: %v; want a alone", a.Conns(), b.Conns())
	}
	// The broker has the ACK before the node goes: nothing comes back.
	assertCounts(t, map[string][2]int{q.Name: {0, 0}})
	_ = a.Close() // the node goes away for good
	eventually(t, 2*time.Minute, "a connection through b", b.connected)
	publish(t, q.Name, order(t, "on-b"))
	recs := c.await(2)
	if rec := recs[1]; rec.MessageID != "on-b" || rec.Path != runtime.PathAcked || rec.Redelivered {
		t.Errorf("record %+v, want on-b acked", rec)
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, q.Topology.DeadLetterQueue: {0, 0}})
	if n := c.reconnects(); n < 1 {
		t.Errorf("%d reconnects, want at least 1", n)
	}
}

// Credentials are asked for at each connection attempt: a password rotated
// on the broker, and in the function, is used at the next reconnect.
func TestBrokerCredentialsRotate(t *testing.T) {
	t.Parallel()
	user := brokerUser(t, "rotate", "first-secret")

	q := brokerSpec(t)
	declareTopology(t, q)
	p := newProxy(t)
	var password atomic.Value
	password.Store("first-secret")
	var asked atomic.Int32
	c := start(t, q, ack, func(cfg *runtime.Config) {
		// The URL's own user would be refused: the function's replace it.
		cfg.URLs = []string{strings.Replace(p.url(), "guest:guest", "nobody:wrong", 1)}
		cfg.Credentials = func(context.Context) (string, string, error) {
			asked.Add(1)
			return user, password.Load().(string), nil
		}
	})
	publish(t, q.Name, order(t, "before"))
	c.await(1)
	// The broker has the ACK before the cut: nothing comes back.
	assertCounts(t, map[string][2]int{q.Name: {0, 0}})
	rabbitmqctl(t, "change_password", user, "second-secret")
	password.Store("second-secret")
	before := asked.Load()
	p.cut()
	publish(t, q.Name, order(t, "after"))
	recs := c.await(2)
	if recs[1].MessageID != "after" || recs[1].Path != runtime.PathAcked {
		t.Errorf("record %+v", recs[1])
	}
	if asked.Load() <= before {
		t.Errorf("the credentials were asked for %d times, none after the cut", asked.Load())
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, q.Topology.DeadLetterQueue: {0, 0}})
}

// A connection lost while the consume loop waits for a slot (the only one
// held by a long handler) is noticed at once: the consumer reconnects while
// the handler still runs, and the delivery that waited is not handled on
// the lost channel. Redelivered, both messages end acked, each handled on
// the new channel once more at most.
func TestBrokerLossWhileWaitingForASlotReconnects(t *testing.T) {
	t.Parallel()
	q, p := behindProxy(t, "held", hourRetry, heldHandler, func(q *runtime.QueueSpec) { q.Concurrency = 1 })
	publish(t, q.Name, order(t, "waiting"))
	release := make(chan struct{})
	var held, waiting atomic.Int32
	r := start(t, q, func(_ context.Context, msg *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
		if msg.OrderID == "held" {
			if held.Add(1) == 1 {
				<-release
			}
			return nil
		}
		waiting.Add(1)
		return nil
	}, through(p))
	awaitTaken(t, q.Name)
	eventually(t, 2*time.Minute, "the held handler running", func() bool { return held.Load() == 1 })
	p.CutConns(func(name string) bool { return strings.HasSuffix(name, " consume") })
	eventually(t, 2*time.Minute, "a reconnect while the handler holds the slot", func() bool { return r.reconnects() >= 1 })
	if n := waiting.Load(); n != 0 {
		t.Errorf("the waiting delivery was handled %d times on the lost channel", n)
	}
	close(release)
	eventually(t, 2*time.Minute, "both redelivered and acked", func() bool {
		acked := map[string]bool{}
		for _, rec := range r.recorded() {
			if rec.Path == runtime.PathAcked {
				acked[rec.MessageID] = true
			}
		}
		return acked["held"] && acked["waiting"]
	})
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, bucket(q, time.Hour): {0, 0}})
	if n := waiting.Load(); n != 1 {
		t.Errorf("the waiting message was handled %d times; want once, on the new channel", n)
	}
}

// A node that takes the connection but cannot serve the queue (here its
// basic.consume is never answered, as on a node cut off from its cluster's
// majority) is passed over: the consumer opens its session on the next URL,
// from the first connection on, and the message is handled there.
func TestBrokerNodeThatCannotServeIsPassedOver(t *testing.T) {
	t.Parallel()
	q, a := behindProxy(t, "failover-1", hourRetry)
	b := newProxy(t)
	a.Intercept(func(f faults.Frame) faults.Action {
		if f.Dir == faults.ToBroker && f.Is(faults.BasicConsume) {
			return faults.Drop
		}
		return faults.Forward
	})
	// The attempt on a ends at the step; the step carries b's declarations
	// on a loaded machine.
	r := start(t, q, ack, func(cfg *runtime.Config) {
		cfg.URLs, cfg.StepTimeout, cfg.ReconnectMax = []string{a.url(), b.url()}, 3*time.Second, 200*time.Millisecond
	})
	rec := r.await(1)[0]
	if rec.Path != runtime.PathAcked || rec.MessageID != "failover-1" {
		t.Errorf("record %+v", rec)
	}
	if !slices.ContainsFunc(b.Conns(), func(name string) bool { return strings.HasSuffix(name, " consume") }) {
		t.Errorf("no consuming connection through the second node: %v", b.Conns())
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}})
}

// A consume the broker refuses on every reconnect (another connection has
// taken the queue exclusively) leaves no generation behind: a run whose
// consume is refused for weeks keeps none of them.
func TestBrokerRefusedConsumeLeavesNoGeneration(t *testing.T) {
	t.Parallel()
	q, p := behindProxy(t, "exclusive-1", hourRetry)
	r, c := prepare(t, q, ack, through(p))
	r.launch(c)
	r.await(1)
	holder := dial(t)
	eventually(t, 2*time.Minute, "the queue taken exclusively by another connection", func() bool {
		p.Cut()
		ch, err := holder.Channel()
		if err != nil {
			return false
		}
		_, err = ch.Consume(q.Name, "holder", false, true, false, false, nil)
		return err == nil
	})
	eventually(t, 2*time.Minute, "three refused consumes", func() bool {
		n := 0
		for _, ev := range r.events.all() {
			if ev.stage == "topology-refused" && strings.Contains(ev.detail, "ACCESS_REFUSED") {
				n++
			}
		}
		return n >= 3
	})
	// A reconnect may be between its generation and its refusal just now.
	eventually(t, 2*time.Minute, "no generation kept", func() bool { return c.Generations() == 0 })
	// The one message was acked before the holder took the queue.
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, q.Topology.DeadLetterQueue: {0, 0}})
}

// A Credentials function that ignores its context holds no connection
// attempt past the step: the first connection fails, saying why, instead of
// waiting for it for good.
func TestBrokerCredentialsThatHangAreGivenUp(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t)
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	_, c := prepare(t, q, ack, func(cfg *runtime.Config) {
		cfg.StepTimeout = 500 * time.Millisecond
		cfg.Credentials = func(context.Context) (string, string, error) {
			<-hang
			return "", "", errors.New("too late")
		}
	})
	ran := make(chan error, 1)
	go func() { _, err := c.Run(context.Background()); ran <- err }()
	select {
	case err := <-ran:
		if err == nil || !strings.Contains(err.Error(), "credentials: not returned within the step timeout") {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Run still waits for the credentials a minute later")
	}
}

// A Credentials function that panics fails the connection attempt, saying
// so, instead of ending the process on the attempt's goroutine: the message
// waiting in the queue stays there for the next start.
func TestBrokerCredentialsThatPanicFailTheAttempt(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t)
	declareTopology(t, q)
	publish(t, q.Name, order(t, "waiting"))
	_, c := prepare(t, q, ack, func(cfg *runtime.Config) {
		cfg.Credentials = func(context.Context) (string, string, error) { panic("vault client not set") }
	})
	if _, err := c.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "credentials: panic: vault client not set") {
		t.Errorf("Run: %v", err)
	}
	assertCounts(t, map[string][2]int{q.Name: {1, 0}, q.Topology.DeadLetterQueue: {0, 0}})
}
