package runtime

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lily-mq/lily/internal/sanitize"
	"github.com/lily-mq/lily/runtime/internal/decide"
	"github.com/lily-mq/lily/runtime/internal/outcome"
)

// Health is what a consumer answers a probe: whether it is ready (connected
// and consuming) and live (its own machinery moving), and the figures an
// operator reads beside them.
//
// Liveness never depends on the broker: while the broker is unreachable the
// consumer is not ready, and reconnects on its own; restarting it would not
// help, and would restart every pod at once. It is not live only when the
// process itself is wedged: its settler stuck in one write, or every
// concurrency slot held by a handler that outlived its timeout, each for
// longer than any bound the runtime sets itself: the queue's settlement
// budget (QueueSpec.SettlementBudget, or its default), plus two
// Config.StepTimeouts, plus a minute.
type Health struct {
	Queue string `json:"queue"`
	Ready bool   `json:"ready"`
	Live  bool   `json:"live"`
	// Why says what keeps the consumer from being ready or live, or, while
	// it is ready, that the broker blocks the publishes of its handoffs (a
	// resource alarm), or that the latest handoff to a retry bucket or the
	// DLQ failed (a queue deleted, or full and refusing), so that deliveries
	// whose settlement needs a handoff there are requeued, or that the
	// broker refused its topology when it was last declared again (an
	// external exchange deleted, say), or has not answered it declared
	// again since a time.
	Why string `json:"why,omitempty"`
	// LastSettled is when a delivery last ended settled (zero: none yet).
	LastSettled time.Time `json:"last_settled,omitzero"`
	// Unresolved counts the deliveries left unresolved so far.
	Unresolved int `json:"unresolved"`
	// IntakeStopped: the consumer is shutting down.
	IntakeStopped bool `json:"intake_stopped"`
}

// endedWith is Health's why once Run has returned err.
func endedWith(err error) *string {
	why := "Run returned"
	if err != nil {
		why = "Run failed: " + sanitize.Text(err.Error(), decide.MaxCause)
	}
	return &why
}

// Health tells the consumer's health now. It is cheap: a probe may ask often.
func (c *Consumer) Health() Health {
	h := Health{Queue: c.spec.Name, Live: true}
	r := c.running.Load()
	if r == nil {
		h.Why = "not running"
		return h
	}
	h.IntakeStopped = closed(r.stopping)
	if at := r.lastSettled.Load(); at != 0 {
		h.LastSettled = time.Unix(0, at)
	}
	h.Unresolved = r.report.unresolvedSoFar()
	now := time.Now()
	limit := c.stallAfter()
	s := r.consuming.Load()
	switch ended := r.ended.Load(); {
	case ended != nil:
		h.Why = *ended
	case h.IntakeStopped:
		h.Why = "shutting down"
	case s == nil:
		h.Why = "not connected: reconnecting to the broker"
		if !r.consumed.Load() {
			h.Why = "not connected: connecting to the broker"
		}
		if why := r.unserved.Load(); why != nil {
			h.Why = "connected, not consuming: " + *why
		}
		if why := r.reopening.Load(); why != nil {
			h.Why = "not consuming, opening the consumer again: " + *why
		}
		if why := r.refusal.Load(); why != nil {
			h.Why = "the broker refuses the topology, retrying until it is mended: " + *why
		}
	case c.cfg.Publisher != nil && closed(c.cfg.Publisher.conn.Closing()):
		// Consuming goes on, on the connection it shares, but every handoff
		// fails and its delivery is requeued, until the process restarts.
		h.Why = "consuming, but Config.Publisher has been closed: every handoff fails; close it after Run returns"
	default:
		h.Ready = true
		h.Why = readyWhy(blockedText(r.conn.Blocked()), r.failing.text(), r.drifted.Load(), s.unanswered.Load())
	}
	if s != nil {
		if since := s.gen.Settler.WritingSince(); !since.IsZero() && now.Sub(since) > limit {
			h.Live, h.Why = false, "the settler has been stuck in one write since "+since.UTC().Format(time.RFC3339)
		}
	}
	if since := r.stuck.since(); !since.IsZero() && now.Sub(since) > limit {
		h.Live, h.Why = false, "every concurrency slot held by a handler past its timeout since "+since.UTC().Format(time.RFC3339)
	}
	return h
}

// readyWhy is Health's why while the consumer is ready: that the broker
// blocks the handoffs (blocked, from blockedText), then the handoffs that
// fail (failing, from handoffFailures.text), then the topology's refusals
// (drifted), each bounded already, then since when the topology declared
// again has gone unanswered (unanswered, Unix nanoseconds; 0: it has not);
// empty when there is none of them.
func readyWhy(blocked, failing string, drifted *string, unanswered int64) string {
	var told []string
	if blocked != "" {
		told = append(told, blocked)
	}
	if failing != "" {
		told = append(told, failing)
	}
	if drifted != nil {
		told = append(told, "the broker refused the topology when it was declared again: "+*drifted)
	}
	if unanswered != 0 {
		told = append(told, "the broker has not answered the topology declared again since "+
			time.Unix(0, unanswered).UTC().Format(time.RFC3339))
	}
	if told == nil {
		return ""
	}
	return "consuming, but " + strings.Join(told, "; and ")
}

