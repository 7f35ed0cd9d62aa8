package runtime_test

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/internal/faults"
	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/topology"
)

// publishRouted publishes msg to exchange, mandatory, until the broker
// routes it to a queue rather than return it: until a binding is there.
func publishRouted(t *testing.T, exchange string, msg amqp.Publishing) {
	t.Helper()
	ch := channel(t, dial(t))
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	returns := ch.NotifyReturn(make(chan amqp.Return, 1))
	eventually(t, 2*time.Minute, "a binding from "+exchange+" to route "+msg.MessageId, func() bool {
		dc, err := ch.PublishWithDeferredConfirm(exchange, "", true, false, msg)
		if err != nil || !dc.Wait() {
			t.Fatalf("publish to %s: %v, not confirmed", exchange, err)
		}
		select {
		case <-returns: // the Return comes before the confirm
			time.Sleep(100 * time.Millisecond)
			return false
		default:
			return true
		}
	})
}

// consumingFromOtherTeams runs a consumer of a queue bound to another team's
// fanout exchange, which declares its topology again every 300 ms, and sees
// a message sent to the exchange handled.
func consumingFromOtherTeams(t *testing.T) (exchange string, q runtime.QueueSpec, r *running, c *runtime.Consumer) {
	t.Helper()
	exchange, q = boundToOtherTeams(t, "lilytest.drift.")
	r, c = prepare(t, q, ack)
	c.SetTopologyEvery(300 * time.Millisecond)
	r.launch(c)
	publishTo(t, exchange, "", order(t, "before"))
	r.await(1)
	return exchange, q, r, c
}

// An owner that deletes its exchange and declares it again (the way to
// change its type or arguments) leaves it without the binding to our queue.
// The consuming session declares the topology again and binds it again,
// without a reconnect: a message sent to the exchange afterwards reaches the
// queue and is handled.
func TestBrokerExchangeDeclaredAgainIsBoundAgain(t *testing.T) {
	t.Parallel()
	exchange, q, r, _ := consumingFromOtherTeams(t)
	deleteExchanges(t, exchange)
	otherTeamsExchange(t, exchange, topology.Fanout)
	publishRouted(t, exchange, order(t, "after"))
	if rec := r.await(2)[1]; rec.MessageID != "after" || rec.Path != runtime.PathAcked {
		t.Errorf("after the exchange was declared again: %+v", rec)
	}
	if n := len(slices.DeleteFunc(r.events.all(), func(ev event) bool { return ev.stage != "connected" })); n != 1 {
		t.Errorf("%d sessions; the binding was to come back on the first", n)
	}
	r.stop()
	assertCounts(t, map[string][2]int{q.Name: {0, 0}})
}

// An external exchange deleted under a consuming session is told, at error
// and in Health, when the topology is declared again; the queue is consumed
// on meanwhile, and once the owner has declared the exchange anew its
// binding comes back and Health says nothing more.
func TestBrokerExternalExchangeDeletedWhileConsuming(t *testing.T) {
	t.Parallel()
	exchange, q, r, c := consumingFromOtherTeams(t)
	deleteExchanges(t, exchange)
	eventually(t, 2*time.Minute, "Health to say the topology is refused", func() bool {
		h := c.Health()
		return h.Ready && strings.Contains(h.Why, "consuming, but the broker refused the topology when it was declared again")
	})
	if !r.events.has(func(ev event) bool {
		return ev.stage == "topology-drifted" && ev.level == slog.LevelError && strings.Contains(ev.detail, "external exchange or queue does not exist")
	}) {
		t.Error("no topology-drifted event at error")
	}
	publish(t, q.Name, order(t, "during"))
	if rec := r.await(2)[1]; rec.MessageID != "during" || rec.Path != runtime.PathAcked {
		t.Errorf("while the exchange was gone: %+v", rec)
	}
	otherTeamsExchange(t, exchange, topology.Fanout)
	eventually(t, 2*time.Minute, "Health to say nothing more", func() bool { h := c.Health(); return h.Ready && h.Why == "" })
	if !r.events.has(func(ev event) bool { return ev.stage == "topology-mended" && ev.level == slog.LevelInfo }) {
		t.Error("no topology-mended event at info")
	}
	publishRouted(t, exchange, order(t, "after"))
	if rec := r.await(3)[2]; rec.MessageID != "after" || rec.Path != runtime.PathAcked {
		t.Errorf("after the exchange came back: %+v", rec)
	}
	rep := r.stop()
	if slices.ContainsFunc(rep.Lost, func(why string) bool { return strings.Contains(why, "does not exist") }) {
		t.Errorf("report's lost intake %q holds the refusal; intake was never lost", rep.Lost)
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}})
}

