package runtime

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"

	"github.com/lily-mq/lily/internal/sanitize"
	"github.com/lily-mq/lily/runtime/internal/decide"
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

func (g guardedHandler) Enabled(ctx context.Context, level slog.Level) (on bool) {
	g.call(func() { on = g.h.Enabled(ctx, level) })
	return on
}

func (g guardedHandler) Handle(ctx context.Context, r slog.Record) (err error) {
	g.call(func() { err = g.h.Handle(ctx, r) })
	return err
}

func (g guardedHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	var h slog.Handler = g // kept when the handler panics
	g.call(func() { h = guardedHandler{h: g.h.WithAttrs(attrs), told: g.told} })
	return h
}

func (g guardedHandler) WithGroup(name string) slog.Handler {
	var h slog.Handler = g // kept when the handler panics
	g.call(func() { h = guardedHandler{h: g.h.WithGroup(name), told: g.told} })
	return h
}

// call calls f, a call of the handler's, and ends its panic: a panicking
// Enabled says not enabled, Handle no error, and WithAttrs and WithGroup
// keep the handler as it was.
func (g guardedHandler) call(f func()) {
	if p := recovered(f); p != nil && g.told.CompareAndSwap(false, true) {
		fmt.Fprintf(os.Stderr, "lily: Config.Logger's handler panicked; its records are dropped while it does (said once): %s\n",
			sanitize.Text(fmt.Sprint(p), decide.MaxCause))
	}
}
