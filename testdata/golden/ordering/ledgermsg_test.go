package ledgermsg

import (
	"testing"
	"time"

	"github.com/lily-mq/lily/runtime"
)

// The budget lilygen derives for ledger.by-field, whose retries wait in
// line, counts each attempt's steps at the default step timeout: the
// constructor grows it for a longer one, so that a consumer with a step
// timeout of a minute is not refused, and its retries still fit in line.
func TestNewLedgerByFieldConsumerStepTimeout(t *testing.T) {
	for _, step := range []time.Duration{0, time.Second, 10 * time.Second, time.Minute} {
		if _, err := NewLedgerByFieldConsumer(UnimplementedLedgerByFieldHandler{}, runtime.Config{StepTimeout: step}); err != nil {
			t.Errorf("step timeout %s: %v", step, err)
		}
	}
}
