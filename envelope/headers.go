package envelope

import "strings"

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
	// HeaderFailureType is the wire type the guard read, by the message's
	// envelope profile, where the failure was decided: at most MaxTypeBytes
	// of TypeText. Absent on a poison or quarantined copy, whose envelope
	// was not read.
	HeaderFailureType = HeaderFailurePrefix + "type"
	// HeaderFailureVersion is the version the guard read beside it, an
	// integer 1..MaxVersion.
	HeaderFailureVersion = HeaderFailurePrefix + "version"
	// HeaderHandoffID carries a publish's own id, so that a Return is
	// matched to its publish and to no other.
	HeaderHandoffID = "x-lily-handoff-id"
	// HeaderRedriven counts how often lilydlq moved the message from a DLQ
	// back to its queue.
	HeaderRedriven = "x-lily-redriven"
	// HeaderRedrivenFrom names the DLQ of the last re-drive.
	HeaderRedrivenFrom = "x-lily-redriven-from"
	// HeaderPoisonCopy marks the DLQ copy of a poison message. It keeps only
	// the original's identity, sanitized and cut (so an id the guard refused
	// may read as another, valid one), and its body: the guard refuses it as
	// poison wherever it is consumed, and lilydlq does not send it back. A
	// producer that writes it makes its own message poison.
	HeaderPoisonCopy = "x-lily-poison-copy"
)

// BrokerRecord reports whether a header is the broker's record of a
// message's life in its queues: x-death, x-first-death-*, x-last-death-*,
// x-delivery-count and x-acquired-count. A copy sent into a queue again (a
// retry, a re-drive) leaves them behind: RabbitMQ before 3.13 reads a
// published message's x-death in its dead-letter cycle check, and drops
// without a word a copy that expires from a retry bucket into a queue its
// x-death says it left before for a reason other than rejected; and a
// count belongs to the queue that kept it.
func BrokerRecord(name string) bool {
	switch {
	case name == "x-death", name == "x-delivery-count", name == "x-acquired-count",
		strings.HasPrefix(name, "x-first-death-"), strings.HasPrefix(name, "x-last-death-"):
		return true
	}
	return false
}

// CarriedHeader reports whether a producer's header named name reaches every
// copy of its message unchanged, so that a message's type, id, version or
// ordering key may be read from it: it is not Lily's own (x-lily-…), the
// broker's record (BrokerRecord) or a routing header (Routing), which a copy
// writes afresh or leaves behind.
func CarriedHeader(name string) bool {
	return !strings.HasPrefix(name, "x-lily-") && !BrokerRecord(name) && !Routing(name)
}

// Routing reports whether a header routes the message published with it:
// CC and BCC, RabbitMQ's sender-selected distribution, add routing keys. A
// copy published again (a retry, a DLQ copy, a re-drive) leaves them
// behind: the broker keeps CC on a delivery, and a copy carrying it would
// reach the queues it names a second time.
func Routing(name string) bool { return name == "CC" || name == "BCC" }
