package runtime_test

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"
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

// within waits up to d for an event that matches and reports whether one
// came: for a goroutine of a test, which cannot fail it.
func (l *eventLog) within(d time.Duration, match func(event) bool) bool {
	for deadline := time.Now().Add(d); !l.has(match); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

// phase matches the event of a shutdown phase's start or end, such as
// "stop intake: ended".
func phase(detail string) func(event) bool {
	return func(ev event) bool { return ev.stage == "shutdown-phase" && ev.detail == detail }
}
