package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lily-mq/lily/internal/faults"
	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/runtime/internal/fixture"
)

// probe asks h for path and returns the status and the healths it listed.
func probe(t *testing.T, h http.Handler, path string) (int, []runtime.Health) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	var got []runtime.Health
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatalf("%s answered %q: %v", path, rec.Body.String(), err)
	}
	return rec.Code, got
}

// Readiness follows the connection; liveness does not: a broker that cannot
// be reached makes the consumer unready, never dead.
func TestBrokerHealthFollowsTheConnection(t *testing.T) {
	t.Parallel()
	q, p := behindProxy(t, "h-1")
	r, c := prepare(t, q, handler(func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error { return nil }),
		func(cfg *runtime.Config) {
			cfg.URLs = []string{p.url()}
			// Long enough for the first connection on a loaded machine;
			// an attempt that hangs while the proxy stalls ends at it.
			cfg.StepTimeout = 3 * time.Second
			cfg.ReconnectMax = 200 * time.Millisecond
		})
	probes := runtime.HealthHandler(c)
	if h := c.Health(); h.Ready || !h.Live || h.Why != "not running" {
		t.Errorf("before Run: %+v", h)
	}
	if code, _ := probe(t, probes, "/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz before Run: %d", code)
	}
	r.launch(c)
	r.await(1)
	eventually(t, 60*time.Second, "ready", func() bool { return c.Health().Ready })
	h := c.Health()
	if !h.Live || h.LastSettled.IsZero() || h.Unresolved != 0 || h.IntakeStopped {
		t.Errorf("consuming: %+v", h)
	}
	if code, got := probe(t, probes, "/readyz"); code != http.StatusOK || len(got) != 1 || got[0].Queue != q.Name || !got[0].Ready {
		t.Errorf("/readyz while consuming: %d %+v", code, got)
	}

	// Frames stop in both directions and the connections are cut: every
	// connection attempt hangs in its handshake until Resume.
	p.Stall(0)
	p.Cut()
	eventually(t, 60*time.Second, "not ready while the broker cannot be reached", func() bool { return !c.Health().Ready })
	h = c.Health()
	if !h.Live || !strings.Contains(h.Why, "not connected") {
		t.Errorf("broker unreachable: %+v", h)
	}
	if code, _ := probe(t, probes, "/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz while the broker cannot be reached: %d", code)
	}
	if code, got := probe(t, probes, "/livez"); code != http.StatusOK || !got[0].Live {
		t.Errorf("/livez while the broker cannot be reached: %d %+v", code, got)
	}
	p.Resume()
	eventually(t, 60*time.Second, "ready again", func() bool { return c.Health().Ready })

	r.stop()
	if h := c.Health(); h.Ready || !h.IntakeStopped || !h.Live {
		t.Errorf("stopped: %+v", h)
	}
}

// A consumer whose every slot is held by a handler that ignores its context
// past its timeout is wedged: not live, until the handler returns.
func TestBrokerHealthNotLiveWhileHandlersHoldEverySlot(t *testing.T) {
	t.Parallel()
	// A step that carries the first connection on a loaded machine, and a
	// budget a second over the least it allows: the consumer counts as
	// wedged once the budget and two steps have passed.
	const step = 2 * time.Second
	q := brokerSpec(t, func(q *runtime.QueueSpec) {
		q.Concurrency, q.Prefetch = 1, 1
		q.HandlerTimeout = 100 * time.Millisecond
		q.SettlementBudget = q.HandlerTimeout + 4*step + 3*time.Second
		hourRetry(q)
	})
	declareTopology(t, q)
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free)
	r, c := prepare(t, q, handler(func(ctx context.Context, msg *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
		<-release // ignores ctx
		return nil
	}), func(cfg *runtime.Config) { cfg.StepTimeout = step })
	c.SetStallMargin(0)
	r.launch(c)
	publish(t, q.Name, order(t, "stuck"))
	eventually(t, 60*time.Second, "not live", func() bool { return !c.Health().Live })
	h := c.Health()
	if !strings.Contains(h.Why, "every concurrency slot held by a handler past its timeout") {
		t.Errorf("wedged: %+v", h)
	}
	if code, _ := probe(t, runtime.HealthHandler(c), "/livez"); code != http.StatusServiceUnavailable {
		t.Errorf("/livez while wedged: %d", code)
	}
	free()
	eventually(t, 60*time.Second, "live again once the handler returned", func() bool { return c.Health().Live })
	// The handler timed out, so its delivery went to the retry bucket.
	if recs := r.await(1); recs[0].Handler != "timed out" || recs[0].Path != runtime.PathRetried {
		t.Errorf("records %+v", recs)
	}
	r.stop()
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, bucket(q, time.Hour): {1, 0}})
}

