package ledgermsg

import (
	"testing"
	"time"

	"github.com/lily-mq/lily/runtime"
)

// The budget lilygen derives for ledger.by-field, whose retries wait in
// line, counts each attempt's steps at the default step timeout: the
// constructor grows it for a longer one. At a step timeout of a minute
// NewConsumer refuses the spec's own budget, too short for one attempt, and
// takes the constructor's. (That the grown budget carries every retry in
// line, each step spending its whole timeout, is decide's
// TestParkBudgetCarriesEveryRetry: this package cannot reach decide.)
func TestNewLedgerByFieldConsumerStepTimeout(t *testing.T) {
	for _, step := range []time.Duration{0, time.Second, 10 * time.Second, time.Minute} {
		if _, err := NewLedgerByFieldConsumer(UnimplementedLedgerByFieldHandler{}, runtime.Config{StepTimeout: step}); err != nil {
			t.Errorf("step timeout %s: %v", step, err)
		}
	}
	cfg := runtime.Config{StepTimeout: time.Minute}
	if _, err := runtime.NewConsumer(LedgerByFieldQueueSpec(), LedgerByFieldRoutes(UnimplementedLedgerByFieldHandler{}), cfg); err == nil {
		t.Error("NewConsumer took the spec's own budget at a step timeout of a minute")
	}
}
