// Package connectnote lets the caller of runtime.Publisher.Send hear, while
// its publish waits for a connection to the broker, each failure to get
// one, without a name in the runtime's public face: Send waits for the
// broker within its context alone, so a caller that waits minutes would
// otherwise learn that the broker is away only when the wait ends. The
// outbox relay tells its Health so (pgoutbox, health.go).
package connectnote

import "context"

type key struct{}

// With returns ctx carrying note, which Send calls with each failure to
// open a channel on a connection while its publish waits to try again.
func With(ctx context.Context, note func(error)) context.Context {
	return context.WithValue(ctx, key{}, note)
}

// Note returns the note ctx carries, or nil.
func Note(ctx context.Context) func(error) {
	note, _ := ctx.Value(key{}).(func(error))
	return note
}