// A queue is bound to two other teams' exchanges, X and Y. X's owner deletes
// it: the declare while consuming is refused, and told. Y's owner then
// deletes Y and declares it again, which drops our binding from Y. The
// refusal of X does not keep the rest of the topology from being declared
// again: the binding from Y comes back on the same session, a message sent
// to Y is handled, and Health and the topology-drifted line name X, not Y.
func TestBrokerOneExchangeMissingLeavesTheOthersBound(t *testing.T) {
	t.Parallel()
	x, y, q := boundToTwoTeams(t)
	r, c := prepare(t, q, ack)
	c.SetTopologyEvery(300 * time.Millisecond)
	r.launch(c)
	publishTo(t, y, "", order(t, "before"))
	r.await(1)

	deleteExchanges(t, x)
	awaitDrift(t, c, x)
	deleteExchanges(t, y)
	otherTeamsExchange(t, y, topology.Fanout)
	publishRouted(t, y, order(t, "after"))
	if rec := r.await(2)[1]; rec.MessageID != "after" || rec.Path != runtime.PathAcked {
		t.Errorf("after Y was declared again: %+v", rec)
	}
	if h := c.Health(); !h.Ready || !strings.Contains(h.Why, x) || strings.Contains(h.Why, y) {
		t.Errorf("Health %+v; want ready, naming %s alone", h, x)
	}
	if !r.events.has(func(ev event) bool {
		return ev.stage == "topology-drifted" && ev.level == slog.LevelError && strings.Contains(ev.detail, x)
	}) {
		t.Error("no topology-drifted event naming X")
	}
	if n := len(slices.DeleteFunc(r.events.all(), func(ev event) bool { return ev.stage != "connected" })); n != 1 {
		t.Errorf("%d sessions; the binding was to come back on the first", n)
	}
	rep := r.stop()
	if len(rep.Lost) != 0 {
		t.Errorf("report's lost intake %q; intake was never lost", rep.Lost)
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, q.Topology.DeadLetterQueue: {0, 0}})
}

// A queue is bound to two other teams' exchanges, X and Y. X's owner deletes
// it: the declare while consuming tells it, and the queue is consumed on.
// Then the connection drops (a node restart, a network blip: here cut at a
// proxy). The reconnect's declare meets X's 404 too, and goes on past it,
// as the declare while consuming does: the new session consumes, a message
// sent to Y is handled, and Health stays ready, naming X. One team's
// deletion stops no queue at a reconnect.
func TestBrokerExchangeMissingAtReconnectIsConsumedPast(t *testing.T) {
	t.Parallel()
	x, y, q := boundToTwoTeams(t)
	p := newProxy(t)
	r, c := prepare(t, q, ack, through(p), func(cfg *runtime.Config) { cfg.ReconnectMax = time.Second })
	c.SetTopologyEvery(300 * time.Millisecond)
	r.launch(c)
	publishTo(t, y, "", order(t, "before"))
	r.await(1)

	deleteExchanges(t, x)
	awaitDrift(t, c, x)
	p.cut()
	eventually(t, time.Minute, "a session opened after the cut", func() bool { return r.reconnects() >= 1 })
	publishRouted(t, y, order(t, "after"))
	if rec := r.await(2)[1]; rec.MessageID != "after" || rec.Path != runtime.PathAcked {
		t.Errorf("after the reconnect: %+v", rec)
	}
	if h := c.Health(); !h.Ready || !strings.Contains(h.Why, "refused the topology when it was declared again") || !strings.Contains(h.Why, x) || strings.Contains(h.Why, y) {
		t.Errorf("Health %+v; want ready, naming %s alone", h, x)
	}
	if r.events.has(func(ev event) bool { return ev.stage == "topology-refused" }) {
		t.Error("the reconnect was refused; X's absence was to be passed over")
	}
	rep := r.stop()
	if slices.ContainsFunc(rep.Lost, func(why string) bool { return strings.Contains(why, "does not exist") }) {
		t.Errorf("report's lost intake %q holds X's absence; intake was lost only to the cut", rep.Lost)
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, q.Topology.DeadLetterQueue: {0, 0}})
}

