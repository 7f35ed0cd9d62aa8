package runtime

import (
	"context"
	"net"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/internal/quarantine"
	"github.com/lily-mq/lily/runtime/internal/transport"
)

// links hands consuming connections to sessions. A consumer's own give each
// session a connection of its own, so that a fault of one (a socket that
// stalls) stays with that session. A Publisher's are shared: every session
// of the consumers naming it leases the current connection, dialing it when
// there is none; one dial runs at a time, and every session waiting for it
// takes its outcome, so that a hundred consumers reconnecting after a loss
// open one connection, not a hundred.
type links struct {
	dialer *dialer
	shared bool
	mu     sync.Mutex
	// cur is the connection new sessions open their channels on; nil when
	// there is none, or it was passed over.
	cur *link
	// dialing is the dial under way, nil when none is.
	dialing *linkDial
}

// link is one consuming connection and the sessions using it.
type link struct {
	conn *amqp.Connection
	// filter is the connection's socket as the client reads it: it knows the
	// deliveries whose content header it had to replace.
	filter *quarantine.Conn
	// killed is closed before Lily closes the connection under its
	// sessions: each revokes its authority then, not once the close ends,
	// and none takes its channel's end for its own close.
	killed chan struct{}
	// node is the index in the dialer's URLs of the node it is on.
	node int
	// The rest is links.mu's.
	users  int
	passed bool // passed over once already
}

// linkDial is one dial and the sessions waiting for it.
type linkDial struct {
	done    chan struct{}
	waiting int // links.mu; the users the link starts with
	// stop ends the dial's ctx, once no one waits for it.
	stop context.CancelFunc
	l    *link
	err  error
}

// lease returns a connection to open a session's channel on and counts the
// caller as one of its users until release; reused says it was open
// already, not dialed for this lease. Waiting ends with ctx; the dial then
// goes on for the others. One no one waits for any more is stopped (the
// Credentials' ctx ends, no socket is dialed further), a lease after it
// dials anew, and a connection it opened all the same is closed.
func (ls *links) lease(ctx context.Context) (l *link, reused bool, err error) {
	ls.mu.Lock()
	if l := ls.cur; l != nil && !l.conn.IsClosed() {
		l.users++
		ls.mu.Unlock()
		return l, true, nil
	}
	d := ls.dialing
	if d == nil {
		dctx, stop := context.WithCancel(context.Background())
		d = &linkDial{done: make(chan struct{}), stop: stop}
		ls.dialing = d
		go ls.dial(dctx, d)
	}
	d.waiting++
	ls.mu.Unlock()
	select {
	case <-d.done:
	case <-ctx.Done():
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	select {
	case <-d.done:
		// The dial counted this lease among the link's users.
		return d.l, false, d.err
	default:
		if d.waiting--; d.waiting == 0 {
			d.stop()
			ls.dialing = nil
		}
		return nil, false, ctx.Err()
	}
}

func (ls *links) dial(ctx context.Context, d *linkDial) {
	defer d.stop()
	var filter *quarantine.Conn
	conn, _, node, err := ls.dialer.dial(ctx, "consume", func(conn, socket net.Conn) net.Conn {
		if ls.shared {
			conn = transport.Coalesce(conn, socket, ls.dialer.cfg.StepTimeout)
		}
		filter = quarantine.New(conn, frameSize)
		// What is quarantined is NACKed for the broker to dead-letter,
		// unless its x-death would crash the broker's dead-lettering.
		filter.BrokenXDeath()
		return filter
	})
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.dialing == d {
		ls.dialing = nil
	}
	d.err = err
	if err == nil {
		if d.waiting == 0 {
			// Everyone stopped waiting for it.
			go closeBy(conn, time.Now().Add(ls.dialer.cfg.StepTimeout))
		} else {
			d.l = &link{conn: conn, filter: filter, node: node, users: d.waiting, killed: make(chan struct{})}
			if ls.shared {
				ls.cur = d.l
			}
		}
	}
	close(d.done)
}

// release ends one session's use of l; the last user closes it, waiting for
// the broker's close-ok no later than by. A session whose channel may still
// be open holding deliveries (it consumed, and its close failed or did not
// end in time) closes it at once, under every other session on it: a
// channel that is neither closed nor read would hold its unacknowledged
// deliveries for as long as the connection lives.
func (ls *links) release(l *link, by time.Time, holding bool) {
	ls.mu.Lock()
	l.users--
	last := l.users == 0
	kill := holding && !closed(l.killed)
	if (last || kill) && ls.cur == l {
		ls.cur = nil
	}
	if kill {
		close(l.killed)
	}
	ls.mu.Unlock()
	switch {
	case last:
		closeBy(l.conn, by)
	case kill:
		// Under others, who were told by killed: within a step of its own,
		// since by may be spent, and a close past its deadline is never
		// written.
		go closeBy(l.conn, time.Now().Add(ls.dialer.cfg.StepTimeout))
	}
}

// passOver stops handing out l, which took a session it could not serve (a
// node cut off from its cluster's majority), and moves the next dial on from
// l's node to the next URL, once for each connection however many sessions
// failed on it, and only if no dial answered from another node, nor another
// connection was left, since. The sessions still on l stay on it until they
// end.
func (ls *links) passOver(l *link) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if l.passed {
		return
	}
	l.passed = true
	if ls.cur == l {
		ls.cur = nil
	}
	ls.dialer.leave(l.node)
}

// closeBy closes conn, waiting for the broker's close-ok no later than by: a
// peer that stopped reading must not hold up a session's end.
func closeBy(conn *amqp.Connection, by time.Time) {
	_ = conn.CloseDeadline(by)
}
