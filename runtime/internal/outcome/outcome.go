// Package outcome is the evidence Lily gathers about one delivery on its
// journey, each kind kept apart: why the guard or dispatch stopped it, what
// the handler returned, what the inbox and the database said, what the broker
// said of a handoff, and what became of the original delivery. Each stage adds
// to an Outcome; decide reads it.
package outcome

import "fmt"

// Rejection says why a delivery never reached a handler.
type Rejection int

// The ways a delivery is stopped before user code.
const (
	NotRejected Rejection = iota
	// RejectOversized: the body is over the queue's limit; the broker dead-letters it.
	RejectOversized
	// RejectPoison: the envelope is invalid or its metadata is out of bounds.
	RejectPoison
	// RejectUnsupported: no route for the type, version and content type.
	RejectUnsupported
	// RejectQuarantined: the AMQP client could not decode the content header;
	// the broker dead-letters the delivery, intact.
	RejectQuarantined
)

var rejectionNames = [...]string{"none", "oversized", "poison", "unsupported", "quarantined"}

func (r Rejection) String() string { return enumName(rejectionNames[:], int(r)) }

// FailureKind says whether a failure may succeed when tried again.
type FailureKind int

// The kinds of handler failure.
const (
	// KindRetryable failures go to a retry bucket while attempts are left.
	KindRetryable FailureKind = iota + 1
	// KindPermanent failures go to the DLQ at once.
	KindPermanent
)

var kindNames = [...]string{"none", "retryable", "permanent"}

func (k FailureKind) String() string { return enumName(kindNames[:], int(k)) }

// ClaimStatus is the inbox's answer to a claim.
type ClaimStatus int

// The answers an inbox gives.
const (
	InboxClaimed ClaimStatus = iota + 1
	InboxDuplicate
	InboxDeferred
)

var claimNames = [...]string{"", "claimed", "duplicate", "deferred"}

func (s ClaimStatus) String() string { return enumName(claimNames[:], int(s)) }

// HandlerResult is the first kind of evidence: what the handler returned.
type HandlerResult struct {
	Ran  bool
	Kind FailureKind // 0 when the handler succeeded
	// Cause is the failure, sanitized and bounded; empty on success.
	Cause    string
	Panicked bool
	TimedOut bool
	// Cancelled: the forced shutdown cancelled the handler. That is the
	// consumer's doing, not the message's, so it costs no application retry.
	Cancelled bool
	// Abandoned: the handler was still running when the wait for it ended.
	Abandoned bool
}

// CommitEvidence is the second kind: what the database said. The inbox fills it.
type CommitEvidence int

// The commit evidence a delivery can carry.
const (
	CommitNotRequired CommitEvidence = iota
	CommitCommitted
	CommitFailed
	CommitAmbiguous
	// CommitRolledBack: the handler failed, so its transaction is never
	// committed; it is rolled back.
	CommitRolledBack
	// CommitRollbackPending: the handler was abandoned (at its timeout or
	// the final abort) and may still use its transaction, which is rolled
	// back once it returns: not yet when the delivery is settled.
	CommitRollbackPending
)

var commitNames = [...]string{"not required", "committed", "failed", "ambiguous", "rolled back", "rollback pending"}

func (c CommitEvidence) String() string { return enumName(commitNames[:], int(c)) }

// HandoffStatus is the third kind: whether the broker accepted a handoff publish.
type HandoffStatus int

// The handoff evidence a delivery can carry.
const (
	HandoffNone HandoffStatus = iota
	HandoffConfirmed
	// HandoffReturned: the broker confirmed the publish but could not route it.
	HandoffReturned
	HandoffNacked
	HandoffTimedOut
	HandoffFailed
)

var handoffNames = [...]string{"none", "confirmed", "returned", "nacked", "timed out", "failed"}

func (h HandoffStatus) String() string { return enumName(handoffNames[:], int(h)) }

// HandoffEvidence records one handoff attempt.
type HandoffEvidence struct {
	Destination string
	Status      HandoffStatus
	Detail      string
	// Published: the publish was written before the handoff failed (no
	// confirm in time, the channel closed, a nack): the copy may exist all
	// the same.
	Published bool
}

// SettlementStatus is the fourth kind: what happened to the original delivery.
type SettlementStatus int

// The settlement evidence a delivery can carry.
const (
	NotSettled SettlementStatus = iota
	AckSent
	// NackSent covers both the requeueing NACK and the dead-lettering one.
	NackSent
	// SettlementAmbiguous: the ACK or NACK write failed; the broker may or may not have it.
	SettlementAmbiguous
	// SettlementNotAttempted: the runtime had no authority or budget left to try.
	SettlementNotAttempted
)

var settlementNames = [...]string{"not settled", "ack sent", "nack sent", "ambiguous", "not attempted"}

func (s SettlementStatus) String() string { return enumName(settlementNames[:], int(s)) }

// SettlementEvidence records what the runtime did with the original delivery.
type SettlementEvidence struct {
	Status  SettlementStatus
	Requeue bool
	Detail  string
}

// Outcome is all the evidence gathered about one delivery so far. Each stage of
// the journey adds to it; decide reads it.
type Outcome struct {
	Rejection Rejection
	// Reason explains a rejection, a deferral or a failed commit, sanitized
	// and bounded.
	Reason  string
	Handler HandlerResult
	// Claim is the inbox's answer; 0 when the consumer has no inbox.
	Claim  ClaimStatus
	Commit CommitEvidence
	// Deferred: the inbox could not decide now, or the same work is still
	// running from a lost channel; Reason says which.
	Deferred bool
	// Cleanup and AfterDelivery hold the failure of those steps; empty when
	// they succeeded or did not run.
	Cleanup       string
	AfterDelivery string
	// CompletedEarlier: this message's attempt already completed its work in
	// this process, but that delivery's ACK was ambiguous or never sent.
	CompletedEarlier bool
	// StepAbandoned: a step of user code around the handler (the scope's
	// open or cleanup, after_delivery) was still running when the journey
	// stopped waiting for it.
	StepAbandoned bool
	// ParkEnded: the consumer began to stop while the delivery's retry
	// waited in line.
	ParkEnded  bool
	Handoff    HandoffEvidence
	Settlement SettlementEvidence
	// PriorRequeues counts the bounded requeues this process already made for
	// this message (by its id, or without one by a fingerprint); it lengthens
	// the pause before the next one.
	PriorRequeues int
	// InLine counts the times this delivery already waited in line (an
	// ordered queue's retry or deferral); it lengthens a deferral's next wait.
	InLine int
	// DeliveryCount is a quorum queue's count of this message's earlier
	// returns to it (its x-delivery-count header), 0 elsewhere.
	DeliveryCount int
}

func enumName(names []string, i int) string {
	if i >= 0 && i < len(names) {
		return names[i]
	}
	return fmt.Sprintf("unknown(%d)", i)
}
