package transport

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
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
	// fail, when set, is every write's answer once let through.
	fail error

	mu                          sync.Mutex
	calls                       int // writes begun, passed through or not
	writes                      []string
	readDeadline, writeDeadline time.Time
	closed                      bool
}

func newGated() *gated { return &gated{started: make(chan struct{}), gate: make(chan struct{})} }

func (g *gated) Write(p []byte) (int, error) {
	g.mu.Lock()
	g.calls++
	g.mu.Unlock()
	g.started <- struct{}{}
	<-g.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.fail != nil {
		return 0, g.fail
	}
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

// fillWhileWriting has the writer in its system call with "first" and the
// queue full behind it, and n writes waiting for room; it returns their
// answers.
func fillWhileWriting(t *testing.T, g *gated, c net.Conn, n int) <-chan error {
	t.Helper()
	if _, err := c.Write([]byte("first")); err != nil {
		t.Fatal(err)
	}
	<-g.started
	if _, err := c.Write(make([]byte, maxQueued)); err != nil {
		t.Fatal(err)
	}
	answers := make(chan error, n)
	for range n {
		go func() {
			_, err := c.Write([]byte("late"))
			answers <- err
		}()
	}
	waitForWaiting(t, n)
	return answers
}

// answer is the next of answers, within a generous deadline.
func answer(t *testing.T, answers <-chan error) error {
	t.Helper()
	select {
	case err := <-answers:
		return err
	case <-time.After(time.Minute):
		t.Fatal("a write is still waiting a minute later")
		return nil
	}
}

// waitForWaiting returns once n writes wait for room in the queue.
func waitForWaiting(t *testing.T, n int) {
	t.Helper()
	buf := make([]byte, 1<<20)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
		stacks := string(buf[:runtime.Stack(buf, true)])
		waiting := 0
		for g := range strings.SplitSeq(stacks, "\n\n") {
			if strings.Contains(g, "sync.(*Cond).Wait") && strings.Contains(g, "(*coalescing).Write") && strings.Contains(g, "fillWhileWriting") {
				waiting++
			}
		}
		if waiting == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d writes wait for room, want %d", waiting, n)
		}
	}
}

// A failed system call answers every write waiting for room with its
// failure, closes the socket, and sends nothing queued behind it.
func TestCoalesceFailureAnswersEveryWaitingWrite(t *testing.T) {
	g := newGated()
	broken := errors.New("connection reset by peer")
	g.fail = broken
	c := Coalesce(g, g, time.Minute)
	answers := fillWhileWriting(t, g, c, 3)
	g.gate <- struct{}{}
	for range 3 {
		if err := answer(t, answers); !errors.Is(err, broken) {
			t.Errorf("a write waiting for room answered %v, want the writer's failure", err)
		}
	}
	if _, err := c.Write([]byte("after")); !errors.Is(err, broken) {
		t.Errorf("a write after the failure answered %v, want the writer's failure", err)
	}
	// A writer that went on to send what was queued would wait in its
	// next system call, and never end.
	ended(t, c)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.calls != 1 || !g.closed {
		t.Errorf("%d system calls (closed %t), want the one that failed, and the socket closed", g.calls, g.closed)
	}
}

// ended waits for c's writer to stop, within a generous deadline.
func ended(t *testing.T, c net.Conn) {
	t.Helper()
	select {
	case <-c.(*coalescing).ended:
	case <-time.After(time.Minute):
		t.Fatal("the writer is still in a system call a minute later")
	}
}

// Close while the writer is stuck in its system call and writes wait for
// room: the waiting writes are answered at once, Close gives the writer its
// stall and then closes the socket beneath it, and what was queued is not
// sent when the stuck call returns.
func TestCoalesceCloseEndsWaitingWritesAndAStuckWriter(t *testing.T) {
	g := newGated()
	c := Coalesce(g, g, 50*time.Millisecond)
	closeStuck(t, g, c, fillWhileWriting(t, g, c, 3), 3)
	g.mu.Lock()
	defer g.mu.Unlock()
	if got := fmt.Sprint(g.writes); got != "[first]" || g.calls != 1 {
		t.Errorf("%d system calls wrote %.40s, want [first] alone", g.calls, got)
	}
}

// The client's deadline bounds the writer's system call and Close too:
// amqp091-go's CloseDeadline sets it, and a peer that stopped reading must
// not hold the close for a whole stall (here an hour).
func TestCoalesceCloseKeepsTheClientsDeadline(t *testing.T) {
	g := newGated()
	c := Coalesce(g, g, time.Hour)
	answers := fillWhileWriting(t, g, c, 1)
	if err := c.SetDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	closeStuck(t, g, c, answers, 1)
}

// closeStuck closes c while its writer is stuck in g and n writes wait for
// room (their answers): each is answered net.ErrClosed, Close returns with
// the socket closed beneath the writer, and the writer then ends.
func closeStuck(t *testing.T, g *gated, c net.Conn, answers <-chan error, n int) {
	t.Helper()
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	for range n {
		if err := answer(t, answers); !errors.Is(err, net.ErrClosed) {
			t.Errorf("a write waiting for room answered %v when the connection closed, want net.ErrClosed", err)
		}
	}
	if err := answer(t, closed); err != nil {
		t.Fatal(err)
	}
	g.mu.Lock()
	socketClosed := g.closed
	g.mu.Unlock()
	if !socketClosed {
		t.Error("Close returned with the socket beneath a stuck writer open")
	}
	g.gate <- struct{}{} // the stuck call returns, as a closed socket's would
	ended(t, c)
}
