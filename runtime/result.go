package runtime

import "errors"

// FailureKind says whether a failure may succeed when tried again.
type FailureKind int

// The kinds of handler failure.
const (
	// KindRetryable failures go to a retry bucket while attempts are left.
	KindRetryable FailureKind = iota + 1
	// KindPermanent failures go to the DLQ at once.
	KindPermanent
)

func (k FailureKind) String() string {
	switch k {
	case KindRetryable:
		return "retryable"
	case KindPermanent:
		return "permanent"
	case 0:
		return "none"
	}
	return "unknown"
}

// QueueHandlerError is a handler's failure with its kind.
//
// A handler returns nil, a *QueueHandlerError made by Retryable or Permanent, or
// a plain error. A plain error (one that wraps no QueueHandlerError) is treated
// as retryable: an unclassified failure is more often a passing fault, and the
// retry policy bounds how often it is tried before it reaches the DLQ.
type QueueHandlerError struct {
	Kind  FailureKind
	Cause error
}

func (e *QueueHandlerError) Error() string {
	if e.Cause == nil {
		return e.Kind.String() + " failure"
	}
	return e.Kind.String() + ": " + e.Cause.Error()
}

func (e *QueueHandlerError) Unwrap() error { return e.Cause }

// Retryable marks err as a failure worth trying again after a delay.
func Retryable(err error) error { return &QueueHandlerError{Kind: KindRetryable, Cause: err} }

// Permanent marks err as a failure no retry can mend: the message goes to the DLQ.
func Permanent(err error) error { return &QueueHandlerError{Kind: KindPermanent, Cause: err} }

// KindOf classifies a handler's error; nil errors have no kind (0).
func KindOf(err error) FailureKind {
	if err == nil {
		return 0
	}
	var qe *QueueHandlerError
	if errors.As(err, &qe) && qe.Kind != 0 {
		return qe.Kind
	}
	return KindRetryable
}

// MarshalText writes the kind by name in JSON reports.
func (k FailureKind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }
