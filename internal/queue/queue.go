// Package queue holds what the runtime that declares a queue's topology and
// lilygen that writes it down must agree on: the names of a queue's retry
// buckets, the arguments of each queue it declares, the exchanges and
// bindings that route to it, the policies that may carry Lily's arguments
// instead, and a delivery's settlement budget. It depends on the standard
// library and the topology package only.
//
// Lily's own queues are routed through the default exchange, so that a
// handoff's mandatory publish is routed by queue name alone and a missing
// queue shows up as a Return; other exchanges only bring messages to <name>:
//
//	<name>               the main queue; dead-letters (oversized bodies) to <dlq>
//	<name>.retry.<delay> one retry bucket per delay; its message TTL is the delay,
//	                     and expired messages dead-letter back to <name>
//	<dlq>                the dead-letter queue
//
// All are durable and of the queue's type. Classic queues dead-letter at most
// once: RabbitMQ can lose a message between a bucket and the main queue if it
// fails at that moment; quorum queues dead-letter at least once. Declaring is
// idempotent; a queue that exists with other arguments is refused by the
// broker (406).
//
// A quorum queue counts how often the broker returns each message to it (a
// requeue, a channel closed with the message unacknowledged) and dead-letters
// it past its delivery limit. RabbitMQ 4 gives every quorum queue a limit of
// 20 unless one is declared, and reads -1 as none; before 4 there is no
// default, and -1 dead-letters at the first return. So "no limit" is written
// for the broker's major version: -1 from 4 on, nothing before.
package queue

import (
	"maps"
	"strings"
	"time"

	"github.com/lily-mq/lily/topology"
)

// The queue types Lily declares.
const (
	Classic = topology.Classic
	Quorum  = topology.Quorum
)

// SettlementMargin is the time left for handoff and settlement after
// the handler's own timeout, when a queue sets no settlement budget.
const SettlementMargin = 30 * time.Second

// MaxBodyBytes is RabbitMQ's own ceiling on a message body: the most a
// queue's max_body_bytes may be.
const MaxBodyBytes = 512 << 20

// MaxDuration is RabbitMQ's longest message TTL, 2³²−1 ms (about 49.7
// days): the longest retry delay a bucket can hold, and the longest any
// other of a queue's durations may be, so that sums of them cannot wrap.
const MaxDuration = (1<<32 - 1) * time.Millisecond

// Topology is what a queue's declarations depend on.
type Topology struct {
	Name string
	topology.Queue
	// BrokerMajor is the major version of the RabbitMQ the declarations are
	// for: it decides how a quorum queue's "no limit" is written.
	BrokerMajor int
}

// DeliveryLimit is the main queue's delivery limit: zero for a classic
// queue, DefaultDeliveryLimit for a quorum queue that names none.
func (t Topology) DeliveryLimit() int {
	if t.Type == Quorum && t.Queue.DeliveryLimit == 0 {
		return DefaultDeliveryLimit
	}
	return t.Queue.DeliveryLimit
}

// NoDeliveryLimit is the delivery limit of a queue the broker never
// dead-letters for its returns, and of every quorum DLQ: inspecting a DLQ
// (a get and a requeue) must never drop a copy.
const NoDeliveryLimit = -1

// DefaultDeliveryLimit is a quorum queue's delivery limit when its schema
// names none: RabbitMQ 4's own default, declared on every version so that a
// broker upgrade changes nothing.
const DefaultDeliveryLimit = 20

// Declaration is one queue Lily declares: durable, not auto-deleted, with
// these arguments.
type Declaration struct {
	Name string
	Args map[string]any
	// Passive: the queue is another team's, only checked.
	Passive bool
	// KeepTypeAndLimit: a queue of this name that exists already keeps its own
	// type, classic or quorum, and its own way of writing "no delivery limit";
	// any other argument or value that differs (a limit, a stream) is refused
	// (406), as any owned queue's. The DLQ's: how a quorum DLQ's "no delivery
	// limit" is written depends on the broker's version, and one declared before
	// an upgrade must not stop its queue's consumer; and a DLQ shared by a
	// classic and a quorum queue is of whichever declared it first.
	KeepTypeAndLimit bool
}

