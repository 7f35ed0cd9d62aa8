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
//
// A nil *QueueHandlerError returned as an error (Go's typed nil, as in
// `var herr *QueueHandlerError; ...; return herr`) is not a nil error, and
// proves no success: it is a retryable failure, as an unclassified one is,
// whose reason reads "nil *runtime.QueueHandlerError". Its methods answer
// for it, wrapped or not.
type QueueHandlerError struct {
	// Permanent failures go to the DLQ at once; the others to a retry bucket
	// while attempts are left.
	Permanent bool
	cause     error
}

func (e *QueueHandlerError) Error() string {
	if e == nil {
		return "retryable: nil *runtime.QueueHandlerError"
	}
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
func (e *QueueHandlerError) Unwrap() error {
	if e == nil {
		return nil
	}
	return e.cause
}

// Retryable marks err as a failure worth trying again after a delay.
func Retryable(err error) error { return &QueueHandlerError{cause: err} }

// Permanent marks err as a failure no retry can mend: the message goes to the DLQ.
func Permanent(err error) error { return &QueueHandlerError{Permanent: true, cause: err} }

// kindOf classifies a handler's error; nil errors have no kind (0), and a
// nil *QueueHandlerError, which is not a nil error, is retryable.
func kindOf(err error) outcome.FailureKind {
	if err == nil {
		return 0
	}
	if qe, ok := errors.AsType[*QueueHandlerError](err); ok && qe != nil && qe.Permanent {
		return outcome.KindPermanent
	}
	return outcome.KindRetryable
}
