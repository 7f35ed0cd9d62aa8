package runtime_test

import (
	"context"
	"log/slog"
	"slices"
	"sync"
)

// event is one diagnostics record a consumer logged, as a test reads it.
type event struct {
	stage, messageID, detail, handoff string
	method                            string // the Telemetry method that panicked
	level                             slog.Level
	duplicate                         bool
}

// eventLog is a slog.Handler that keeps every record a consumer logs: the
// diagnostics' own contract is their slog records and keys.
type eventLog struct {
	mu     sync.Mutex
	events []event
}

func (l *eventLog) Enabled(context.Context, slog.Level) bool { return true }

func (l *eventLog) Handle(_ context.Context, rec slog.Record) error {
	ev := event{level: rec.Level}
	rec.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "stage":
			ev.stage = a.Value.String()
		case "message_id":
			ev.messageID = a.Value.String()
		case "detail":
			ev.detail = a.Value.String()
		case "handoff":
			ev.handoff = a.Value.String()
		case "method":
			ev.method = a.Value.String()
		case "duplicate":
			ev.duplicate = a.Value.Bool()
		}
		return true
	})
	l.mu.Lock()
	l.events = append(l.events, ev)
	l.mu.Unlock()
	return nil
}

func (l *eventLog) WithAttrs([]slog.Attr) slog.Handler { return l }

func (l *eventLog) WithGroup(string) slog.Handler { return l }

// all returns the events logged so far, oldest first.
func (l *eventLog) all() []event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.events)
}

// has reports whether an event so far matches.
func (l *eventLog) has(match func(event) bool) bool { return slices.ContainsFunc(l.all(), match) }
