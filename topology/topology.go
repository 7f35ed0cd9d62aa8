// Package topology describes what a consumed queue needs on the broker: its
// type, its DLQ and delivery limit, the arguments its team sets, the exchanges
// its messages come through and the bindings that route them there, and which
// of these Lily declares (owned) and which it only checks (external).
//
// lilygen writes one Queue for each queue of a schema into the generated
// QueueSpec; the runtime declares from it each time it connects, and `lilygen
// topology` writes the same declarations as RabbitMQ definitions. The package
// holds data only and imports nothing but the standard library.
//
// Owned entities are declared with exactly these arguments, so RabbitMQ
// refuses a redeclare with others (406 PRECONDITION_FAILED) rather than let
// the consumer run on a topology its schema does not describe. External ones
// belong to another team: an external exchange or queue is checked with a
// passive declare, refused when missing (404 NOT_FOUND); an external binding
// is never declared, and AMQP offers no way to check it.
//
// What a refusal does depends on when the runtime meets it. At a consumer's
// first connection it ends Consumer.Run with the error, unless the consumer
// is given to runtime.Serve itself (not wrapped in a Service of the
// caller's): then it retries with backoff, not ready, until someone mends
// it, and the others run on. At a session opened after the consumer has
// consumed (a reconnect) a 406 or a missing external queue is retried so,
// under Serve or not, while a missing external exchange is declared past:
// the session consumes, and the absence is told as a drift (a
// topology-drifted line at error; Health ready, saying why). While a
// session consumes, the topology is declared again every 30 s, and any
// refusal then is told as a drift too, consuming going on
// (docs/runtime.md, "Connection loss").
package topology

import "time"

// Queue types.
const (
	Classic = "classic"
	Quorum  = "quorum"
)

// Exchange types.
const (
	Direct  = "direct"
	Topic   = "topic"
	Fanout  = "fanout"
	Headers = "headers"
)

// Queue is a consumed queue's place on the broker.
type Queue struct {
	// Type is the RabbitMQ queue type of the queue, its retry buckets and its
	// DLQ: Classic or Quorum.
	Type string
	// DeadLetterQueue receives permanent failures, exhausted retries, poison
	// envelopes and (broker-native) oversized bodies.
	DeadLetterQueue string
	// RetryDelays are the queue's retry buckets, <queue>.retry.<delay>, one
	// per delay, whose message TTL is the delay; <delay> is the delay's
	// String (1s, 1m0s, 1h0m0s). After attempt n fails retryably, the
	// message waits RetryDelays[min(n-1, len(RetryDelays)-1)] in its bucket
	// and comes back as attempt n+1 (QueueSpec.MaxAttempts bounds n).
	RetryDelays []time.Duration
	// DeliveryLimit is a quorum queue's x-delivery-limit: how often the broker
	// returns a message to the queue (a requeue, a channel closed with it
	// unacknowledged) before it dead-letters it; -1 for none, zero for 20.
	// Before that last return Lily dead-letters the message itself, with its
	// failure facts. A classic queue has none: zero.
	DeliveryLimit int
	// Arguments are the queue arguments its team sets, such as
	// x-single-active-consumer or x-max-priority, declared beside Lily's own.
	// They may not name Lily's own: x-queue-type (that is Type), the
	// dead-lettering (x-dead-letter-exchange, -routing-key and -strategy),
	// x-delivery-limit (that is DeliveryLimit), and on a quorum queue an
	// x-overflow other than reject-publish. The runtime refuses a spec that
	// does, rather than let one silently overwrite the other.
	Arguments map[string]any
	// External: the queue is another team's. Lily checks that it exists and
	// never declares it; its dead-lettering into DeadLetterQueue comes from
	// the policy `lilygen topology` writes (ByPolicy is implied).
	External bool
	// ByPolicy: Lily's own arguments of the queue and its retry buckets
	// (dead-lettering, message TTLs, the delivery limit) come from RabbitMQ
	// policies `lilygen topology` writes, not from its declarations, so that
	// a queue declared before, without them, is adopted without a 406. A
	// queue Lily declared with them cannot be switched to it in place: its
	// next declare, leaving them out, is refused (406) as well.
	ByPolicy bool
	// Exchanges are the exchanges Bindings name, sources before the
	// exchanges they bind to.
	Exchanges []Exchange
	// Bindings route messages to the queue, or from exchange to exchange
	// towards it, in declaration order.
	Bindings []Binding
}

// Exchange is one exchange a queue's messages come through.
type Exchange struct {
	Name string
	// Type is Direct, Topic, Fanout or Headers.
	Type string
	// Durable exchanges survive a broker restart.
	Durable bool
	// Internal exchanges take messages only from other exchanges.
	Internal bool
	// AlternateExchange receives what the exchange cannot route, or "".
	AlternateExchange string
	// External: another team's exchange, checked and never declared.
	External bool
}

// Binding routes messages from the exchange Source to the queue, or, when
// Exchange is set, to that exchange.
type Binding struct {
	Source string
	// Exchange is the destination of an exchange-to-exchange binding; "" for
	// a binding to the queue.
	Exchange string
	// RoutingKey is matched as Source's type says: equal (direct), a pattern
	// with * and # (topic); fanout and headers exchanges ignore it.
	RoutingKey string
	// Arguments of a headers binding: x-match (all or any) and the header
	// values to match.
	Arguments map[string]any
	// External: another team's binding, never declared.
	External bool
}