// A session that opens after the consumer has consumed goes on past an
// external exchange found missing, and past nothing else: with X missing,
// an owned exchange declared otherwise (a 406) or an external queue
// missing (a 404) still stops the declare, and fails the open with an
// error that names X too.
func TestBrokerAtReconnectOnlyAMissingExchangeIsPassed(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		tweak func(t *testing.T, q *runtime.QueueSpec)
		want  string
		code  int
	}{
		{"an owned exchange's 406", func(t *testing.T, q *runtime.QueueSpec) {
			owned := "lilytest.drift.owned." + strings.ReplaceAll(t.Name(), "/", ".")
			otherTeamsExchange(t, owned, topology.Topic) // declared otherwise than ours
			q.Topology.Exchanges = append(q.Topology.Exchanges, topology.Exchange{Name: owned, Type: topology.Fanout, Durable: true})
		}, "declare exchange lilytest.drift.owned.", amqp.PreconditionFailed},
		{"an external queue missing", func(t *testing.T, q *runtime.QueueSpec) {
			q.Topology.External = true
		}, "declare queue ", amqp.NotFound},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			x := "lilytest.drift.x." + strings.ReplaceAll(t.Name(), "/", ".")
			q := brokerSpec(t, func(q *runtime.QueueSpec) {
				q.Topology.Exchanges = []topology.Exchange{{Name: x, Type: topology.Fanout, External: true}}
				q.Topology.Bindings = []topology.Binding{{Source: x}}
			})
			c.tweak(t, &q)
			refusals, err := runtime.DeclareTopologyAtReconnect(dial(t), q)
			var ae *amqp.Error
			if !errors.As(err, &ae) || ae.Code != c.code || !strings.HasPrefix(err.Error(), c.want) {
				t.Errorf("declared at a reconnect: %v; want the %d of %q", err, c.code, c.want)
			}
			// The open fails, and its error names X too: both wait for
			// their owners.
			if refusals != nil || !strings.Contains(err.Error(), "; and before it, declare exchange "+x+": ") {
				t.Errorf("declared at a reconnect: %v, %v passed; want X's refusal named in the error", err, refusals)
			}
		})
	}
}

// Declared again while consuming, the topology goes on past each refusal,
// on a new channel after each (a refusal closes the channel): an external
// exchange that does not exist, an owned exchange and the DLQ that exist
// with other arguments are each refused and named, in order; the retry
// bucket, the queue and the binding from the exchange that exists are
// declared all the same, and no more channels are opened than one and one
// for each refusal.
func TestBrokerDeclaredAgainPastEveryRefusal(t *testing.T) {
	t.Parallel()
	name := strings.ReplaceAll(t.Name(), "/", ".")
	x, y, owned := "lilytest.drift.x."+name, "lilytest.drift.y."+name, "lilytest.drift.owned."+name
	otherTeamsExchange(t, y, topology.Fanout)
	otherTeamsExchange(t, owned, topology.Topic) // declared otherwise than ours
	q := brokerSpec(t, func(q *runtime.QueueSpec) {
		q.Topology.Exchanges = []topology.Exchange{
			{Name: x, Type: topology.Fanout, External: true},
			{Name: owned, Type: topology.Fanout, Durable: true},
			{Name: y, Type: topology.Fanout, External: true},
		}
		q.Topology.Bindings = []topology.Binding{{Source: x}, {Source: y}}
	})
	ch := channel(t, dial(t))
	if _, err := ch.QueueDeclare(q.Topology.DeadLetterQueue, true, false, false, false, amqp.Table{"x-queue-type": "classic", "x-max-length": int64(1)}); err != nil {
		t.Fatal(err)
	}
	refusals, channels, err := runtime.DeclareTopologyAgain(dial(t), q)
	if err != nil {
		t.Fatalf("declared again: %v", err)
	}
	for i, want := range []string{"declare exchange " + x, "declare exchange " + owned, "declare queue " + q.Topology.DeadLetterQueue} {
		if i >= len(refusals) || !strings.HasPrefix(refusals[i].Error(), want+": ") {
			t.Errorf("refusal %d: %v; want %q", i, refusals, want)
		}
	}
	if len(refusals) != 3 || channels > len(refusals)+1 {
		t.Errorf("%d refusals on %d channels; want 3, on at most 4", len(refusals), channels)
	}
	t.Logf("%d refusals on %d channels", len(refusals), channels)
	publishRouted(t, y, order(t, "routed"))
	assertCounts(t, map[string][2]int{q.Name: {1, 0}, bucket(q, q.Topology.RetryDelays[0]): {0, 0}, q.Topology.DeadLetterQueue: {0, 0}})
}

