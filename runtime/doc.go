// Package runtime consumes a RabbitMQ queue and settles every delivery by one
// decision table, with evidence. Code that lilygen generates from a schema
// plugs into it: a QueueSpec (the queue's topology and policy), Routes (the
// dispatch table) and a constructor that returns a Consumer. You implement
// the generated handler interface; each method returns an error.
//
// A service's main hands its consumers to Serve, which runs them (and any
// other Service, such as an outbox relay) until its context is done or
// SIGINT or SIGTERM comes, shuts them down together and returns one
// Report. A Publisher sends the service's own messages, each Send answered
// by the broker's word: nil only once the broker confirmed the message and
// routed it to a queue. Named in Config.Publisher, it carries the
// consumers' retry and DLQ copies too. Package runtime/lilytest runs a
// consumer's journey with a fake broker in RabbitMQ's place, to test
// handlers without one.
//
// A delivery travels one way: a frame filter on the socket (a content header
// the AMQP client could not decode is replaced, and the delivery
// dead-lettered, so that it closes no connection), the guard (body size,
// bounded headers, the canonical envelope), dispatch by type, version and
// content type, an
// optional Scope, an optional Inbox claim, your handler, the commit, the
// cleanup and AfterDelivery; then the runtime decides and settles:
//
//   - nil, and every step after it succeeded: ACK;
//   - a Retryable failure with attempts left: a mandatory publish to the
//     retry bucket, its confirm, then the ACK of the original;
//   - a Permanent failure, retries exhausted, poison, or an unsupported
//     version: the same to the dead-letter queue;
//   - a handoff that failed, or an inbox that cannot decide now: one paced
//     NACK with requeue, which spends no retry;
//   - a body over the limit, or headers the client could not decode: a NACK
//     without requeue, so the broker dead-letters it before anything reads it.
//
// A lost connection is reconnected; a consumer the broker cancels (a deleted
// queue, a consumer timeout) subscribes again on a new channel while the old
// one settles what it holds; and a channel that holds a delivery past its
// budget, or that a quorum queue no longer feeds though it holds ready
// messages, is recycled, which hands what it held back to the broker.
//
// A handler never sees an acknowledger, a delivery tag or a channel:
// RawDelivery is a read-only view. Every broker step is bounded in time, and
// each delivery has a settlement budget; what cannot be settled with proof
// is left to the broker and listed in the Report that Run returns. Each
// delivery's Record goes to Config.Observe, and every stage of its journey
// to Config.Logger as an slog record with stable keys.
//
// What Lily does not promise is exactly-once: a redelivered message may run
// your handler again. The transactional inbox deduplicates within one
// database, and no further.
package runtime
