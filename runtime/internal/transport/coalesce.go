package transport

import (
	"net"
	"sync"
	"time"
)

// maxQueued bounds the bytes written to a coalescing connection and not yet
// sent: a write beyond it waits for room, as it would on a socket the broker
// does not read. A system call of this size already costs little per byte.
const maxQueued = 64 << 10

// maxKept is the largest buffer a coalescing connection keeps to queue into
// again (it keeps two); one grown larger, for a large frame, is let go.
const maxKept = 256 << 10

// Coalesce returns conn with its writes sent by a writer of its own, so that
// writes made while it is in a system call leave together in the next.
// amqp091-go writes each publish (its method, header and body frames) with
// one flush under its connection's lock: many goroutines publishing on one
// connection would each pay a system call, one after another. Through
// Coalesce a publish copies its frames and returns, and the publishes made
// meanwhile share one write.
//
// A write that returned has not necessarily reached the socket: a publish's
// confirm, not its write, says that the broker has it. Each of the writer's
// system calls must end within stall, and the writer alone sets the write
// deadline. When one fails, the writer closes socket (the TCP connection
// beneath conn) so that the client's reader fails too and the connection
// ends at once; the failure is the answer of every later write, and what was
// queued is lost with the connection, as bytes in the kernel's buffer would
// be. Bytes are sent in the order of their writes.
func Coalesce(conn, socket net.Conn, stall time.Duration) net.Conn {
	c := &coalescing{Conn: conn, socket: socket, stall: stall, ended: make(chan struct{})}
	c.ready.L = &c.mu
	c.room.L = &c.mu
	go c.send()
	return c
}

type coalescing struct {
	net.Conn
	socket net.Conn
	stall  time.Duration
	// ended is closed when the writer has stopped.
	ended chan struct{}

	mu sync.Mutex
	// ready wakes the writer when bytes are queued or the connection
	// closes; room wakes writes waiting for the queue to drain.
	ready, room sync.Cond
	// queued are the bytes waiting for the writer; spare is the buffer it
	// sent last, kept to queue into again.
	queued, spare []byte
	// err ends every later write: the writer's failure, or net.ErrClosed.
	err     error
	closing bool
	// deadline is the client's, from SetDeadline (zero when none): a
	// system call and Close end by it too, if it comes before stall does.
	deadline time.Time
}

// by is when a system call or Close that starts now must end: within stall,
// and by the client's deadline.
func (c *coalescing) by() time.Time {
	by := time.Now().Add(c.stall)
	if !c.deadline.IsZero() && c.deadline.Before(by) {
		return c.deadline
	}
	return by
}

// Write queues p for the writer and returns, unless the queue is full, or
// the connection failed or is closing.
func (c *coalescing) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.err == nil && !c.closing && len(c.queued) > 0 && len(c.queued)+len(p) > maxQueued {
		c.room.Wait()
	}
	switch {
	case c.err != nil:
		return 0, c.err
	case c.closing:
		return 0, net.ErrClosed
	}
	if len(c.queued) == 0 {
		c.ready.Signal()
	}
	c.queued = append(c.queued, p...)
	return len(p), nil
}

// send writes what is queued, all of it at once, until the connection fails,
// or closes with nothing left to send.
func (c *coalescing) send() {
	defer close(c.ended)
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		for len(c.queued) == 0 && c.err == nil && !c.closing {
			c.ready.Wait()
		}
		if c.err != nil || len(c.queued) == 0 {
			return
		}
		out := c.queued
		c.queued = c.spare[:0]
		by := c.by()
		c.mu.Unlock()
		err := c.Conn.SetWriteDeadline(by)
		if err == nil {
			_, err = c.Conn.Write(out)
		}
		// No deadline is left behind: under TLS, a read may have to write
		// (a key update), with whatever deadline the socket has then.
		_ = c.Conn.SetWriteDeadline(time.Time{})
		if err != nil {
			_ = c.socket.Close()
		}
		c.mu.Lock()
		c.spare = nil
		if cap(out) <= maxKept {
			c.spare = out[:0]
		}
		if err != nil && c.err == nil {
			c.err = err
			c.queued = nil
		}
		c.room.Broadcast()
	}
}

// Close sends what is queued (the client's last frames: its close, or the
// close-ok to the broker's), within stall and by the client's deadline, then
// closes the connection.
func (c *coalescing) Close() error {
	c.mu.Lock()
	c.closing = true
	c.ready.Signal()
	c.room.Broadcast()
	by := c.by()
	c.mu.Unlock()
	t := time.NewTimer(time.Until(by))
	select {
	case <-c.ended:
	case <-t.C:
	}
	t.Stop()
	c.mu.Lock()
	if c.err == nil {
		c.err = net.ErrClosed
	}
	c.mu.Unlock()
	select {
	case <-c.ended:
	default:
		// Still in its system call: closing conn first could wait for it
		// (a TLS close writes too).
		_ = c.socket.Close()
	}
	return c.Conn.Close()
}

// SetDeadline sets the read deadline, and keeps t for the writer, which sets
// its own write deadlines: amqp091-go's CloseDeadline bounds the close with
// it, and a peer that stopped reading must not hold the close past it.
func (c *coalescing) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	return c.Conn.SetReadDeadline(t)
}

// SetWriteDeadline does nothing: the writer bounds each of its writes by
// stall, and a write of the client's only queues.
func (c *coalescing) SetWriteDeadline(time.Time) error { return nil }