// blockedText tells that the broker blocks the handoffs' publishes
// (connection.blocked, a resource alarm) since since, for the reason it
// gave, bounded and sanitized; empty when since is zero: it blocks none.
// Health stays ready meanwhile: a restart would meet the same alarm.
func blockedText(since time.Time, reason string) string {
	if since.IsZero() {
		return ""
	}
	return "the broker blocks the handoffs' publishes since " + since.UTC().Format(time.RFC3339) +
		" (" + sanitize.Text(reason, decide.MaxCause) + "): deliveries whose settlement needs a handoff wait for it, and are requeued when their budget runs short"
}

// handoffFailures holds, for each destination of a queue's handoffs (its
// retry buckets, then its DLQ), the latest failure of a handoff there, for
// Health; nil once a handoff there is confirmed. Kept by destination, so that
// the copies one destination confirms do not hide that another refuses
// every copy (its queue deleted, or full with reject-publish).
type handoffFailures struct {
	to      []string
	failing []atomic.Pointer[handoffFailure]
}

// handoffFailure is the latest failure of a handoff to one destination, and
// since when every handoff there has failed.
type handoffFailure struct {
	since  time.Time
	status outcome.HandoffStatus
	detail string
}

func newHandoffFailures(p decide.Policy) handoffFailures {
	to := append(slices.Clone(p.Buckets), p.DeadLetterQueue)
	return handoffFailures{to: to, failing: make([]atomic.Pointer[handoffFailure], len(to))}
}

// note keeps what the broker said of a handoff. It is on every handoff's
// path: a confirm costs a lookup and one atomic load while no failure is
// held, and a failure allocates only when it differs from the one held.
func (f *handoffFailures) note(ev outcome.HandoffEvidence) {
	i := slices.Index(f.to, ev.Destination)
	if i < 0 {
		return
	}
	slot := &f.failing[i]
	was := slot.Load()
	switch {
	case ev.Status == outcome.HandoffConfirmed:
		if was != nil {
			slot.CompareAndSwap(was, nil)
		}
	case was == nil:
		slot.CompareAndSwap(nil, &handoffFailure{since: time.Now(), status: ev.Status, detail: ev.Detail})
	case was.status != ev.Status || was.detail != ev.Detail:
		slot.CompareAndSwap(was, &handoffFailure{since: was.since, status: ev.Status, detail: ev.Detail})
	}
}

// maxHandoffsTold bounds the destinations Health names as failing; the rest
// are counted.
const maxHandoffsTold = 4

// text tells the destinations whose latest handoff failed, since the first
// of them began to fail, each with its latest failure, its detail bounded as
// a cause is; empty when none did.
func (f *handoffFailures) text() string {
	var since time.Time
	var told []string
	more := 0
	for i := range f.failing {
		was := f.failing[i].Load()
		if was == nil {
			continue
		}
		if since.IsZero() || was.since.Before(since) {
			since = was.since
		}
		if len(told) == maxHandoffsTold {
			more++
			continue
		}
		// The destination is a queue name the spec passed: printable, and
		// at most 255 bytes.
		told = append(told, f.to[i]+" "+was.status.String()+": "+sanitize.Text(was.detail, decide.MaxCause))
	}
	if told == nil {
		return ""
	}
	if more > 0 {
		told = append(told, fmt.Sprintf("and %d more failing", more))
	}
	return "handoffs fail since " + since.UTC().Format(time.RFC3339) + ": " + strings.Join(told, "; ") +
		" (deliveries whose settlement needs a handoff there are requeued)"
}

// stallAfter is how long the settler may stay in one write, or every slot
// stay held by handlers past their timeout, before the consumer counts as
// wedged: longer than any bound the runtime sets itself (a delivery's budget
// and two steps), and by a minute more (stallMargin), so that a slow broker
// or a slow handler is never mistaken for a wedged process.
func (c *Consumer) stallAfter() time.Duration {
	return c.spec.budget() + 2*c.cfg.StepTimeout + c.tuning.stallMargin
}

// stuckHandlers counts the handlers abandoned past their timeout that still
// run, and since when they have held every slot.
type stuckHandlers struct {
	mu    sync.Mutex
	n     int
	slots int
	full  time.Time
}

// abandoned notes one more handler left running past its timeout.
func (s *stuckHandlers) abandoned() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	if s.n == s.slots {
		s.full = time.Now()
	}
}

// returned notes that an abandoned handler has returned at last.
func (s *stuckHandlers) returned() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n--
	s.full = time.Time{}
}

// since is when the stuck handlers came to hold every slot; zero while they
// do not.
func (s *stuckHandlers) since() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.full
}

// settledNow notes a delivery settled, for Health.
func (r *run) settledNow() { r.lastSettled.Store(time.Now().UnixNano()) }

// HealthHandler serves the health of consumers to Kubernetes' probes: a
// request whose path's last element is "livez", "live" or "liveness" (a
// trailing slash aside: /livez, /healthz/live/) asks whether every consumer
// is live; any other path whether every one is ready. It answers 200 when
// they all are and 503 when one is not, with each consumer's Health as JSON.
func HealthHandler(consumers ...*Consumer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		live := livenessPath(req.URL.Path)
		all := make([]Health, len(consumers))
		ok := true
		for i, c := range consumers {
			all[i] = c.Health()
			ok = ok && (live && all[i].Live || !live && all[i].Ready)
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(all)
	})
}

// livenessPath says whether a probe of path asks for liveness. Any other is
// taken as readiness, which fails while the broker is away: a liveness
// probe read so would restart every pod at once.
func livenessPath(path string) bool {
	last := path[strings.LastIndexByte(strings.TrimRight(path, "/"), '/')+1:]
	switch strings.TrimRight(last, "/") {
	case "livez", "live", "liveness":
		return true
	}
	return false
}
