package transport

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// gated is a connection whose writes each wait for the test: started
// says a write began, gate lets it end.
type gated struct {
	net.Conn // unused: calling what gated does not define panics
	started  chan struct{}
	gate     chan struct{}

	mu                          sync.Mutex
	writes                      []string
	readDeadline, writeDeadline time.Time
	closed                      bool
}

func newGated() *gated { return &gated{started: make(chan struct{}), gate: make(chan struct{})} }

func (g *gated) Write(p []byte) (int, error) {
	g.started <- struct{}{}
	<-g.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	g.writes = append(g.writes, string(p))
	return len(p), nil
}

// step lets the write under way end, once it has begun.
func (g *gated) step() {
	<-g.started
	g.gate <- struct{}{}
}

func (g *gated) SetReadDeadline(t time.Time) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.readDeadline = t
	return nil
}

func (g *gated) SetWriteDeadline(t time.Time) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.writeDeadline = t
	return nil
}

func (g *gated) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	return nil
}

// Writes made while the writer is in a system call leave together in its
// next one, in their order; only the writer sets a write deadline, and it
// leaves none behind.
func TestCoalesceSendsWritesMadeMeanwhileInOneCall(t *testing.T) {
	g := newGated()
	c := Coalesce(g, g, time.Minute)
	if _, err := c.Write([]byte("first")); err != nil {
		t.Fatal(err)
	}
	<-g.started // the writer is in its system call with "first"
	for _, p := range []string{"a", "b", "c"} {
		if _, err := c.Write([]byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	g.gate <- struct{}{}
	g.step()
	deadline := time.Now().Add(time.Hour)
	if err := c.SetDeadline(deadline); err != nil {
		t.Fatal(err)
	}
	if err := c.SetWriteDeadline(deadline); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if got := fmt.Sprint(g.writes); got != "[first abc]" {
		t.Errorf("the system calls wrote %s, want [first abc]", got)
	}
	if !g.writeDeadline.IsZero() || !g.readDeadline.Equal(deadline) {
		t.Errorf("write deadline %v, read deadline %v: want none, and the one set", g.writeDeadline, g.readDeadline)
	}
	if !g.closed {
		t.Error("Close left the connection open")
	}
}

// Close sends what was queued first (the client's last frame, a close-ok),
// and writes after it fail.
func TestCoalesceCloseSendsWhatIsQueued(t *testing.T) {
	g := newGated()
	c := Coalesce(g, g, time.Minute)
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	<-g.started
	if _, err := c.Write([]byte("close-ok")); err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	g.gate <- struct{}{}
	g.step()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("late")); !errors.Is(err, net.ErrClosed) {
		t.Errorf("a write after Close answered %v, want net.ErrClosed", err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if got := fmt.Sprint(g.writes); got != "[x close-ok]" || !g.closed {
		t.Errorf("the system calls wrote %s (closed %t), want [x close-ok], then closed", got, g.closed)
	}
}

// Writers on many goroutines lose no byte and keep each one's order: every
// line arrives whole, each writer's in the order written.
func TestCoalesceKeepsEveryWriteInOrder(t *testing.T) {
	client, server := net.Pipe()
	c := Coalesce(client, client, time.Minute)
	defer c.Close()
	const writers, lines = 16, 500
	line := func(w, i int) string {
		pad := ""
		if i%50 == 0 { // now and then a line longer than the client's own buffer
			pad = strings.Repeat(" ", 5000)
		}
		return fmt.Sprintf("%d %d%s", w, i, pad)
	}
	read := make(chan map[int][]int, 1)
	go func() {
		got := make(map[int][]int)
		s := bufio.NewScanner(server)
		for n := 0; n < writers*lines && s.Scan(); n++ {
			var w, i int
			if _, err := fmt.Sscanf(s.Text(), "%d %d", &w, &i); err != nil || s.Text() != line(w, i) {
				t.Errorf("line %.40q arrived mangled (%v)", s.Text(), err)
			}
			got[w] = append(got[w], i)
		}
		read <- got
	}()
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range lines {
				if _, err := io.WriteString(c, line(w, i)+"\n"); err != nil {
					t.Errorf("writer %d, line %d: %v", w, i, err)
					server.Close() // the reader waits no longer
					return
				}
			}
		})
	}
	wg.Wait()
	got := <-read
	for w := range writers {
		if len(got[w]) != lines {
			t.Fatalf("writer %d: %d lines arrived, want %d", w, len(got[w]), lines)
		}
		for i, n := range got[w] {
			if n != i {
				t.Fatalf("writer %d: line %d arrived as number %d", w, i, n)
			}
		}
	}
}

// A peer that stops reading fails the connection within stall: the queue
// fills, the writer's system call times out, and the writer closes the
// socket, so that the client's reader fails too. That failure is the answer
// of the write waiting for room and of every write after it, and nothing
// queued reaches the peer.
func TestCoalesceFailsAStalledSocket(t *testing.T) {
	client, server := net.Pipe()
	defer server.Close()
	c := Coalesce(client, client, 100*time.Millisecond)
	defer c.Close()
	chunk := make([]byte, 4096)
	var err error
	// At most twice maxQueued is taken before a write waits: what the
	// writer holds and what is queued behind it.
	for i := 0; i < 4*maxQueued/len(chunk) && err == nil; i++ {
		_, err = c.Write(chunk)
	}
	if !isTimeout(err) {
		t.Fatalf("writing %d bytes that nothing reads answered %v, want a timeout", 4*maxQueued, err)
	}
	if _, err := c.Write(chunk); !isTimeout(err) {
		t.Errorf("the next write answered %v, want the same failure", err)
	}
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.ErrClosedPipe) {
		t.Errorf("a read after the failure answered %v, want the socket closed", err)
	}
	if n, err := io.Copy(io.Discard, server); n != 0 || err != nil {
		t.Errorf("the peer read %d bytes (%v), want none, then the end", n, err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
