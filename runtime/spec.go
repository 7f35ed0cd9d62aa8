package runtime

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/internal/queue"
	"github.com/lily-mq/lily/runtime/internal/decide"
	"github.com/lily-mq/lily/runtime/internal/guard"
	"github.com/lily-mq/lily/topology"
)

// SupportsGeneratedCodeV10 is referred to by code lilygen generates: a runtime
// too old or too new for that code fails at compile time, not at run time.
// V10: an ordered queue's spec leaves the budget of its retries in line to
// NewConsumer, which derives it at the consumer's step timeout (V9: the spec
// carried it at the default step timeout, and the generated constructor grew
// it; extractors hand wire.JSONObject.Next their reader).
const SupportsGeneratedCodeV10 = true

// QueueSpec is one queue's topology and policy, as generated from the schema.
// NewConsumer refuses a spec whose numbers are out of their ranges rather
// than default them: a zero Prefetch, Concurrency, MaxAttempts,
// MaxBodyBytes or HandlerTimeout is an error.
type QueueSpec struct {
	// Name is the queue's name on the broker.
	Name string
	// Topology is the queue's place on the broker: its type, DLQ and
	// delivery limit, its arguments, and the exchanges and bindings that
	// route to it.
	Topology topology.Queue
	// Prefetch is the channel's basic.qos: how many deliveries the broker
	// may hand over unacknowledged, 1..65535.
	Prefetch int
	// Concurrency bounds the deliveries handled at once, 1..65535.
	Concurrency int
	// OrderKey, when set, orders the queue's handling: deliveries whose keys
	// are equal are handled one at a time, in the order the queue delivered
	// them (a constant key handles every delivery so). It reads the headers
	// and body of a delivery the guard has passed, on the intake's goroutine
	// (a delivery the guard refuses goes to the DLQ unread, in no order); it
	// must be quick, and must neither keep nor change them: they are the
	// delivery's own, which its extractor reads and its retry and DLQ
	// copies carry on. A panic in it (a panic(nil) too, even under
	// GODEBUG=panicnil=1), or a runtime.Goexit, is logged, and the delivery
	// is ordered only behind others whose key panicked. Order holds while
	// each delivery settles within its budget: a retry waits in line,
	// its key's later deliveries behind it, unless the budget cannot carry
	// it, when it goes through its bucket and comes back behind them; and
	// across a recycle of the channel only for the keys with nothing waiting.
	OrderKey func(headers map[string]any, body []byte) string
	// MaxAttempts bounds how often a retryable failure is tried, counting
	// from 1: after attempt n fails retryably, the message waits in a retry
	// bucket (Topology.RetryDelays says which; on an ordered queue, in line
	// for as long) and comes back as attempt n+1, unless n has reached
	// MaxAttempts: then it goes to the DLQ.
	MaxAttempts int
	// MaxBodyBytes is the largest body handed to an extractor.
	MaxBodyBytes int
	// HandlerTimeout bounds one handler call; running out of it is a retryable failure.
	HandlerTimeout time.Duration
	// Messages are the messages the queue consumes: each one's wire type,
	// the envelope profile its producer uses, and its inbox policy. The
	// consumer refuses to run without a Config.Inbox when one requires it.
	// None means Lily's profile for every route, each claimed in the inbox
	// when the consumer has one.
	Messages []envelope.Message
	// SettlementBudget bounds the whole delivery, from receipt to settlement.
	// Zero means HandlerTimeout plus 30 s, or HandlerTimeout plus four of the
	// Config's step timeouts plus 2 s when that is larger (a step over 7 s);
	// five with a Config.Scope. On an ordered queue that retries (OrderKey
	// set, MaxAttempts over 1), zero means, when it is larger, what its
	// retries in line need: MaxAttempts × (HandlerTimeout + those four or five
	// steps) + the delays between the attempts + 30 s. Any other is at least
	// the first sum, which NewConsumer checks.
	SettlementBudget time.Duration
}

// budget is the settlement budget of each delivery of this queue.
func (q QueueSpec) budget() time.Duration { return queue.Budget(q.HandlerTimeout, q.SettlementBudget) }

