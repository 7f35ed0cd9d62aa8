package envelope

// The headers of Lily's wire contract: what its producers, its runtime and
// its tools (lilydlq) write and read beside a message's own headers. The
// runtime's guard names them from here, so there is one source.
const (
	// HeaderVersion holds a message's version in Lily's envelope: an
	// integer 1..1,000,000.
	HeaderVersion = "x-lily-version"
	// HeaderAttempt holds Lily's own count of a message's attempts, from 1
	// (absent means 1); the broker's x-death is never trusted for it.
	HeaderAttempt = "x-lily-attempt"
	// HeaderFailurePrefix starts the bounded, sanitized failure facts the
	// runtime writes on every retry and DLQ copy.
	HeaderFailurePrefix = "x-lily-failure-"
	// HeaderFailureReason says why the copy was made, at most 200 bytes.
	HeaderFailureReason = HeaderFailurePrefix + "reason"
	// HeaderFailureKind names the failure: a rejection (poison,
	// unsupported, oversized, quarantined) or the handler's result.
	HeaderFailureKind = HeaderFailurePrefix + "kind"
	// HeaderFailureAttempt is the attempt that failed.
	HeaderFailureAttempt = HeaderFailurePrefix + "attempt"
	// HeaderFailureQueue is the queue the copy was made from: where a
	// re-drive sends it back.
	HeaderFailureQueue = HeaderFailurePrefix + "queue"
	// HeaderFailureTime is when the copy was made, an AMQP timestamp to the
	// second, UTC.
	HeaderFailureTime = HeaderFailurePrefix + "time"
	// HeaderHandoffID carries a publish's own id, so that a Return is
	// matched to its publish and to no other.
	HeaderHandoffID = "x-lily-handoff-id"
	// HeaderRedriven counts how often lilydlq moved the message from a DLQ
	// back to its queue.
	HeaderRedriven = "x-lily-redriven"
	// HeaderRedrivenFrom names the DLQ of the last re-drive.
	HeaderRedrivenFrom = "x-lily-redriven-from"
)
