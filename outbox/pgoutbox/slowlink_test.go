package pgoutbox_test

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lily-mq/lily/internal/faults"
	"github.com/lily-mq/lily/outbox/pgoutbox"
	"github.com/lily-mq/lily/runtime"
)

// The relay on a slow link from PostgreSQL: large bodies, a body too large
// to read in time, a look cut short.

// slowLink is a TCP proxy to the test's PostgreSQL whose server-to-client
// direction carries at most rate bytes a second on each connection (no
// bound when 0), and which can stall: hold what the server sent, the server
// finishing its statements meanwhile (what it sends then fits in the
// sockets' buffers).
type slowLink struct {
	pool *pgxpool.Pool // the test's schema, through the link
	rate int

	mu sync.Mutex
	// trap stalls at the answer that shows its last marker, on a connection
	// whose answers showed the others before, in order: every connection
	// until resume when all, else that one (holder) until its client sends
	// anything (it gave up waiting).
	trap    [][]byte
	all     bool
	holder  net.Conn
	stalled bool
	// hold holds what a client sends, from the write that shows it on, on
	// that connection (holding) until release.
	hold    []byte
	holding net.Conn
}

// slowLink starts a link to the test's PostgreSQL, closed when the test
// ends, and a pool on the test's schema through it.
func (e *env) slowLink(rate int) *slowLink {
	e.t.Helper()
	cfg := e.pool.Config() // the test's search_path
	target := net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port)))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = l.Close() })
	link := &slowLink{rate: rate}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			go link.send(c, s)
			go link.carry(c, s)
		}
	}()
	cfg.ConnConfig.Host = "127.0.0.1"
	cfg.ConnConfig.Port = uint16(l.Addr().(*net.TCPAddr).Port)
	cfg.ConnConfig.Fallbacks = nil
	pool, err := pgxpool.NewWithConfig(e.ctx, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(pool.Close)
	link.pool = pool
	return link
}

// stallAt arms the link's trap: it stalls at the answer that shows the last
// of markers on a connection whose earlier answers showed the others, in
// order; every connection until resume when all, else that one until its
// client sends anything.
func (link *slowLink) stallAt(all bool, markers ...string) {
	link.mu.Lock()
	defer link.mu.Unlock()
	link.trap, link.all = nil, all
	for _, m := range markers {
		link.trap = append(link.trap, []byte(m))
	}
}

// resume ends a stall.
func (link *slowLink) resume() {
	link.mu.Lock()
	defer link.mu.Unlock()
	link.trap, link.stalled, link.holder = nil, false, nil
}

// holdAt holds what a client sends, from its write that shows marker on,
// on that connection, until release.
func (link *slowLink) holdAt(marker string) {
	link.mu.Lock()
	defer link.mu.Unlock()
	link.hold = []byte(marker)
}

// held reports whether the link holds what a client sends.
func (link *slowLink) held() bool {
	link.mu.Lock()
	defer link.mu.Unlock()
	return link.holding != nil
}

// release ends a hold: what the client sent goes on to the server.
func (link *slowLink) release() {
	link.mu.Lock()
	defer link.mu.Unlock()
	link.hold, link.holding = nil, nil
}