func (q QueueSpec) policy() decide.Policy {
	buckets := make([]string, len(q.Topology.RetryDelays))
	for i, d := range q.Topology.RetryDelays {
		buckets[i] = queue.RetryBucket(q.Name, d)
	}
	return decide.Policy{
		Queue: q.Name, DeadLetterQueue: q.Topology.DeadLetterQueue, RetryDelays: q.Topology.RetryDelays, Buckets: buckets, MaxAttempts: q.MaxAttempts,
		DeliveryLimit: max(q.topology(0).DeliveryLimit(), 0),
		Park:          q.OrderKey != nil,
	}
}

// topology is what the queue's declarations depend on, on a broker of major
// version brokerMajor.
func (q QueueSpec) topology(brokerMajor int) queue.Topology {
	return queue.Topology{Name: q.Name, Queue: q.Topology, BrokerMajor: brokerMajor}
}

// validate reports every problem with the spec at once.
func (q QueueSpec) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	errs = append(errs, q.names())
	t := q.Topology
	if t.Type != queue.Classic && t.Type != queue.Quorum {
		bad("queue %s: type %q is neither classic nor quorum", q.Name, t.Type)
	}
	// A schema's bounds: concurrency sizes the handoffs' window, and so each
	// handoff channel's buffer of Returns.
	if q.Prefetch < 1 || q.Prefetch > 65535 || q.Concurrency < 1 || q.Concurrency > 65535 {
		bad("queue %s: prefetch and concurrency must be 1..65535", q.Name)
	}
	if q.MaxAttempts < 1 || q.MaxAttempts > guard.DefaultLimits.MaxAttempt {
		bad("queue %s: max attempts must be 1..%d", q.Name, guard.DefaultLimits.MaxAttempt)
	}
	if q.MaxAttempts > 1 && len(t.RetryDelays) == 0 {
		bad("queue %s: retries need at least one bucket delay", q.Name)
	}
	for _, d := range t.RetryDelays {
		if d <= 0 {
			bad("queue %s: retry delay %s is not positive", q.Name, d)
		}
	}
	if t.Type != topology.Quorum && t.Arguments["x-overflow"] == "reject-publish" && len(t.RetryDelays) > 0 {
		bad("queue %s: x-overflow reject-publish on a classic queue with retries drops a retry copy that comes back while the queue is full", q.Name)
	}
	if q.MaxBodyBytes < 1 || q.HandlerTimeout <= 0 {
		bad("queue %s: body limit and handler timeout must be positive", q.Name)
	}
	for _, d := range append([]time.Duration{q.HandlerTimeout, q.SettlementBudget}, t.RetryDelays...) {
		if d > queue.MaxDuration {
			bad("queue %s: %s is longer than %s", q.Name, d, queue.MaxDuration)
			break
		}
	}
	switch {
	case t.Type == queue.Classic && t.DeliveryLimit != 0:
		bad("queue %s: a classic queue has no delivery limit", q.Name)
	case t.DeliveryLimit < queue.NoDeliveryLimit:
		bad("queue %s: delivery limit %d is neither -1 (none) nor a count", q.Name, t.DeliveryLimit)
	}
	if q.SettlementBudget != 0 && q.SettlementBudget < q.HandlerTimeout+decide.HandoffReserve {
		bad("queue %s: settlement budget %s leaves less than %s after the handler timeout for handoff and settlement", q.Name, q.SettlementBudget, decide.HandoffReserve)
	}
	return errors.Join(errs...)
}

// check reports every problem NewConsumer finds in the spec and routes
// whatever the Config, and returns the reader and inbox policies they make.
// A trial's read (lilytest.RawDelivery) refuses the same.
func (q QueueSpec) check(routes Routes) (*guard.Reader, map[string]envelope.Inbox, error) {
	errs := []error{q.validate()}
	reader, err := guard.NewReader(q.Messages)
	if err != nil {
		errs = append(errs, fmt.Errorf("queue %s: %w", q.Name, err))
	}
	inbox, err := messagesOf(q, routes)
	errs = append(errs, err)
	if len(routes) == 0 {
		errs = append(errs, fmt.Errorf("queue %s: the dispatch table is empty", q.Name))
	}
	for key, route := range routes {
		if route == nil {
			errs = append(errs, fmt.Errorf("queue %s: route %+v has no handler", q.Name, key))
		}
	}
	return reader, inbox, errors.Join(errs...)
}

