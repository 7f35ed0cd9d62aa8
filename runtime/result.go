package runtime

import (
	"errors"

	"github.com/lily-mq/lily/runtime/internal/outcome"
)

// QueueHandlerError is a handler's failure, retryable or permanent.
//
// A handler returns nil, an error made by Retryable or Permanent, or a plain
// error. A plain error (one that wraps no QueueHandlerError) is treated as
// retryable: an unclassified failure is more often a passing fault, and the
// retry policy bounds how often it is tried before it reaches the DLQ.
type QueueHandlerError struct {
	// Permanent failures go to the DLQ at once; the others to a retry bucket
	// while attempts are left.
	Permanent bool
	cause     error
}

func (e *QueueHandlerError) Error() string {
	kind := "retryable"
	if e.Permanent {
		kind = "permanent"
	}
	if e.cause == nil {
		return kind + " failure"
	}
	return kind + ": " + e.cause.Error()
}

// Unwrap returns the failure the error was made from.
func (e *QueueHandlerError) Unwrap() error { return e.cause }

// Retryable marks err as a failure worth trying again after a delay.
func Retryable(err error) error { return &QueueHandlerError{cause: err} }

// Permanent marks err as a failure no retry can mend: the message goes to the DLQ.
func Permanent(err error) error { return &QueueHandlerError{Permanent: true, cause: err} }

// kindOf classifies a handler's error; nil errors have no kind (0).
func kindOf(err error) outcome.FailureKind {
	if err == nil {
		return 0
	}
	if qe, ok := errors.AsType[*QueueHandlerError](err); ok && qe.Permanent {
		return outcome.KindPermanent
	}
	return outcome.KindRetryable
}
