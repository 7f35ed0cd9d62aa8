package runtime

import (
	"sync"
	"sync/atomic"
	"testing"
)

// Every handler that starts before the final abort is counted by it, and
// none starts after: with starts racing the seal, the seal's count of
// handlers whose end it did not observe is exactly the starts admitted.
func TestHandlerCountSealAdmitsNoLateStart(t *testing.T) {
	for range 100 {
		var h handlerCount
		h.start()
		h.end()
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				if h.start() {
					admitted.Add(1)
				}
			})
		}
		h.seal()
		abandoned := h.running()
		wg.Wait()
		if int64(abandoned) != admitted.Load() {
			t.Fatalf("the seal counted %d handlers not ended; %d were admitted", abandoned, admitted.Load())
		}
		if h.start() {
			t.Fatal("a handler started after the seal")
		}
	}
}