// DefaultStepTimeout is the runtime's step timeout when Config.StepTimeout
// is not set. Around each handler call it keeps one for each of the claim,
// commit, cleanup and after_delivery steps, and one more for the scope's
// opening when the service sets a Config.Scope.
const DefaultStepTimeout = 5 * time.Second

// ParkSteps are the steps around each handler call that lilygen's and the
// linter's figure of an ordered queue's budget counts: the claim, commit,
// cleanup and after_delivery, and the scope's opening (a schema cannot know
// whether its service sets a Config.Scope).
const ParkSteps = 5

// ParkBudget is the settlement budget an ordered queue needs to retry each
// failure in line up to its last attempt: every handler call with the steps
// around it, each as long as step, every retry delay between them, and
// SettlementMargin for the handoff and the rest.
func ParkBudget(handlerTimeout time.Duration, delays []time.Duration, maxAttempts, steps int, step time.Duration) time.Duration {
	b := time.Duration(maxAttempts)*(handlerTimeout+time.Duration(steps)*step) + SettlementMargin
	for n := 1; n < maxAttempts && len(delays) > 0; n++ {
		b += delays[min(n-1, len(delays)-1)]
	}
	return b
}

// RetryBucket names the retry bucket of queue for delay d.
func RetryBucket(queue string, d time.Duration) string {
	return queue + ".retry." + d.String()
}

// IsRetryBucket reports whether bucket is one of queue's retry buckets, as
// RetryBucket names them.
func IsRetryBucket(bucket, queue string) bool {
	delay, ok := strings.CutPrefix(bucket, queue+".retry.")
	if !ok {
		return false
	}
	d, err := time.ParseDuration(delay)
	return err == nil && d.String() == delay
}

// MinBudget is the least settlement budget the runtime accepts for a queue
// at its default step timeout: the handler call, its four steps and the
// reserve a handoff keeps (decide.HandoffReserve, 2 s). A shorter step
// timeout lowers it.
func MinBudget(handlerTimeout time.Duration) time.Duration {
	return handlerTimeout + 4*DefaultStepTimeout + 2*time.Second
}

// Budget is the settlement budget of each delivery of a queue: budget, or,
// when it is zero, the handler timeout plus SettlementMargin.
func Budget(handlerTimeout, budget time.Duration) time.Duration {
	if budget > 0 {
		return budget
	}
	return handlerTimeout + SettlementMargin
}

// Declarations lists the queues of t in declaration order: the DLQ, the
// retry buckets, the main queue. The runtime declares exactly these, and
// `lilygen topology` writes them as RabbitMQ definitions. When Lily's
// arguments come from policies (Policies), each carries only its type and
// the arguments its team sets. An external main queue is only checked, and
// first: a name its owner never declared (a typo) must not leave a DLQ and
// retry buckets of that name on the broker before its 404.
func Declarations(t Topology) []Declaration {
	var decls []Declaration
	for _, q := range t.queues() {
		args := q.fixed
		if !t.ByPolicy && !t.External {
			args = q.all()
		}
		decls = append(decls, Declaration{Name: q.name, Args: args, KeepTypeAndLimit: q.name == t.DeadLetterQueue})
	}
	if t.External {
		main := decls[len(decls)-1]
		main.Passive = true
		decls = append([]Declaration{main}, decls[:len(decls)-1]...)
	}
	return decls
}

// queueArgs are one queue's arguments, split by whether a policy may carry
// them: fixed ones (the type, and what its team sets, some of which no
// policy can) and Lily's own.
type queueArgs struct {
	name         string
	fixed, lilys map[string]any
}

