package runtime

import (
	"context"
	"errors"
)

// Inbox deduplicates deliveries within one database, and no further: it
// claims a message id for one consumer inside the transaction that also
// carries the handler's business writes, so the claim commits exactly when
// the work does.
type Inbox interface {
	// Begin opens a transaction and claims (consumer, messageID) in it, within
	// ctx; the handler then runs in the transaction. An error that wraps
	// ErrDuplicate says the id already committed: the delivery is ACKed
	// without the handler. Any other error says the claim cannot be decided
	// now (a lease held by another worker, a lock timeout, no connection):
	// the runtime defers the delivery, which costs no retry, and the error
	// says why. On an error no transaction is left open.
	//
	// ctx bounds the Begin call alone: it ends as Begin returns, and the
	// transaction must outlive it. database/sql ties a transaction to the
	// context of its BeginTx and rolls it back when that ends, so an
	// adapter on it begins on context.WithoutCancel(ctx), bounding the
	// wait for a connection itself.
	Begin(ctx context.Context, consumer, messageID string) (InboxTx, error)
}

// InboxTx is the open transaction of a claim. The runtime calls exactly one
// of Commit and Rollback, once, after the handler has returned, save that a
// Commit that panicked is followed by one Rollback, which ends whatever the
// panic left open: an adapter need not allow any other second call.
type InboxTx interface {
	// Bind returns the handler's context, carrying the transaction for the
	// adapter's typed accessor. One that panics or returns nil defers the
	// delivery, its claim rolled back.
	Bind(ctx context.Context) context.Context
	// Commit commits the claim with the handler's writes, within ctx (the
	// step timeout, which also bounds finding out an unknown outcome, and
	// past which the runtime takes any answer for ambiguous: send the commit
	// under an earlier deadline, so that one cut there can still be looked
	// up). nil: committed. An error that wraps ErrCommitAmbiguous: the
	// outcome stays unknown after the adapter tried to find it out. Any other
	// error: not committed.
	Commit(ctx context.Context) error
	// Rollback abandons the claim and the handler's writes.
	Rollback(ctx context.Context)
}

var (
	// ErrDuplicate is what an Inbox's Begin wraps when the message id's work
	// has already committed.
	ErrDuplicate = errors.New("lily: duplicate: the inbox holds this message's committed work")
	// ErrCommitAmbiguous is what an InboxTx's Commit wraps when the commit's
	// outcome stays unknown: the delivery is deferred, and its redelivery meets
	// the claim if the commit went through.
	ErrCommitAmbiguous = errors.New("lily: the commit's outcome is unknown")
)