// boundToTwoTeams declares a queue bound to two other teams' exchanges, x
// and y.
func boundToTwoTeams(t *testing.T) (x, y string, q runtime.QueueSpec) {
	t.Helper()
	x, q = boundToOtherTeams(t, "lilytest.drift.x.")
	y = "lilytest.drift.y." + strings.ReplaceAll(t.Name(), "/", ".")
	otherTeamsExchange(t, y, topology.Fanout)
	q.Topology.Exchanges = append(q.Topology.Exchanges, topology.Exchange{Name: y, Type: topology.Fanout, External: true})
	q.Topology.Bindings = append(q.Topology.Bindings, topology.Binding{Source: y})
	declareTopology(t, q)
	return x, y, q
}

// awaitDrift waits for c's Health to be ready and name the exchange x as
// refused when the topology was declared again.
func awaitDrift(t *testing.T, c *runtime.Consumer, x string) {
	t.Helper()
	eventually(t, 2*time.Minute, "Health to say "+x+" is missing", func() bool {
		h := c.Health()
		return h.Ready && strings.Contains(h.Why, "refused the topology when it was declared again") && strings.Contains(h.Why, x)
	})
}

// channelsOn counts the channels the broker holds open on the connection
// named name (rabbitmqctl list_channels, which lists the channels' own
// processes: no statistics lag).
func channelsOn(t *testing.T, name string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conns, err := faults.Rabbitmqctl(ctx, "list_connections", "-q", "--no-table-headers", "pid", "client_properties")
	if err != nil {
		t.Fatal(err)
	}
	pid := ""
	for line := range strings.Lines(conns) {
		if p, props, ok := strings.Cut(strings.TrimSpace(line), "\t"); ok && strings.Contains(props, `{"connection_name","`+name+`"}`) {
			pid = p
		}
	}
	if pid == "" {
		t.Fatalf("no connection %q at the broker", name)
	}
	chans, err := faults.Rabbitmqctl(ctx, "list_channels", "-q", "--no-table-headers", "connection")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for line := range strings.Lines(chans) {
		if strings.TrimSpace(line) == pid {
			n++
		}
	}
	return n
}