// all is every argument of q, as its declaration carries them.
func (q queueArgs) all() map[string]any {
	args := make(map[string]any, len(q.fixed)+len(q.lilys))
	maps.Copy(args, q.fixed)
	maps.Copy(args, q.lilys)
	return args
}

// queues lists t's queues in declaration order, with their arguments.
func (t Topology) queues() []queueArgs {
	dlq := t.withType(t.DeadLetterQueue, map[string]any{}, map[string]any{})
	mainFixed := maps.Clone(t.Arguments)
	if mainFixed == nil {
		mainFixed = map[string]any{}
	}
	main := t.withType(t.Name, mainFixed, map[string]any{
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": t.DeadLetterQueue,
	})
	if t.Type == Quorum {
		t.limit(dlq.lilys, NoDeliveryLimit)
		t.limit(main.lilys, t.DeliveryLimit())
	}
	out := []queueArgs{dlq}
	for _, d := range t.RetryDelays {
		out = append(out, t.withType(RetryBucket(t.Name, d), map[string]any{}, map[string]any{
			"x-message-ttl":             d.Milliseconds(),
			"x-dead-letter-exchange":    "",
			"x-dead-letter-routing-key": t.Name,
		}))
	}
	return append(out, main)
}

// limit writes a quorum queue's delivery limit n into args, as t's broker
// reads it.
func (t Topology) limit(args map[string]any, n int) {
	switch {
	case n > 0:
		args["x-delivery-limit"] = int64(n)
	case n == NoDeliveryLimit && t.BrokerMajor >= 4:
		args["x-delivery-limit"] = int64(NoDeliveryLimit)
	}
}

// withType adds the queue type's arguments. Classic queues name their type
// too: in a vhost whose default queue type is quorum, a queue declared
// without x-queue-type is made a quorum queue. RabbitMQ holds a classic
// queue declared without it equivalent to one declared with it, either way,
// so queues declared before (by hand, an older tool, or Lily before it named
// the type) are adopted as they are.
func (t Topology) withType(name string, fixed, lilys map[string]any) queueArgs {
	fixed["x-queue-type"] = t.Type
	if t.Type == Quorum {
		if _, dl := lilys["x-dead-letter-routing-key"]; dl {
			// Quorum queues can dead-letter at least once (RabbitMQ 3.10+): an
			// expiring retry copy or an oversized body then cannot be lost
			// between the queues. The strategy requires reject-publish overflow.
			lilys["x-dead-letter-strategy"] = "at-least-once"
			lilys["x-overflow"] = quorumOverflow
		}
	}
	return queueArgs{name: name, fixed: fixed, lilys: lilys}
}

// deadLetters is why a team cannot set a queue's dead-lettering.
const deadLetters = "Lily dead-letters the queue into Topology.DeadLetterQueue"

// lilysArguments are the arguments of a main queue that Lily sets itself,
// on either type, with why a team's cannot stand beside them. Declared, Lily's
// would overwrite the team's unannounced; by policy, the team's, declared,
// would beat the policy's, and the queue would dead-letter elsewhere.
var lilysArguments = map[string]string{
	"x-queue-type":              "the queue's type is Topology.Type",
	"x-dead-letter-exchange":    deadLetters,
	"x-dead-letter-routing-key": deadLetters,
	"x-dead-letter-strategy":    deadLetters,
	"x-delivery-limit":          "the delivery limit is Topology.DeliveryLimit",
}

// quorumOverflow is the x-overflow of a quorum queue that dead-letters at
// least once (withType): a team may set it too, and no other.
const quorumOverflow = "reject-publish"

// LilysArgument reports why a main queue of type typ cannot carry key, with
// value, among the arguments its team sets (topology.Queue.Arguments), or ""
// when it can: Lily sets that argument itself.
func LilysArgument(typ, key string, value any) string {
	if why, ok := lilysArguments[key]; ok {
		return why
	}
	if key == "x-overflow" && typ == Quorum && value != quorumOverflow {
		return "a quorum queue dead-letters at least once, which needs " + quorumOverflow
	}
	return ""
}