// send copies what the client sends to the server, holding it while the
// link holds this connection. A stall of this connection alone ends when
// the client sends anything: it gave up waiting.
func (link *slowLink) send(c, s net.Conn) {
	defer func() { _ = s.Close() }()
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		link.mu.Lock()
		if !link.all && link.holder == c {
			link.stalled, link.holder = false, nil
		}
		if link.hold != nil && bytes.Contains(buf[:n], link.hold) {
			link.hold, link.holding = nil, c
		}
		link.mu.Unlock()
		for link.holds(c) {
			time.Sleep(10 * time.Millisecond)
		}
		if n > 0 {
			if _, werr := s.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// holds reports whether the link holds what c sends.
func (link *slowLink) holds(c net.Conn) bool {
	link.mu.Lock()
	defer link.mu.Unlock()
	return link.holding == c
}

// carry copies what the server sends to the client, at the link's rate,
// holding it while the link is stalled.
func (link *slowLink) carry(c, s net.Conn) {
	defer func() { _ = c.Close(); _ = s.Close() }()
	buf := make([]byte, 64<<10)
	seen := 0 // the trap's markers this connection showed
	for {
		n, err := s.Read(buf)
		link.mu.Lock()
		if trap := link.trap; seen < len(trap) && bytes.Contains(buf[:n], trap[seen]) {
			if seen++; seen == len(trap) {
				link.trap, link.holder, link.stalled = nil, c, true
			}
		}
		link.mu.Unlock()
		for {
			link.mu.Lock()
			stalled := link.stalled && (link.all || link.holder == c)
			link.mu.Unlock()
			if !stalled {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if n > 0 {
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
			if link.rate > 0 {
				time.Sleep(time.Duration(n) * time.Second / time.Duration(link.rate))
			}
		}
		if err != nil {
			return
		}
	}
}

// logBuffer is what a relay logs, for a test to wait for a record.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// loggerTo logs warnings and errors to the test's output and to b.
func (e *env) loggerTo(b *logBuffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(io.MultiWriter(e.t.Output(), b), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// leasedUntried counts the rows leased and never tried: each is either in
// a send of a running relay, or held for nothing until its lease ends.
func (e *env) leasedUntried() int {
	e.t.Helper()
	var n int
	if err := e.pool.QueryRow(e.ctx, "SELECT count(*) FROM lily_outbox WHERE attempts = 0 AND lease_until > now()").Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// keyed is m with order key k.
func keyed(m runtime.Message, k string) runtime.Message {
	m.OrderKey = k
	return m
}

// A look whose answer the link holds past the statement's bound leases
// nothing: the rows it would have leased are not left leased, untried and
// unsent until their lease ends (the look committed as the server sent its
// answer, and the relay dropped the rows). Once the link carries again,
// every row goes, long before a lease would have ended.
func TestALookCutShortLeasesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q, link, log, stop := e.relayBehindALink()

	link.stallAt(true, `"m-0"`) // at the answer of the look that leases the rows
	msgs, written := messages(q, "m-", 10)
	for i := range msgs[:5] {
		msgs[i].OrderKey = "k"
	}
	e.write(msgs...)
	e.eventually("a look cut short", func() bool { return strings.Contains(log.String(), "step=lease") })
	if n := e.leasedUntried(); n != 0 {
		t.Errorf("%d rows leased, untried and unsent after the look was cut short; want none", n)
	}

	link.resume()
	e.publishedOnce(stop, q, written)
}

// A look whose commit's answer is lost (the link holds it past the
// statement's bound) may have leased its rows: the relay releases them, and
// every row goes long before its lease would have ended.
func TestALookWhoseCommitIsLostReleasesItsRows(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q, link, log, stop := e.relayBehindALink()

	// The commit of the look that leases the rows, until the relay gives
	// up that connection.
	link.stallAt(false, `"m-0"`, "COMMIT\x00")
	msgs, written := messages(q, "m-", 10)
	e.write(msgs...)
	e.eventually("a look's commit lost", func() bool { return strings.Contains(log.String(), "step=lease") })
	e.publishedOnce(stop, q, written)
}

// relayBehindALink starts a relay whose connections to PostgreSQL go
// through a link of the test's own, leasing for 10 minutes, and waits for
// its first row to go, so that its connections are open. It returns the
// relay's queue, the link, the relay's log and its stop.
func (e *env) relayBehindALink() (q string, link *slowLink, log *logBuffer, stop func() *runtime.Report) {
	q = e.queue("q", nil)
	link = e.slowLink(0)
	log = &logBuffer{}
	_, stop = e.relayOn(link.pool, e.brokerURL, 2*time.Second, pgoutbox.Options{Poll: 20 * time.Millisecond, Lease: 10 * time.Minute, Logger: e.loggerTo(log)})
	e.write(message(q, "first"))
	e.eventually("the first row published", func() bool { return len(e.rows()) == 0 })
	return q, link, log, stop
}

// publishedOnce waits for every row to go, stops the relay, and checks that
// its report and q hold the first row and written, each once.
func (e *env) publishedOnce(stop func() *runtime.Report, q string, written []string) {
	e.t.Helper()
	e.eventually("every row published", func() bool { return len(e.rows()) == 0 })
	rep := stop()
	if c := counts(rep); c["published"] != len(written)+1 || len(c) != 1 {
		e.t.Errorf("report counts %v", rep.Counts)
	}
	want := map[string]int{"first": 1}
	for _, id := range written {
		want[id] = 1
	}
	if got := ids(e.take(q)); !cmp.Equal(got, want) {
		e.t.Errorf("queue %s holds %v, want %v", q, got, want)
	}
}

// 52 MiB of bodies over a link that carries 4 MiB a second from
// PostgreSQL: one row of 40 MiB and 24 of 512 KiB, some of them keyed, and
// small rows. A look that returned every body would need 13 s, past the
// statement's bound, at every look; each row arrives, its body intact, and
// no look fails. (The 40 MiB message has a queue of its own, only counted:
// taking it back is slow enough, on a loaded machine, for the broker to
// drop the test's connection.)
func TestLargeBodiesCrossASlowLink(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q, hugeQ := e.queue("q", nil), e.queue("huge", nil)
	huge := message(hugeQ, "huge")
	huge.Body = bytes.Repeat([]byte{'h'}, 40<<20)
	e.write(huge)
	want := map[string][]byte{}
	var msgs []runtime.Message
	for i := range 24 {
		m := message(q, fmt.Sprint("half-", i))
		m.Body = bytes.Repeat([]byte{byte('a' + i)}, 512<<10)
		if i%3 == 0 {
			m.OrderKey = "k"
		}
		msgs = append(msgs, m)
	}
	for i := range 5 {
		msgs = append(msgs, keyed(message(q, fmt.Sprint("small-", i)), fmt.Sprint("s", i%2)), message(q, fmt.Sprint("free-", i)))
	}
	for _, m := range msgs {
		want[m.MessageId] = m.Body
	}
	e.write(msgs...)

	link := e.slowLink(4 << 20)
	var log logBuffer
	_, stop := e.relayOn(link.pool, e.brokerURL, 2*time.Second, pgoutbox.Options{Logger: e.loggerTo(&log)})
	for deadline := time.Now().Add(2 * time.Minute); len(e.rows()) > 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d rows left after 2 minutes; the relay logged:\n%s", len(e.rows()), log.String())
		}
	}
	rep := stop()
	if c := counts(rep); c["published"] != 35 || len(c) != 1 {
		t.Errorf("report counts %v", rep.Counts)
	}
	if n := e.ready(hugeQ); n != 1 {
		t.Errorf("queue %s holds %d messages, want the huge one", hugeQ, n)
	}
	got := e.take(q)
	for _, d := range got {
		body, ok := want[d.MessageId]
		if !ok {
			t.Errorf("%s arrived, and not once", d.MessageId)
		} else if !bytes.Equal(d.Body, body) { // cmp.Equal takes minutes with -race
			t.Errorf("%s arrived with a body of %d bytes, changed", d.MessageId, len(d.Body))
		}
		delete(want, d.MessageId)
	}
	if len(want) != 0 {
		t.Errorf("queue %s holds %d messages; missing %d", q, len(got), len(want))
	}
	if strings.Contains(log.String(), "step=lease") {
		t.Errorf("the relay's looks failed:\n%s", log.String())
	}
}

// A row whose body the link cannot carry within its read's bound (4 MiB at
// 128 KiB a second) fails as a publish fails: it shows attempts and why,
// its lease ends, and it holds back only the later rows of its key. The
// rows without a key and those of other keys go.
func TestABodyTooSlowToReadFailsAlone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue("q", nil)
	slow := keyed(message(q, "slow"), "k")
	slow.Body = bytes.Repeat([]byte{'s'}, 4<<20)
	e.write(slow, keyed(message(q, "k-next"), "k"))
	msgs := []runtime.Message{keyed(message(q, "other"), "o")}
	for i := range 5 {
		msgs = append(msgs, message(q, fmt.Sprint("free-", i)))
	}
	e.write(msgs...)

	link := e.slowLink(128 << 10)
	var log logBuffer
	_, stop := e.relayOn(link.pool, e.brokerURL, 2*time.Second, pgoutbox.Options{Poll: 20 * time.Millisecond, Logger: e.loggerTo(&log)})
	e.eventually("the rows beside the slow one published, the slow one failed", func() bool {
		rows := e.rows()
		return len(rows) == 2 && rows["slow"].Attempts >= 1
	})
	rows := e.rows()
	if r := rows["slow"]; !strings.Contains(r.LastError, "could not be read") {
		t.Errorf("row slow: last_error %q", r.LastError)
	}
	if r := rows["k-next"]; r.Attempts != 0 || r.Leaser != "" {
		t.Errorf("row k-next went before the row before it: %+v", r)
	}
	if n := e.leasedUntried(); n != 0 {
		t.Errorf("%d rows leased and never tried", n)
	}
	rep := stop()
	if c := counts(rep); c["published"] != 6 || c["failed"] < 1 || len(c) != 2 {
		t.Errorf("report counts %v", rep.Counts)
	}
	want := map[string]int{"other": 1}
	for i := range 5 {
		want[fmt.Sprint("free-", i)] = 1
	}
	if got := ids(e.take(q)); !cmp.Equal(got, want) {
		t.Errorf("queue %s holds %v, want %v", q, got, want)
	}
}

// A relay whose delete of a confirmed row the link holds past the row's
// lease (a database that stalls, a connection that hangs), while another
// relay leases the row, publishes it again and deletes it: the first
// relay's delete finds the row gone, and its report lists the message as a
// possible copy, with a warning. Before, that delete deleted nothing without
// a word: both reports said published, the queue held the message twice,
// and nothing above debug level told of it.
func TestADeleteAfterTheLeaseEndedIsAPossibleCopy(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue("relay", nil)
	link := e.slowLink(0)
	var logA logBuffer
	opts := pgoutbox.Options{Poll: 20 * time.Millisecond, Lease: 3 * time.Second, Logger: e.loggerTo(&logA)}
	_, stopA := e.relayOn(link.pool, e.brokerURL, 500*time.Millisecond, opts)
	link.holdAt("DELETE FROM")
	e.write(message(q, "twice"))
	e.eventually("relay A's delete held", link.held)
	e.eventually("relay A's lease ended", func() bool {
		var ended bool
		if err := e.pool.QueryRow(e.ctx, "SELECT lease_until <= now() FROM lily_outbox").Scan(&ended); err != nil {
			t.Fatal(err)
		}
		return ended
	})

	opts.Logger = nil
	_, stopB := e.relayOn(e.pool, e.brokerURL, 500*time.Millisecond, opts)
	e.eventually("relay B deleted the row", func() bool { return len(e.rows()) == 0 })
	link.release()
	repA, repB := stopA(), stopB() // A's stop waits for its delete's answer

	if got := ids(e.take(q)); !cmp.Equal(got, map[string]int{"twice": 2}) {
		t.Errorf("queue %s holds %v, want twice twice", q, got)
	}
	for name, rep := range map[string]*runtime.Report{"A": repA, "B": repB} {
		if c := counts(rep); !cmp.Equal(c, map[runtime.Path]int{"published": 1}) {
			t.Errorf("relay %s: report counts %v", name, c)
		}
	}
	if len(repA.PossibleCopies) != 1 || repA.PossibleCopies[0].MessageID != "twice" ||
		!strings.Contains(repA.PossibleCopies[0].Reason, "lease ended") {
		t.Errorf("relay A: possible copies %+v, want twice, its lease ended", repA.PossibleCopies)
	}
	if !strings.Contains(logA.String(), "stage=lease-lost") {
		t.Errorf("relay A logged no lost lease:\n%s", logA.String())
	}
}

// A relay whose delete of a confirmed row the link holds past the row's
// lease, while another relay has leased the row again and its publish is
// held on its way to the broker: the first relay's delete leaves the row,
// which the other relay holds, and the next row of its key stays behind it.
// The other relay's copy lands, that relay deletes the row, and only then
// does the next row of the key go: the queue holds the first message twice,
// both before the second. The first relay's report lists the message as a
// possible copy, its row left to the other relay. Before, the late delete
// took the row from under the other relay's lease and let the key's next
// row go: the queue held k1, k2, k1, the order of the key broken.
func TestADeleteAfterTheLeaseLeavesARowLeasedAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue("relay", nil)
	link := e.slowLink(0)
	var logA logBuffer
	_, stopA := e.relayOn(link.pool, e.brokerURL, 500*time.Millisecond,
		pgoutbox.Options{Poll: 20 * time.Millisecond, Lease: 3 * time.Second, Logger: e.loggerTo(&logA)})
	link.holdAt("DELETE FROM")
	e.write(keyed(message(q, "k1"), "key"), keyed(message(q, "k2"), "key"))
	e.eventually("relay A's delete of k1 held", link.held)
	leased := func() (leased bool) {
		err := e.pool.QueryRow(e.ctx, "SELECT coalesce(lease_until > now(), false) FROM lily_outbox WHERE properties->>'message_id' = 'k1'").Scan(&leased)
		if err != nil {
			t.Fatal(err)
		}
		return leased
	}
	e.eventually("relay A's lease of k1 ended", func() bool { return !leased() })

	// Relay B's publisher opens its connection through the proxy, which
	// then holds what B sends: B leases k1 again, and its publish waits.
	proxy, url := e.proxy()
	pB := e.publisher(url, relayStep)
	if err := pB.Send(e.ctx, message(e.queue("warm", nil), "warm")); err != nil {
		t.Fatal(err)
	}
	var publishing atomic.Bool
	proxy.Intercept(func(f faults.Frame) faults.Action {
		if f.Dir == faults.ToBroker && f.Is(faults.BasicPublish) {
			publishing.Store(true)
		}
		return faults.Forward
	})
	proxy.Stall(faults.ToBroker)
	// A Poll of a minute: B looks once, and again only once it deleted a
	// row of the key.
	_, stopB := e.relayWith(e.pool, pB, pgoutbox.Options{Poll: time.Minute, Lease: relayLease})
	e.eventually("relay B leased k1 and its publish is on its way", func() bool { return leased() && publishing.Load() })

	link.release()
	e.eventually("relay A's delete answered", func() bool { return strings.Contains(logA.String(), "stage=lease-lost") })
	// Relay A looks every 20 ms meanwhile: k2 must wait for k1.
	for range 50 {
		time.Sleep(20 * time.Millisecond)
		if r := e.rows(); len(r) != 2 || !leased() {
			t.Errorf("with relay B's publish of k1 on its way, the table holds %v; want k1, leased by B, and k2", r)
			break
		}
	}
	proxy.Resume()
	e.eventually("every row published", func() bool { return len(e.rows()) == 0 })
	repA, repB := stopA(), stopB()

	var got []string
	for _, d := range e.take(q) {
		got = append(got, d.MessageId)
	}
	if want := []string{"k1", "k1", "k2"}; !slices.Equal(got, want) {
		t.Errorf("queue %s holds %v; want %v: k1's copy before k2", q, got, want)
	}
	if a, b := counts(repA), counts(repB); a["published"]+b["published"] != 3 || len(a) > 1 || len(b) > 1 {
		t.Errorf("report counts: relay A %v, relay B %v; want 3 published in all", a, b)
	}
	if len(repA.PossibleCopies) != 1 || repA.PossibleCopies[0].MessageID != "k1" ||
		!strings.Contains(repA.PossibleCopies[0].Reason, "left to that relay") {
		t.Errorf("relay A: possible copies %+v, want k1, its row left to the relay that leased it", repA.PossibleCopies)
	}
	if len(repB.PossibleCopies) != 0 {
		t.Errorf("relay B: possible copies %+v, want none: it deleted k1 itself", repB.PossibleCopies)
	}
}