// A broker that takes channel opens but never answers a queue.declare (a
// quorum queue's leader out of reach), while consuming goes on, leaves the
// topology declared again without an answer. amqp091's declare goes on past
// its step, its channel open; the session does not declare again until it
// returns, so the connection holds at most one channel more however many
// periods pass. The step's end is told once, at warn and in Health's Why,
// the consumer still ready, and the queue is still consumed.
func TestBrokerRedeclareUnansweredHoldsOneChannel(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, hourRetry)
	declareTopology(t, q)
	p := newProxy(t)
	const every = 300 * time.Millisecond
	r, c := prepare(t, q, ack, func(cfg *runtime.Config) { cfg.URLs = []string{p.url()}; cfg.StepTimeout = time.Second })
	c.SetTopologyEvery(every)
	r.launch(c)
	publish(t, q.Name, order(t, "before"))
	r.await(1)
	consume := faults.ConnectionName(q.Name, "consume")
	// Taken while no declare is outstanding, or while one is: the bound
	// below allows one more either way.
	before := channelsOn(t, consume)
	var declares, firstSent atomic.Int64
	p.Intercept(func(f faults.Frame) faults.Action {
		if f.Conn != consume || f.Type != 1 || f.Method != (faults.Method{Class: 50, ID: 10}) && f.Method != (faults.Method{Class: 50, ID: 11}) {
			return faults.Forward
		}
		if f.Dir == faults.ToBroker {
			declares.Add(1)
			firstSent.CompareAndSwap(0, time.Now().UnixNano())
			return faults.Forward
		}
		return faults.Drop // queue.declare-ok
	})
	intercepted := time.Now()
	eventually(t, 2*time.Minute, "a topology-unanswered line at warn", func() bool {
		return r.events.has(func(ev event) bool { return ev.stage == "topology-unanswered" && ev.level == slog.LevelWarn })
	})
	const unanswered = "consuming, but the broker has not answered the topology declared again since "
	h := c.Health()
	if !h.Ready || !strings.Contains(h.Why, unanswered) {
		t.Errorf("Health while the declare goes unanswered: %+v", h)
	}
	// Since the declare began, not since its step ended: no later than its
	// queue.declare went out (or, were it on its way already, than the
	// declare-oks began to be dropped).
	_, since, _ := strings.Cut(h.Why, unanswered)
	sent := intercepted
	if first := time.Unix(0, firstSent.Load()); first.After(sent) {
		sent = first
	}
	if at, err := time.Parse(time.RFC3339, since); err != nil || at.After(sent) {
		t.Errorf("unanswered since %q (%v); its declare went out at %s", since, err, sent.UTC().Format(time.RFC3339Nano))
	}
	// Many periods: before, each left one more channel open.
	most := 0
	for start, samples := time.Now(), 0; samples < 5 || time.Since(start) < 20*every; samples++ {
		most = max(most, channelsOn(t, consume))
	}
	if most > before+1 {
		t.Errorf("%d channels on the consuming connection while declares went unanswered (%d queue.declare sent); %d before, at most one more expected", most, declares.Load(), before)
	}
	if n := len(slices.DeleteFunc(r.events.all(), func(ev event) bool { return ev.stage != "topology-unanswered" })); n != 1 {
		t.Errorf("%d topology-unanswered lines; one declare went unanswered", n)
	}
	publish(t, q.Name, order(t, "during"))
	if rec := r.await(2)[1]; rec.MessageID != "during" || rec.Path != runtime.PathAcked {
		t.Errorf("while the declare went unanswered: %+v", rec)
	}
	r.stop()
	assertCounts(t, map[string][2]int{q.Name: {0, 0}})
}

