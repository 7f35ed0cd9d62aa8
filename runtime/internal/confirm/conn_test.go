package confirm

import (
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/runtime/internal/step"
)

// A connection two publishers share (a Publisher and the handoffs of the
// consumers given it) is dialled by one; the other waits for that dial
// within its own bounds: done closed, it stops waiting at once. So does the
// one dialling, its dial given up. Neither waits out the step (an hour).
func TestLinkWaitsEndWithDone(t *testing.T) {
	release := make(chan struct{})
	c := NewConn(func() (*amqp.Connection, net.Conn, func(), error) {
		<-release
		return nil, nil, nil, errors.New("refused")
	}, time.Hour)
	defer close(release)
	dialerDone, waiterDone := make(chan struct{}), make(chan struct{})
	answers := make(chan error, 2)
	go func() {
		_, err := c.link(time.Time{}, dialerDone)
		answers <- err
	}()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
		c.mu.Lock()
		dialing := c.dialing != nil
		c.mu.Unlock()
		if dialing {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no dial began")
		}
	}
	go func() {
		_, err := c.link(time.Time{}, waiterDone)
		answers <- err
	}()
	close(waiterDone)
	close(dialerDone)
	for range 2 {
		select {
		case err := <-answers:
			// The waiter stops waiting; the dialler's step ends early.
			if !errors.Is(err, errStopped) && !errors.Is(err, step.ErrTimeout) {
				t.Errorf("a link whose done closed answered %v", err)
			}
		case <-time.After(time.Minute):
			t.Fatal("a link whose done closed still waits a minute later")
		}
	}
}

// A dial that panics (in the dial, or in Backoff, which the Publisher's
// logs in: a slog handler may panic) ends as one that fails: the next
// publish dials again, rather than wait on a dial nobody will end, or on the
// Conn's lock.
func TestLinkDialsAgainAfterAPanic(t *testing.T) {
	refused := errors.New("refused")
	var dials atomic.Int32
	c := NewConn(func() (*amqp.Connection, net.Conn, func(), error) {
		dials.Add(1)
		return nil, nil, nil, refused
	}, time.Hour)
	c.Backoff = func(int) time.Duration { panic("a logger's panic") }
	for i := range 2 {
		panicked := make(chan any, 1)
		go func() {
			defer func() { panicked <- recover() }()
			_, _ = c.link(time.Now().Add(time.Minute), nil)
		}()
		select {
		case p := <-panicked:
			if p == nil {
				t.Fatalf("link %d did not panic with Backoff", i+1)
			}
		case <-time.After(2 * time.Minute):
			t.Fatalf("link %d still waits two minutes later", i+1)
		}
	}
	if n := dials.Load(); n != 2 {
		t.Errorf("%d dials; want one for each link", n)
	}
}

// The watchdog on a write waits while the socket sends, however long, and
// abandons the connection once it has sent nothing for a step (leaving its
// node, silent), once the publish's deadline has passed, or once its caller
// stopped waiting (the node answers: it stays): each a step after it was
// armed at the soonest.
func TestWatchWaitsWhileBytesGoOut(t *testing.T) {
	const step = 10 * time.Millisecond
	watched := func(sent func() time.Time, silent *atomic.Bool) *link {
		client, server := net.Pipe()
		t.Cleanup(func() { _, _ = client.Close(), server.Close() })
		l := &link{socket: client, sent: sent, silent: func() { silent.Store(true) }, unblocked: make(chan struct{})}
		close(l.unblocked)
		return l
	}
	var silent atomic.Bool
	l := watched(time.Now, &silent)
	w := l.watch(step, time.Time{}, nil)
	time.Sleep(10 * step)
	if w.stop() || l.broken.Load() {
		t.Error("a write behind bytes going out abandoned the connection")
	}
	done := make(chan struct{})
	close(done)
	for name, c := range map[string]struct {
		sent   func() time.Time
		by     time.Time
		done   chan struct{}
		silent bool
	}{
		"nothing sent":    {sent: func() time.Time { return time.Now().Add(-time.Hour) }, silent: true},
		"never sent":      {sent: func() time.Time { return time.Time{} }, silent: true},
		"deadline passed": {sent: time.Now, by: time.Now().Add(3 * step)},
		"caller stopped":  {sent: time.Now, done: done},
	} {
		var silent atomic.Bool
		l := watched(c.sent, &silent)
		w := l.watch(step, c.by, c.done)
		for deadline := time.Now().Add(time.Minute); !l.broken.Load(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the connection not abandoned within a minute", name)
			}
		}
		if !w.stop() {
			t.Errorf("%s: the watchdog abandoned the connection and says it did not fire", name)
		}
		if silent.Load() != c.silent {
			t.Errorf("%s: the node left as silent: %t; want %t", name, silent.Load(), c.silent)
		}
	}
}

// A publish's channel closed by the broker answers with the broker's
// reason, to every publish that asks; one closed under a lost connection
// carries the client's own error (a 501 frame error for an EOF), which is
// no reason the broker gave, and answers none.
func TestCloseReasonIsTheBrokersAlone(t *testing.T) {
	refused := &amqp.Error{Code: amqp.AccessRefused, Reason: "ACCESS_REFUSED - access to exchange 'amq.default' refused", Server: true}
	for _, c := range []struct {
		closed *amqp.Error
		want   string
	}{
		{refused, refused.Error()},
		{&amqp.Error{Code: amqp.FrameError, Reason: "EOF"}, ""},
		{nil, ""},
	} {
		closes := make(chan *amqp.Error, 1)
		if c.closed != nil {
			closes <- c.closed
		}
		close(closes)
		ch := &channel{closes: closes}
		for i := range 2 {
			if got := ch.closeReason(); got != c.want {
				t.Errorf("closed by %v, publish %d: reason %q; want %q", c.closed, i+1, got, c.want)
			}
		}
	}
}