// A consumer whose Run gave up says so, rather than that it reconnects.
func TestHealthAfterRunFailed(t *testing.T) {
	t.Parallel()
	c, err := runtime.NewConsumer(fixture.LilytestQueueSpec(), fixture.LilytestRoutes(handler(nil)), runtime.Config{URLs: []string{"amqp://guest:guest@127.0.0.1:1/"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Run(t.Context()); err == nil {
		t.Fatal("Run connected to a closed port")
	}
	h := c.Health()
	if h.Ready || !strings.HasPrefix(h.Why, "Run failed: ") {
		t.Errorf("health after a failed Run: %+v", h)
	}
}

// While every handoff to the DLQ fails (a policy of max-length 0 with
// reject-publish on it, which no declare of the topology mends), Health
// stays ready and says so; once the policy is gone, the requeued
// delivery's handoff is confirmed and Health says nothing more.
func TestBrokerHealthTellsFailingHandoffs(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t)
	declareTopology(t, q)
	policy := "lily-test-full-" + q.Name
	rabbitmqctl(t, "set_policy", "--apply-to", "queues", "--priority", "10",
		policy, "^"+regexp.QuoteMeta(q.Topology.DeadLetterQueue)+"$", `{"max-length":0,"overflow":"reject-publish"}`)
	cleared := false
	t.Cleanup(func() {
		if !cleared {
			_ = exec.Command("rabbitmqctl", "clear_policy", policy).Run()
		}
	})
	eventually(t, time.Minute, "the policy on "+q.Topology.DeadLetterQueue, func() bool {
		out, err := exec.Command("rabbitmqctl", "list_queues", "-q", "--no-table-headers", "name", "policy").Output()
		return err == nil && slices.ContainsFunc(strings.Split(string(out), "\n"), func(line string) bool {
			return slices.Equal(strings.Fields(line), []string{q.Topology.DeadLetterQueue, policy})
		})
	})
	publish(t, q.Name, order(t, "full-1"))
	r, c := prepare(t, q, handler(func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error {
		return runtime.Permanent(errors.New("order refused"))
	}))
	r.launch(c)
	eventually(t, time.Minute, "Health to say the handoffs fail", func() bool {
		h := c.Health()
		return h.Ready && strings.Contains(h.Why, "consuming, but handoffs fail since") &&
			strings.Contains(h.Why, q.Topology.DeadLetterQueue+" nacked: the broker refused the publish")
	})
	// Health tells the failure before the requeue's pause ends, and the
	// record follows the requeue.
	if recs := r.await(1); recs[0].Path != runtime.PathRequeued || recs[0].Handoff != "nacked" {
		t.Errorf("records %+v, want the first requeued after a nacked handoff", recs)
	}
	rabbitmqctl(t, "clear_policy", policy)
	cleared = true
	eventually(t, 2*time.Minute, "the copy in the DLQ and Health clean", func() bool {
		h := c.Health()
		return h.Ready && h.Why == "" && slices.ContainsFunc(r.recorded(), func(rec runtime.Record) bool { return rec.Path == runtime.PathDeadLettered })
	})
	r.stop()
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, q.Topology.DeadLetterQueue: {1, 0}})
}

// While the broker blocks the handoffs' connection (connection.blocked, a
// resource alarm), Health stays ready, and says so before any handoff
// waits on it; once the broker unblocks it, Health says nothing more.
func TestBrokerHealthTellsBlockedHandoffs(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, hourRetry)
	declareTopology(t, q)
	p := newProxy(t)
	r, c := prepare(t, q, handler(func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error {
		return runtime.Retryable(errors.New("later"))
	}), through(p))
	r.launch(c)
	publish(t, q.Name, order(t, "warm"))
	wantPath(t, r.await(1)[0], runtime.PathRetried) // the handoffs' connection is open
	handoffs := func(name string) bool { return name == faults.ConnectionName(q.Name, "handoff") }
	if p.Block(handoffs, "low on memory\x1b[31m") != 1 {
		t.Fatal("no handoffs' connection to block")
	}
	eventually(t, 2*time.Minute, "Health to say the broker blocks the handoffs", func() bool {
		h := c.Health()
		return h.Ready && strings.HasPrefix(h.Why, "consuming, but the broker blocks the handoffs' publishes since ") &&
			strings.Contains(h.Why, `(low on memory\x1b[31m)`)
	})
	p.Unblock(handoffs)
	eventually(t, 2*time.Minute, "Health clean once unblocked", func() bool {
		h := c.Health()
		return h.Ready && h.Why == ""
	})
	r.stop()
}

