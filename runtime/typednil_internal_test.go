package runtime

import (
	"context"
	"fmt"
	"testing"

	"github.com/lily-mq/lily/runtime/internal/outcome"
)

// A handler that returns a nil *QueueHandlerError (the typed nil of
// `var herr *QueueHandlerError; ...; return herr`) returned an error that is
// not nil, and proved no success: it fails, retryably, as an unclassified
// failure does, and says why, wrapped or not. Nothing about it may panic
// outside invoke's recover, where it would end the worker's goroutine, and
// the process with it.
func TestInvokeTypedNilHandlerErrorIsRetryable(t *testing.T) {
	for _, c := range []struct {
		name  string
		err   func() error
		cause string
	}{
		{"bare", func() error {
			var herr *QueueHandlerError
			return herr
		}, "retryable: nil *runtime.QueueHandlerError"},
		{"wrapped", func() error {
			var herr *QueueHandlerError
			return fmt.Errorf("charge: %w", herr)
		}, "charge: retryable: nil *runtime.QueueHandlerError"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var res outcome.HandlerResult
			if p := recovered(func() {
				res = invoke(context.Background(), func(context.Context, RawDelivery) error { return c.err() }, RawDelivery{})
			}); p != nil {
				t.Fatalf("invoke panicked outside its recover (would crash the worker goroutine): %v", p)
			}
			want := outcome.HandlerResult{Ran: true, Kind: outcome.KindRetryable, Cause: c.cause}
			if res != want {
				t.Errorf("invoke = %+v, want %+v", res, want)
			}
		})
	}
	var herr *QueueHandlerError
	if herr.Unwrap() != nil {
		t.Errorf("Unwrap of a nil *QueueHandlerError = %v, want nil", herr.Unwrap())
	}
}