// dialAs dials the broker as a user of the test's own who may configure
// only what matches configure (and read and write everything).
func dialAs(t *testing.T, configure string) *amqp.Connection {
	t.Helper()
	user := brokerUser(t, "topo", "secret")
	rabbitmqctl(t, "set_permissions", "-p", "/", user, configure, ".*", ".*")
	u, err := url.Parse(brokerURL(t))
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(user, "secret")
	conn, err := amqp.Dial(u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// An exchange of Lily's own that the user may not declare (deleted, and
// the permission to declare it taken away) is refused with a 403 when the
// topology is declared again, and its binding then gets a 404: both are
// told, and the binding from the next exchange, declared anew, is made all
// the same: a message sent to it reaches the queue.
func TestBrokerOwnedExchangeRefusedLeavesTheOthersBound(t *testing.T) {
	t.Parallel()
	var denied, permitted string
	q := brokerSpec(t, func(q *runtime.QueueSpec) {
		denied, permitted = "lilytest.drift.denied."+q.Name, q.Name+".x"
		q.Topology.Exchanges = []topology.Exchange{
			{Name: denied, Type: topology.Fanout, Durable: true},
			{Name: permitted, Type: topology.Fanout, Durable: true},
		}
		q.Topology.Bindings = []topology.Binding{{Source: denied}, {Source: permitted}}
	})
	t.Cleanup(func() { deleteExchanges(t, denied, permitted) })
	refusals, channels, err := runtime.DeclareTopologyAgain(dialAs(t, "^"+regexp.QuoteMeta(q.Name)), q)
	if err != nil {
		t.Fatalf("declared again: %v", err)
	}
	want := []string{"declare exchange " + denied + ": ", "bind queue " + q.Name + " to exchange " + denied + ": "}
	if len(refusals) != 2 || !strings.HasPrefix(refusals[0].Error(), want[0]) || !strings.Contains(refusals[0].Error(), "403") ||
		!strings.HasPrefix(refusals[1].Error(), want[1]) || !strings.Contains(refusals[1].Error(), "404") {
		t.Errorf("refusals %v; want the 403 of %s, then its binding's 404", refusals, denied)
	}
	if channels > 3 {
		t.Errorf("%d channels; want at most 3", channels)
	}
	publishRouted(t, permitted, order(t, "routed"))
	assertCounts(t, map[string][2]int{q.Name: {1, 0}})
}

// The 403 of an exchange of Lily's own whose permission to configure was
// taken away says nothing of whether it exists (RabbitMQ checks the
// permission first): its binding, deleted meanwhile, is made again.
func TestBrokerOwnedExchangeRefusedStillBinds(t *testing.T) {
	t.Parallel()
	var denied string
	q := brokerSpec(t, func(q *runtime.QueueSpec) {
		denied = "lilytest.drift.denied." + q.Name
		q.Topology.Exchanges = []topology.Exchange{{Name: denied, Type: topology.Fanout, Durable: true}}
		q.Topology.Bindings = []topology.Binding{{Source: denied}}
	})
	t.Cleanup(func() { deleteExchanges(t, denied) })
	declareTopology(t, q)
	ch := channel(t, dial(t))
	if err := ch.QueueUnbind(q.Name, "", denied, nil); err != nil {
		t.Fatal(err)
	}
	refusals, _, err := runtime.DeclareTopologyAgain(dialAs(t, "^"+regexp.QuoteMeta(q.Name)), q)
	if err != nil {
		t.Fatalf("declared again: %v", err)
	}
	if len(refusals) != 1 || !strings.Contains(refusals[0].Error(), "403") {
		t.Errorf("refusals %v; want the 403 of %s alone", refusals, denied)
	}
	publishRouted(t, denied, order(t, "routed"))
	assertCounts(t, map[string][2]int{q.Name: {1, 0}})
}

// A queue of Lily's own that the user may not declare (deleted, and the
// permission to declare it taken away) is refused with a 403 when the
// topology is declared again, and each binding to it then gets a 404:
// each is told as a refusal, and the declare goes on past it rather than
// stop at the first, unsaid.
func TestBrokerBindOfAQueueRefusedIsARefusal(t *testing.T) {
	t.Parallel()
	var x, y string
	q := brokerSpec(t, func(q *runtime.QueueSpec) {
		x, y = q.Name+".x", q.Name+".y"
		q.Topology.Exchanges = []topology.Exchange{
			{Name: x, Type: topology.Fanout, Durable: true},
			{Name: y, Type: topology.Fanout, Durable: true},
		}
		q.Topology.Bindings = []topology.Binding{{Source: x}, {Source: y}}
	})
	t.Cleanup(func() { deleteExchanges(t, x, y) })
	// Everything of the queue's but the queue itself.
	configure := "^" + regexp.QuoteMeta(q.Name) + `\..+`
	refusals, _, err := runtime.DeclareTopologyAgain(dialAs(t, configure), q)
	if err != nil {
		t.Fatalf("declared again: %v", err)
	}
	for i, want := range []string{"declare queue " + q.Name, "bind queue " + q.Name + " to exchange " + x, "bind queue " + q.Name + " to exchange " + y} {
		if i >= len(refusals) || !strings.HasPrefix(refusals[i].Error(), want+": ") {
			t.Errorf("refusal %d: %v; want %q", i, refusals, want)
		}
	}
	if len(refusals) != 3 {
		t.Errorf("%d refusals; want 3", len(refusals))
	}
}