// Until its first session consumes, a consumer is connecting, not
// reconnecting; after a loss it is reconnecting.
func TestBrokerHealthConnectingBeforeTheFirstSession(t *testing.T) {
	t.Parallel()
	q, p := behindProxy(t, "h-1")
	r, c := prepare(t, q, handler(func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error { return nil }),
		func(cfg *runtime.Config) {
			cfg.URLs = []string{p.url()}
			// The first dial hangs in its handshake while the proxy
			// stalls: it must outlast the test's look at Health.
			cfg.StepTimeout = 20 * time.Second
			cfg.ReconnectMax = 200 * time.Millisecond
		})
	p.Stall(0)
	r.launch(c)
	eventually(t, 15*time.Second, "Health to say it connects", func() bool {
		h := c.Health()
		return !h.Ready && h.Live && h.Why == "not connected: connecting to the broker"
	})
	p.Resume()
	r.await(1)
	eventually(t, time.Minute, "ready", func() bool { return c.Health().Ready })
	p.Stall(0)
	p.Cut()
	eventually(t, time.Minute, "Health to say it reconnects", func() bool {
		h := c.Health()
		return !h.Ready && h.Live && h.Why == "not connected: reconnecting to the broker"
	})
	p.Resume()
	eventually(t, time.Minute, "ready again", func() bool { return c.Health().Ready })
	r.stop()
}

// A consumer whose Publisher is closed while it runs goes on consuming on
// the connection it shares, but no handoff can be written: Health says so,
// not ready. And a consumer is not made with a Publisher closed already.
// Before, both stayed ready, and NewConsumer took the closed one, while every
// delivery that failed was requeued for good.
func TestBrokerHealthTellsAClosedPublisher(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t)
	pub := newPublisher(t, brokerURL(t), 4)
	r, c := prepare(t, q, handler(func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error { return nil }),
		func(cfg *runtime.Config) { cfg.Publisher = pub })
	r.launch(c)
	eventually(t, time.Minute, "ready", func() bool { return c.Health().Ready })
	pub.Close()
	eventually(t, time.Minute, "Health to say the Publisher has closed", func() bool {
		h := c.Health()
		return h.Live && !h.Ready && strings.Contains(h.Why, "Config.Publisher has been closed")
	})
	r.stop()
	_, err := runtime.NewConsumer(brokerSpec(t), fixture.LilytestRoutes(handler(nil)), runtime.Config{URLs: []string{brokerURL(t)}, Publisher: pub})
	if err == nil || !strings.Contains(err.Error(), "Config.Publisher has been closed") {
		t.Errorf("NewConsumer with a closed Publisher: %v", err)
	}
}

// When the broker cancels the consumer (its queue deleted) while the
// connection lives on, Health says so until the consumer is opened again,
// not that it reconnects to the broker, which would send an operator to the
// network. Before, it said "not connected: reconnecting to the broker".
func TestBrokerHealthTellsACancelledConsumer(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t)
	r, c := prepare(t, q, handler(func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error { return nil }))
	// Long enough to read Health before the queue is declared again.
	c.SetReconnectMin(5 * time.Second)
	r.launch(c)
	eventually(t, time.Minute, "ready", func() bool { return c.Health().Ready })
	ch := channel(t, dial(t))
	if _, err := ch.QueueDelete(q.Name, false, false, false); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "Health to say the broker cancelled the consumer", func() bool {
		h := c.Health()
		return h.Live && !h.Ready && strings.HasPrefix(h.Why, "not consuming, opening the consumer again: the broker cancelled the consumer")
	})
	eventually(t, time.Minute, "ready again, the queue declared again", func() bool { return c.Health().Ready })
	r.stop()
}

// When the consumer reconnects, logs in, and a step of opening its session
// fails (here the consume goes unanswered, as for a quorum queue without a
// leader), Health says it is connected and not consuming, and why, not that
// it cannot reach the broker, which would send an operator to the network.
// Before, it said "not connected: reconnecting to the broker".
func TestBrokerHealthTellsASessionThatDoesNotOpen(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t)
	declareTopology(t, q)
	p := newProxy(t)
	var on atomic.Bool
	held := stuckConsume(p, q.Name, &on)
	r, c := prepare(t, q, ack, func(cfg *runtime.Config) {
		cfg.URLs, cfg.StepTimeout, cfg.ReconnectMax = []string{p.url()}, time.Second, 200*time.Millisecond
	})
	r.launch(c)
	eventually(t, time.Minute, "ready", func() bool { return c.Health().Ready })
	on.Store(true)
	p.Cut()
	// A second consume held: the first attempt has failed on its step.
	eventually(t, time.Minute, "a second consume held", func() bool { return held.Load() >= 2 })
	if h := c.Health(); h.Ready || !h.Live || !strings.HasPrefix(h.Why, "connected, not consuming: ") ||
		!strings.Contains(h.Why, "consume "+q.Name) || !strings.Contains(h.Why, "did not return in time") {
		t.Errorf("Health: ready %v, live %v, %q; want connected, not consuming, and why", h.Ready, h.Live, h.Why)
	}
	on.Store(false)
	eventually(t, time.Minute, "ready again", func() bool { return c.Health().Ready })
	r.stop()
}