// names checks what the spec asks RabbitMQ to name: its queues, exchanges,
// routing keys and arguments (validateRoutes), and that the team's arguments
// name none of Lily's own, so that DeclareTopology can refuse what
// NewConsumer would.
func (q QueueSpec) names() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if q.Name == "" || len(q.Name) > 200 || strings.ContainsFunc(q.Name, isControl) {
		bad("queue name %q is empty, longer than 200 bytes or holds control characters", q.Name)
	}
	t := q.Topology
	switch {
	case t.DeadLetterQueue == "" || t.DeadLetterQueue == q.Name:
		bad("queue %s: the DLQ needs its own name", q.Name)
	case !isName(t.DeadLetterQueue):
		bad("queue %s: DLQ name %q is longer than 255 bytes or holds control characters", q.Name, t.DeadLetterQueue)
	case slices.ContainsFunc(t.RetryDelays, func(d time.Duration) bool { return queue.RetryBucket(q.Name, d) == t.DeadLetterQueue }):
		bad("queue %s: DLQ %s is named as one of the queue's retry buckets: its dead letters would come back into the queue", q.Name, t.DeadLetterQueue)
	}
	if k, ok := longKey(t.Arguments); ok {
		bad("queue %s: argument %q is longer than 255 bytes", q.Name, k)
	}
	for _, k := range slices.Sorted(maps.Keys(t.Arguments)) {
		if why := queue.LilysArgument(t.Type, k, t.Arguments[k]); why != "" {
			bad("queue %s: argument %q is Lily's own, not its team's: %s", q.Name, k, why)
		}
	}
	return errors.Join(append(errs, validateRoutes(q.Name, t))...)
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// maxShortstr is the longest AMQP short string: a queue, exchange or table
// key name, a routing key. amqp091-go refuses a longer one only as it
// writes the frame, and closes the whole connection for it, with every
// consumer and publisher on it: so the spec is refused first.
const maxShortstr = 255

// isName reports whether s can name a queue or exchange: 1 to 255 bytes,
// no control characters.
func isName(s string) bool {
	return s != "" && len(s) <= maxShortstr && !strings.ContainsFunc(s, isControl)
}

// longKey returns a key of table, or of a table within it, that is longer
// than a short string.
func longKey(table map[string]any) (string, bool) {
	for k, v := range table {
		if len(k) > maxShortstr {
			return k, true
		}
		var inner map[string]any
		switch t := v.(type) {
		case map[string]any:
			inner = t
		case amqp.Table:
			inner = t
		}
		if k, long := longKey(inner); long {
			return k, true
		}
	}
	return "", false
}

// messagesOf checks spec's messages against its routes and returns each
// message's inbox policy by wire type: every route's type must be among the
// messages, when the spec names them.
func messagesOf(spec QueueSpec, routes Routes) (map[string]envelope.Inbox, error) {
	inbox := make(map[string]envelope.Inbox, len(spec.Messages))
	var errs []error
	for _, m := range spec.Messages {
		if _, dup := inbox[m.Type]; dup {
			errs = append(errs, fmt.Errorf("queue %s: message type %q named twice", spec.Name, m.Type))
		}
		if m.Type == "" || len(m.Type) > 128 || strings.ContainsFunc(m.Type, func(r rune) bool { return r < 0x20 || r > 0x7e }) {
			errs = append(errs, fmt.Errorf("queue %s: message type %q is not 1..128 bytes of printable ASCII", spec.Name, m.Type))
		}
		switch m.Inbox {
		case "", envelope.InboxNone, envelope.InboxOptional, envelope.InboxRequired:
		default:
			errs = append(errs, fmt.Errorf("queue %s: message %q: unknown inbox policy %q", spec.Name, m.Type, m.Inbox))
		}
		if m.Inbox != envelope.InboxNone && m.Profile.NoID {
			errs = append(errs, fmt.Errorf("queue %s: message %q has no id to claim in the inbox: its inbox policy must be none", spec.Name, m.Type))
		}
		inbox[m.Type] = m.Inbox
	}
	if len(spec.Messages) > 0 {
		for key := range routes {
			if _, ok := inbox[key.Type]; !ok {
				errs = append(errs, fmt.Errorf("queue %s: route %+v: its type is not among the queue's messages", spec.Name, key))
			}
		}
	}
	return inbox, errors.Join(errs...)
}
