package runtime

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"

	"github.com/lily-mq/lily/runtime/internal/decide"
	"github.com/lily-mq/lily/runtime/internal/sanitize"
)

// guardedHandler is Config.Logger's handler as the runtime logs through
// it. The handler is user code, as Observe is, and the runtime logs on
// every delivery's goroutine: a panic there, loose, would end the process
// and every delivery in flight with it, every queue a Serve runs. So a
// panic is recovered and its record dropped; the first is written to
// standard error, the one place left to say it.
type guardedHandler struct {
	h    slog.Handler
	told *atomic.Bool
}

// guardLogger returns l logging through a guardedHandler, once.
func guardLogger(l *slog.Logger) *slog.Logger {
	if _, ok := l.Handler().(guardedHandler); ok {
		return l
	}
	return slog.New(guardedHandler{h: l.Handler(), told: new(atomic.Bool)})
}

func (g guardedHandler) Enabled(ctx context.Context, level slog.Level) bool {
	defer g.recovered()
	return g.h.Enabled(ctx, level)
}

func (g guardedHandler) Handle(ctx context.Context, r slog.Record) error {
	defer g.recovered()
	return g.h.Handle(ctx, r)
}

func (g guardedHandler) WithAttrs(attrs []slog.Attr) (h slog.Handler) {
	h = g // kept when the handler panics
	defer g.recovered()
	return guardedHandler{h: g.h.WithAttrs(attrs), told: g.told}
}

func (g guardedHandler) WithGroup(name string) (h slog.Handler) {
	h = g // kept when the handler panics
	defer g.recovered()
	return guardedHandler{h: g.h.WithGroup(name), told: g.told}
}

// recovered ends a panic of the handler's. Deferred, so that recover sees
// it; a panicking Enabled says not enabled, Handle no error, and WithAttrs
// and WithGroup keep the handler as it was.
func (g guardedHandler) recovered() {
	if p := recover(); p != nil && g.told.CompareAndSwap(false, true) {
		fmt.Fprintf(os.Stderr, "lily: Config.Logger's handler panicked; its records are dropped while it does (said once): %s\n",
			sanitize.Text(fmt.Sprint(p), decide.MaxCause))
	}
}
