package runtime

import (
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/runtime/internal/settle"
)

// Sessions that fail on one shared connection move the next dial on by one
// URL, however many they are: two such moves would bring it back to the
// node passed over.
func TestPassOverMovesOncePerConnection(t *testing.T) {
	ls := &links{dialer: &dialer{cfg: Config{URLs: []string{"amqp://a/", "amqp://b/", "amqp://c/"}}}, shared: true}
	first, second := &link{node: 0}, &link{node: 1} // second dialed after first was passed over
	ls.cur = first
	ls.passOver(first)
	ls.passOver(first)
	if n := ls.dialer.node.Load(); n != 1 || ls.cur != nil {
		t.Errorf("after two sessions failed on the first connection: node %d, current %v; want node 1, none", n, ls.cur)
	}
	ls.passOver(second)
	if n := ls.dialer.node.Load(); n != 2 {
		t.Errorf("after a session failed on the second connection: node %d, want 2", n)
	}
}

// watched starts a session's watcher on channels the test drives, and
// counts the loss lines it reports after a consumer cancel.
func watched(t *testing.T) (s *session, l *link, chClosed chan *amqp.Error, cancelled chan string, lines *int) {
	t.Helper()
	l = &link{killed: make(chan struct{})}
	s = &session{gen: &settle.Generation{}, link: l, tag: "lily-q", lost: make(chan struct{}), chEnded: make(chan struct{})}
	lines = new(int)
	s.lostAfterCancel = func(error) { *lines++ }
	chClosed, cancelled = make(chan *amqp.Error, 1), make(chan string, 1)
	go s.watch(chClosed, cancelled, func(tag string) { t.Errorf("the session's own cancel (%q) told as another's", tag) })
	cancelled <- "lily-q"
	<-s.lost
	return s, l, chClosed, cancelled, lines
}

// Lily closing a cancelled session's connection under it is a loss,
// reported once, and proves none of its ACKs; once the session was given up
// (its end judged, its connection released), the close it caused itself
// reports nothing more.
func TestWatchKilledConnection(t *testing.T) {
	s, l, chClosed, _, lines := watched(t)
	close(l.killed)
	close(chClosed) // the connection's close, without an error
	<-s.chEnded
	if *lines != 1 || s.chErr == nil || !s.gen.Revoked() {
		t.Errorf("killed under a live session: %d loss lines, channel error %v, revoked %v; want 1, an error, revoked", *lines, s.chErr, s.gen.Revoked())
	}

	s, l, chClosed, _, lines = watched(t)
	s.released.Store(true)
	close(l.killed)
	close(chClosed)
	<-s.chEnded
	if *lines != 0 || s.chErr == nil || !s.gen.Revoked() {
		t.Errorf("killed by the session's own release: %d loss lines, channel error %v, revoked %v; want none, an error, revoked", *lines, s.chErr, s.gen.Revoked())
	}
}

// The watcher reads every cancel of its consumer until the channel closes,
// not the first alone: amqp091 sends each from the connection's reader,
// which would wait on one it could not hand over. A repeat tells nothing
// more.
func TestWatchReadsEveryCancel(t *testing.T) {
	s, _, chClosed, cancelled, lines := watched(t)
	for i := range 4 {
		select {
		case cancelled <- "lily-q":
		case <-time.After(10 * time.Second):
			t.Fatalf("repeated cancel %d not read", i+1)
		}
	}
	s.closing.Store(true)
	close(cancelled)
	close(chClosed) // our own close
	<-s.chEnded
	if *lines != 0 || s.why != errCancelled || s.chErr != nil {
		t.Errorf("after repeated cancels: %d loss lines, why %v, channel error %v; want none, the cancel, none", *lines, s.why, s.chErr)
	}
}

// A channel closed with a 406 is told as the broker's consumer_timeout only
// when its reply text is RabbitMQ's for it (the same from 3.10 to 4.2):
// not for any 406 that says "timeout".
func TestBrokeTellsTheConsumerTimeoutByItsText(t *testing.T) {
	for _, c := range []struct {
		reason  string
		timeout bool
	}{
		{"PRECONDITION_FAILED - delivery acknowledgement on channel 1 timed out. Timeout value used: 1800000 ms. " +
			"This timeout value can be configured, see consumers doc guide to learn more", true},
		{"PRECONDITION_FAILED - delivery acknowledgement on channel 2047 timed out. Timeout value used: 1000 ms.", true},
		{"PRECONDITION_FAILED - inequivalent arg 'x-consumer-timeout' for queue 'q' in vhost '/'", false},
		{"PRECONDITION_FAILED - timeout", false},
		{"PRECONDITION_FAILED - unknown delivery tag 1", false},
	} {
		s := &session{gen: &settle.Generation{}, lost: make(chan struct{})}
		s.broke(&amqp.Error{Code: amqp.PreconditionFailed, Reason: c.reason, Server: true})
		if got := strings.Contains(s.why.Error(), "consumer_timeout"); got != c.timeout {
			t.Errorf("%q told as %q; consumer_timeout %v, want %v", c.reason, s.why, got, c.timeout)
		}
	}
}

// A consumer without a Publisher dials its consuming and its handoff
// connections through one dialer. Its consuming connection is on node a
// when a handoff connection on a goes silent and is left: the next dial
// moves to b. The consuming session's open on a then fails and passes its
// connection over: that moves on from a, where the connection is, not from
// where the dialer stands now, so the next dial does not go back to a.
func TestPassOverMovesOnFromTheLinksNode(t *testing.T) {
	d := &dialer{cfg: Config{URLs: []string{"amqp://a/", "amqp://b/"}}}
	ls := &links{dialer: d}
	onA := &link{node: 0}
	d.leave(0) // the handoff connection on a went silent
	ls.passOver(onA)
	if n := d.node.Load(); n != 1 {
		t.Errorf("after a was left and a connection on it passed over: node %d, want 1 (b)", n)
	}

	three := &dialer{cfg: Config{URLs: []string{"amqp://a/", "amqp://b/", "amqp://c/"}}}
	ls = &links{dialer: three}
	onA = &link{node: 0}
	three.leave(0)
	ls.passOver(onA)
	if n := three.node.Load(); n != 1 {
		t.Errorf("three URLs, after a was left and a connection on it passed over: node %d, want 1 (b, not skipped)", n)
	}
}
