package lilytest_test

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/runtime/internal/fixture"
	"github.com/lily-mq/lily/runtime/lilytest"
)

// panicNil is what the runtime says of a panic(nil): the text of the
// *runtime.PanicNilError Go raises for it unless GODEBUG=panicnil=1.
const panicNil = "panic: panic called with nil argument"

// Under GODEBUG=panicnil=1, which a service may set (//go:debug
// panicnil=1), recover returns nil for a panic(nil) yet still ends the
// panic: user code that panics with nil fails as any panic does. A handler
// is retried, not acked; a cleanup, an after_delivery or a Commit fails;
// an OrderKey is logged, and its delivery handled once. The setting is the
// process's, so the test runs itself again under it.
func TestUserCodePanickingWithNil(t *testing.T) {
	t.Parallel()
	if os.Getenv("LILY_PANICNIL_CHILD") != "1" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestUserCodePanickingWithNil$", "-test.v")
		cmd.Env = append(os.Environ(), "GODEBUG=panicnil=1", "LILY_PANICNIL_CHILD=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestUserCodePanickingWithNil") {
			t.Fatalf("under GODEBUG=panicnil=1: %v\n%s", err, out)
		}
		return
	}
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Fatalf("GODEBUG=panicnil=1 not in effect: recovered %v", p)
			}
		}()
		panic(nil)
	}()

	t.Run("handler", func(t *testing.T) {
		h := harness(t, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error { panic(nil) })
		res := h.Deliver(order(t, "nil-1"))
		wantPath(t, res, runtime.PathRetried)
		if res.Handler != "panicked" || !strings.Contains(res.Reason, panicNil) || res.NextAttempt() != 2 {
			t.Errorf("result %+v", res)
		}
	})
	for _, step := range []struct {
		name  string
		tweak func(on *atomic.Bool) func(*runtime.Config)
	}{
		{"cleanup", func(on *atomic.Bool) func(*runtime.Config) { return withCleanup(on, func() error { panic(nil) }) }},
		{"after_delivery", func(on *atomic.Bool) func(*runtime.Config) { return withAfterDelivery(on, func() error { panic(nil) }) }},
	} {
		t.Run(step.name, func(t *testing.T) {
			var on atomic.Bool
			on.Store(true)
			h := harness(t, ok, step.tweak(&on))
			res := h.Deliver(order(t, "nil-2"))
			wantPath(t, res, runtime.PathRetried)
			if want := step.name + " failed on attempt 1 of 3: " + step.name + ": " + panicNil; res.Reason != want {
				t.Errorf("reason %q, want %q", res.Reason, want)
			}
		})
	}
	t.Run("commit", func(t *testing.T) {
		in := &oddCommit{do: func() { panic(nil) }}
		h := harness(t, ok, func(cfg *runtime.Config) { cfg.Inbox = in })
		res := h.Deliver(order(t, "nil-3"))
		wantPath(t, res, runtime.PathRequeued)
		if res.Commit != "ambiguous" || in.commits.Load() != 1 || in.rollbacks.Load() != 1 {
			t.Errorf("result %+v; Commit calls %d, Rollback calls %d, want 1 each", res, in.commits.Load(), in.rollbacks.Load())
		}
	})
	t.Run("Bind", func(t *testing.T) {
		in := nilBind{&oddCommit{}}
		h := harness(t, ok, func(cfg *runtime.Config) { cfg.Inbox = in })
		res := h.Deliver(order(t, "nil-5"))
		wantPath(t, res, runtime.PathRequeued)
		if want := "inbox: Bind panicked: panic called with nil argument"; !strings.Contains(res.Reason, want) || res.Handler != "" || in.rollbacks.Load() != 1 {
			t.Errorf("result %+v; Rollback calls %d; want the reason %q, no handler, one Rollback", res, in.rollbacks.Load(), want)
		}
	})
	t.Run("OrderKey", func(t *testing.T) {
		spec := fixture.LilytestQueueSpec()
		spec.OrderKey = func(map[string]any, []byte) string { panic(nil) }
		var mu sync.Mutex
		var logged []string
		logger := slog.New(handlerOf(func(r slog.Record) {
			if r.Level != slog.LevelError {
				return
			}
			r.Attrs(func(a slog.Attr) bool {
				if a.Key == "detail" {
					mu.Lock()
					logged = append(logged, r.Message+": "+a.Value.String())
					mu.Unlock()
				}
				return true
			})
		}))
		var calls atomic.Int32
		h, err := lilytest.New(spec, fixture.LilytestRoutes(handler(func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error {
			calls.Add(1)
			return nil
		})), runtime.Config{Logger: logger})
		if err != nil {
			t.Fatal(err)
		}
		res := h.Deliver(order(t, "nil-4"))
		h.Close()
		wantPath(t, res, runtime.PathAcked)
		want := "lily OrderKey panicked; the delivery is ordered only behind others whose key panicked: panic called with nil argument"
		mu.Lock()
		defer mu.Unlock()
		if len(logged) != 1 || logged[0] != want || calls.Load() != 1 {
			t.Errorf("logged %q, handler calls %d; want %q, 1", logged, calls.Load(), want)
		}
	})
}

// nilBind is an inbox whose transaction's Bind panics with nil.
type nilBind struct{ *oddCommit }

func (b nilBind) Begin(context.Context, string, string) (runtime.InboxTx, error) { return b, nil }
func (nilBind) Bind(context.Context) context.Context                             { panic(nil) }
