package runtime

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// SupportsGeneratedCodeV3 is referred to by code lilygen generates: a runtime
// too old or too new for that code fails at compile time, not at run time.
// V3: extractors read with the wire package.
const SupportsGeneratedCodeV3 = true

// QueueType is the RabbitMQ queue type of a queue and of its retry buckets and DLQ.
type QueueType string

// The queue types Lily declares.
const (
	Classic QueueType = "classic"
	Quorum  QueueType = "quorum"
)

// RetryPolicy says how often a retryable failure is tried again, and after how long.
//
// Attempts count from 1. After attempt n fails retryably, the message waits
// Delays[min(n-1, len(Delays)-1)] in a retry bucket and comes back as attempt n+1,
// unless n has reached MaxAttempts: then it goes to the DLQ.
type RetryPolicy struct {
	Delays      []time.Duration
	MaxAttempts int
}

// QueueSpec is one queue's topology and policy, as generated from the schema.
type QueueSpec struct {
	Name        string
	Type        QueueType
	Prefetch    int
	Concurrency int
	Retry       RetryPolicy
	// DeadLetterQueue receives permanent failures, exhausted retries, poison
	// envelopes and (broker-native) oversized bodies.
	DeadLetterQueue string
	// MaxBodyBytes is the largest body handed to an extractor.
	MaxBodyBytes int
	// HandlerTimeout bounds one handler call; running out of it is a retryable failure.
	HandlerTimeout time.Duration
	// InboxRequired: the consumer refuses to run without a Config.Inbox.
	InboxRequired bool
	// SettlementBudget bounds the whole delivery, from receipt to settlement.
	// Zero means HandlerTimeout plus DefaultSettlementMargin.
	SettlementBudget time.Duration
}

// DefaultSettlementMargin is the time left for handoff and settlement after the
// handler's own timeout, when a queue sets no settlement budget.
const DefaultSettlementMargin = 30 * time.Second

// Budget is the settlement budget of each delivery of this queue.
func (q QueueSpec) Budget() time.Duration {
	if q.SettlementBudget > 0 {
		return q.SettlementBudget
	}
	return q.HandlerTimeout + DefaultSettlementMargin
}

// RetryBucket names the retry bucket queue that holds messages for delay d.
func (q QueueSpec) RetryBucket(d time.Duration) string {
	return q.Name + ".retry." + d.String()
}

// Validate reports every problem with the spec at once.
func (q QueueSpec) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if q.Name == "" || len(q.Name) > 200 || strings.ContainsFunc(q.Name, isControl) {
		bad("queue name %q is empty, longer than 200 bytes or holds control characters", q.Name)
	}
	if q.Type != Classic && q.Type != Quorum {
		bad("queue %s: type %q is neither classic nor quorum", q.Name, q.Type)
	}
	if q.Prefetch < 1 || q.Prefetch > 65535 || q.Concurrency < 1 {
		bad("queue %s: prefetch must be 1..65535 and concurrency at least 1", q.Name)
	}
	if q.Retry.MaxAttempts < 1 || q.Retry.MaxAttempts > DefaultLimits.MaxAttempt {
		bad("queue %s: max attempts must be 1..%d", q.Name, DefaultLimits.MaxAttempt)
	}
	if q.Retry.MaxAttempts > 1 && len(q.Retry.Delays) == 0 {
		bad("queue %s: retries need at least one bucket delay", q.Name)
	}
	for _, d := range q.Retry.Delays {
		if d <= 0 {
			bad("queue %s: retry delay %s is not positive", q.Name, d)
		}
	}
	if q.DeadLetterQueue == "" || q.DeadLetterQueue == q.Name {
		bad("queue %s: the DLQ needs its own name", q.Name)
	}
	if q.MaxBodyBytes < 1 || q.HandlerTimeout <= 0 {
		bad("queue %s: body limit and handler timeout must be positive", q.Name)
	}
	if q.SettlementBudget != 0 && q.SettlementBudget < q.HandlerTimeout+handoffReserve {
		bad("queue %s: settlement budget %s leaves less than %s after the handler timeout for handoff and settlement", q.Name, q.SettlementBudget, handoffReserve)
	}
	return errors.Join(errs...)
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }
