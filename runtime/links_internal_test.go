package runtime

import (
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/runtime/internal/settle"
)

// Sessions that fail on one shared connection move the next dial on by one
// URL, however many they are: two such moves would bring it back to the
// node passed over.
func TestPassOverMovesOncePerConnection(t *testing.T) {
	ls := &links{dialer: &dialer{cfg: Config{URLs: []string{"amqp://a/", "amqp://b/", "amqp://c/"}}}, shared: true}
	first, second := &link{}, &link{}
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
	s = &session{gen: &settle.Generation{}, link: l, lost: make(chan struct{}), chEnded: make(chan struct{})}
	lines = new(int)
	s.lostAfterCancel = func(error) { *lines++ }
	chClosed, cancelled = make(chan *amqp.Error, 1), make(chan string, 1)
	go s.watch(chClosed, cancelled)
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
