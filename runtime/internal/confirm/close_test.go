package confirm

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/internal/services"
	"github.com/lily-mq/lily/runtime/internal/outcome"
	"github.com/lily-mq/lily/runtime/internal/transport"
)

// muted is a connection whose writes, once mute is set, reach nobody: the
// broker never sees them, and never answers. swallowed counts them.
type muted struct {
	net.Conn
	mute      *atomic.Bool
	swallowed *atomic.Int32
}

func (m muted) Write(b []byte) (int, error) {
	if m.mute.Load() {
		m.swallowed.Add(1)
		return len(b), nil
	}
	return m.Conn.Write(b)
}

// A close the broker does not answer (it never sees the connection.close)
// waits for its close-ok outside the connection's lock: a publish that needs
// the connection meanwhile (one on a channel of its own, as a consumer's
// handoff) fails at once, the publisher closed, within its own bounds.
// Before, it waited for the lock until the close gave up, a step later.
func TestBrokerPublishDuringAnUnansweredClose(t *testing.T) {
	t.Parallel()
	url := services.RabbitMQ(t)
	const stepTimeout = 10 * time.Second
	var mute atomic.Bool
	var swallowed atomic.Int32
	var socket net.Conn
	conn := NewConn(func() (*amqp.Connection, net.Conn, func(), error) {
		conn, s, err := transport.Dial(url, amqp.Config{}, func(conn, _ net.Conn) net.Conn { return muted{conn, &mute, &swallowed} })
		socket = s
		return conn, s, nil, err
	}, stepTimeout)
	if ev := publish(New(conn, 1), "lily-confirm-no-such-queue", 5*time.Second); ev.Status != outcome.HandoffReturned {
		t.Fatalf("first publish: %v %s; want returned", ev.Status, ev.Detail)
	}
	mute.Store(true)
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		conn.CloseBy(time.Now().Add(stepTimeout))
	}()
	eventually(t, 5*time.Second, "the connection.close written", func() bool { return swallowed.Load() > 0 })
	began := time.Now()
	ev := publish(New(conn, 1), "lily-confirm-no-such-queue", 300*time.Millisecond)
	if took := time.Since(began); took > 2*time.Second || ev.Status != outcome.HandoffFailed {
		t.Errorf("a publish while the close waits: %v %q after %s; want failed within its bound", ev.Status, ev.Detail, took.Round(time.Millisecond))
	}
	_ = socket.Close()
	<-closed
}

// An extra connection, dialled when the first had no channel id free, that
// its publish leaves idle (its channel never opened: the broker stopped
// answering) is closed without the publish waiting for the close-ok: the
// publish ends within its own bounds. Before, it waited on the close, a
// whole step past its bound.
func TestBrokerIdleExtraConnectionClosesWithoutHoldingThePublish(t *testing.T) {
	t.Parallel()
	url := services.RabbitMQ(t)
	const stepTimeout = 20 * time.Second
	var dials atomic.Int32
	var swallowed atomic.Int32
	conn := NewConn(func() (*amqp.Connection, net.Conn, func(), error) {
		mute := new(atomic.Bool)
		conn, s, err := transport.Dial(url, amqp.Config{ChannelMax: 1}, func(conn, _ net.Conn) net.Conn { return muted{conn, mute, &swallowed} })
		// Every connection after the first goes silent once it is open.
		mute.Store(dials.Add(1) > 1)
		return conn, s, nil, err
	}, stepTimeout)
	defer conn.CloseBy(time.Now().Add(time.Second))
	if ev := publish(New(conn, 1), "lily-confirm-no-such-queue", 5*time.Second); ev.Status != outcome.HandoffReturned {
		t.Fatalf("first publish: %v %s; want returned", ev.Status, ev.Detail)
	}
	done := make(chan outcome.HandoffEvidence, 1)
	// Its bound carries the second dial (a whole handshake, half a second
	// on a loaded broker) and ends long before the step.
	go func() { done <- publish(New(conn, 1), "lily-confirm-no-such-queue", 3*time.Second) }()
	select {
	case ev := <-done:
		if ev.Status != outcome.HandoffTimedOut || dials.Load() != 2 {
			t.Errorf("the publish on the extra connection: %v %q after %d dials; want timed out, on a second connection", ev.Status, ev.Detail, dials.Load())
		}
	case <-time.After(stepTimeout / 2):
		t.Fatal("the publish on the extra connection waited on its close past half a step")
	}
}

// A publish whose writing callback panics (the runtime's report, a test's
// hook) leaves its channel's writes free: the channel's close, which waits
// for the writes under way, ends at once. Before, the panic left the read
// lock held, and every close of that channel waited out its step.
func TestBrokerPanicInWritingLeavesTheChannelClosable(t *testing.T) {
	t.Parallel()
	p := newPublisher(t, services.RabbitMQ(t))
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the publish did not panic")
			}
		}()
		p.Publish(Bounds{Deadline: time.Now().Add(30 * time.Second)}, "", "lily-confirm-nowhere", amqp.Publishing{Headers: amqp.Table{}},
			func() error { panic("the report failed") })
	}()
	c := p.currentChannel()
	if c == nil {
		t.Fatal("no channel was opened for the publish")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.close(ctx); err != nil {
		t.Errorf("close after a publish panicked in writing: %v; want closed", err)
	}
}
