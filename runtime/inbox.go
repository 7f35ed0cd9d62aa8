package runtime

import "context"

// Inbox deduplicates deliveries within one database, and no further: it
// claims a message id for one consumer inside the transaction that also
// carries the handler's business writes, so the claim commits exactly when
// the work does.
type Inbox interface {
	// Begin opens a transaction and claims (consumer, messageID) in it, within
	// ctx. On InboxClaimed the transaction is open and the handler runs in it.
	// On InboxDuplicate (the id already committed) or InboxDeferred (a lease
	// held by another worker, a lock timeout, transient errors that outlasted
	// their retries) there is no open transaction and tx is nil; reason says
	// why, briefly. An error is an infrastructure failure (no connection, say):
	// the runtime defers the delivery.
	Begin(ctx context.Context, consumer, messageID string) (tx InboxTx, status ClaimStatus, reason string, err error)
}

// InboxTx is the open transaction of a claim. The runtime calls Commit or
// Rollback once, after the handler has returned; a second call is a no-op.
type InboxTx interface {
	// Bind returns the handler's context, carrying the transaction for the
	// adapter's typed accessor.
	Bind(ctx context.Context) context.Context
	// Commit commits the claim with the handler's writes and says what the
	// database said: CommitCommitted, CommitFailed, or CommitAmbiguous when
	// the outcome stays unknown after the adapter tried, within ctx, to find
	// it out: ctx bounds the commit and that search together (the step
	// timeout, so leave it room). detail explains a failure, briefly.
	Commit(ctx context.Context) (evidence CommitEvidence, detail string)
	// Rollback abandons the claim and the handler's writes.
	Rollback(ctx context.Context)
}

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

// MarshalText writes the status by name in JSON reports.
func (s ClaimStatus) MarshalText() ([]byte, error) { return []byte(s.String()), nil }
