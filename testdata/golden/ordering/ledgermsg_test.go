package ledgermsg

import (
	"testing"
	"time"

	"github.com/lily-mq/lily/runtime"
)

// ledger.by-field retries in line, and its spec leaves the budget that
// takes to NewConsumer: whether through the generated constructor or
// runtime.NewConsumer itself, every step timeout is taken, a minute's too,
// which the 206 s lilygen works out at the default step would not carry.
// (That the budget carries every retry in line is the runtime's
// TestOrderedBudgetCarriesEveryRetry.)
func TestLedgerByFieldConsumerTakesEveryStepTimeout(t *testing.T) {
	for _, step := range []time.Duration{0, time.Second, 10 * time.Second, time.Minute} {
		cfg := runtime.Config{StepTimeout: step}
		if _, err := NewLedgerByFieldConsumer(UnimplementedLedgerByFieldHandler{}, cfg); err != nil {
			t.Errorf("NewLedgerByFieldConsumer, step timeout %s: %v", step, err)
		}
		if _, err := runtime.NewConsumer(LedgerByFieldQueueSpec(), LedgerByFieldRoutes(UnimplementedLedgerByFieldHandler{}), cfg); err != nil {
			t.Errorf("runtime.NewConsumer, step timeout %s: %v", step, err)
		}
	}
}
