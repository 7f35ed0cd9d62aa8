package runtime

import (
	"context"
	"log/slog"
	"testing"
)

// panicky is a slog.Handler each of whose methods panics.
type panicky struct{}

func (panicky) Enabled(context.Context, slog.Level) bool  { panic("Enabled") }
func (panicky) Handle(context.Context, slog.Record) error { panic("Handle") }
func (panicky) WithAttrs([]slog.Attr) slog.Handler        { panic("WithAttrs") }
func (panicky) WithGroup(string) slog.Handler             { panic("WithGroup") }

// A Config's Logger is guarded once, however often its defaults are
// filled, and a handler that panics in any method leaves a logger that
// still logs nothing, without a panic.
func TestLoggerPanicsAreRecovered(t *testing.T) {
	cfg := Config{Logger: slog.New(panicky{})}.withDefaults()
	again := cfg.withDefaults()
	if again.Logger != cfg.Logger {
		t.Error("the guarded logger was guarded again")
	}
	l := cfg.Logger.With("queue", "q").WithGroup("g")
	if l.Enabled(context.Background(), slog.LevelError) {
		t.Error("a panicking Enabled said enabled")
	}
	l.Error("lily", "stage", "settled")
	if _, ok := l.Handler().(guardedHandler); !ok {
		t.Errorf("With and WithGroup left a %T", l.Handler())
	}
}
