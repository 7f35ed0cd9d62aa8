// Package writegate lets the caller of runtime.Publisher.Send refuse a
// publish's write at its last moment, without a name in the runtime's
// public face: the check a context carries runs just before the message is
// written, after the waits for a slot in the window, a connection and
// while the broker blocks publishers, and an error from it leaves the
// message unwritten. The outbox relay refuses so the writes of sends that
// were still waiting when its stop began (pgoutbox, relay.go).
package writegate

import "context"

type key struct{}

// With returns ctx carrying check, which Send runs just before it writes.
func With(ctx context.Context, check func() error) context.Context {
	return context.WithValue(ctx, key{}, check)
}

// Check returns the check ctx carries, or one that lets every write go.
func Check(ctx context.Context) func() error {
	if check, ok := ctx.Value(key{}).(func() error); ok && check != nil {
		return check
	}
	return letGo
}

func letGo() error { return nil }
