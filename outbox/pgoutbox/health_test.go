package pgoutbox_test

import (
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lily-mq/lily/outbox/pgoutbox"
	"github.com/lily-mq/lily/runtime"
)

// gate is a TCP proxy to target that can be shut: while shut it cuts every
// connection through it and closes each new one at once, as a server that
// went away would.
type gate struct {
	target string
	ln     net.Listener

	mu    sync.Mutex
	shut  bool
	conns []net.Conn
}

// newGate starts a gate to target, closed when the test ends.
func newGate(t *testing.T, target string) *gate {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{target: target, ln: ln}
	t.Cleanup(func() {
		_ = ln.Close()
		g.close(true)
	})
	go g.accept()
	return g
}

func (g *gate) accept() {
	for {
		c, err := g.ln.Accept()
		if err != nil {
			return
		}
		g.mu.Lock()
		shut := g.shut
		g.mu.Unlock()
		if shut {
			_ = c.Close()
			continue
		}
		s, err := net.Dial("tcp", g.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		g.mu.Lock()
		g.conns = append(g.conns, c, s)
		g.mu.Unlock()
		go func() { _, _ = io.Copy(s, c); _ = s.Close() }()
		go func() { _, _ = io.Copy(c, s); _ = c.Close() }()
	}
}

// close shuts the gate (or opens it, shut false), cutting what is open.
func (g *gate) close(shut bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.shut = shut
	if shut {
		for _, c := range g.conns {
			_ = c.Close()
		}
		g.conns = nil
	}
}

// port is the gate's port.
func (g *gate) port() int { return g.ln.Addr().(*net.TCPAddr).Port }

// Health tells what a probe needs of a relay: live while Run runs, ready
// once a look succeeded and while neither its database nor its publishes
// fail, why not, and when a row was last published and deleted.
func TestRelayHealthFollowsTheDatabaseAndTheBroker(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue("q", nil)

	cfg := e.pool.Config() // the test's search_path
	pg := newGate(t, net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))))
	cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Fallbacks = "127.0.0.1", uint16(pg.port()), nil
	pool, err := pgxpool.NewWithConfig(e.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	u, err := url.Parse(e.brokerURL)
	if err != nil {
		t.Fatal(err)
	}
	broker := newGate(t, u.Host)
	u.Host = "127.0.0.1:" + strconv.Itoa(broker.port())

	unused := e.publisher(u.String(), relayStep)
	t.Cleanup(unused.Close)
	idle := pgoutbox.NewRelay(pool, unused, pgoutbox.Options{})
	if h := idle.Health(); h.Live || h.Ready || h.Why != "not running" || h.Queue != "outbox lily_outbox" {
		t.Errorf("before Run: %+v", h)
	}

	relay, stop := e.relayWith(pool, e.publisher(u.String(), relayStep), pgoutbox.Options{Lease: relayLease, MaxBackoff: time.Second})
	health := func() runtime.Health { return relay.Health() }
	e.write(message(q, "first"))
	e.eventually("ready, and the first row published and deleted", func() bool {
		h := health()
		return h.Live && h.Ready && h.Why == "" && !h.LastSettled.IsZero() && len(e.rows()) == 0
	})
	if h := health(); !strings.HasPrefix(h.Queue, "outbox ") || !strings.HasSuffix(h.Queue, `.lily_outbox`) || h.IntakeStopped {
		t.Errorf("running: %+v", h)
	}

	pg.close(true)
	e.eventually("not ready while PostgreSQL is away", func() bool {
		h := health()
		return h.Live && !h.Ready && strings.HasPrefix(h.Why, "the database fails")
	})
	t.Logf("PostgreSQL away: %+v", health())
	pg.close(false)
	e.eventually("ready again once PostgreSQL is back", func() bool { h := health(); return h.Ready && h.Why == "" })

	broker.close(true)
	e.write(message(q, "second"))
	e.eventually("not ready while the broker is away", func() bool {
		h := health()
		return h.Live && !h.Ready && strings.HasPrefix(h.Why, "publishes fail")
	})
	t.Logf("broker away: %+v", health())
	settled := health().LastSettled
	broker.close(false)
	e.eventually("ready again once the broker is back, the second row published", func() bool {
		h := health()
		return h.Ready && h.Why == "" && h.LastSettled.After(settled) && len(e.rows()) == 0
	})

	rep := stop()
	h := health()
	if h.Live || h.Ready || h.Why != "Run returned" || !h.IntakeStopped || h.Queue != rep.Queue ||
		h.Unresolved != len(rep.PossibleCopies)+rep.Omitted {
		t.Errorf("after Run returned: %+v; report %s", h, rep)
	}
	if got := ids(e.take(q)); got["first"] == 0 || got["second"] == 0 {
		t.Errorf("queue holds %v", got)
	}
}

// A Run that fails at its start is not live, and says why.
func TestRelayHealthAfterRunFailed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if _, err := e.pool.Exec(e.ctx, "DROP TABLE lily_outbox"); err != nil {
		t.Fatal(err)
	}
	p := e.publisher(e.brokerURL, relayStep)
	t.Cleanup(p.Close)
	relay := pgoutbox.NewRelay(e.pool, p, pgoutbox.Options{Logger: e.logger()})
	if _, err := relay.Run(e.ctx); err == nil {
		t.Fatal("Run without the table did not fail")
	}
	if h := relay.Health(); h.Live || h.Ready || !strings.HasPrefix(h.Why, "Run failed: pgoutbox: relay: table lily_outbox does not exist") {
		t.Errorf("%+v", h)
	}
}
