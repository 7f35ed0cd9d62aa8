package runtime

import (
	"context"

	"github.com/lily-mq/lily/runtime/internal/guard"
)

// RouteKey selects the handler for one message: its type, version and content type.
type RouteKey struct {
	Type        string
	Version     int
	ContentType string
}

// Routes is a queue's dispatch table, generated from the schema. Each route
// decodes one delivery with its typed extractor, from its first call of
// d.Body (RawDelivery.Body), and calls the user's handler;
// an extractor's failure (a *wire.FieldError) must come back wrapped in
// Permanent: unwrapped, it is a plain error, which is retryable.
type Routes map[RouteKey]func(ctx context.Context, d RawDelivery) error

// routeFn is one entry of a dispatch table.
type routeFn = func(ctx context.Context, d RawDelivery) error

// dispatch finds the route for a validated envelope. A miss is an unsupported
// message: a permanent failure decided before any scope is opened.
func (r Routes) dispatch(env *guard.Envelope) (routeFn, bool) {
	fn, ok := r[RouteKey{Type: env.Type, Version: env.Version, ContentType: env.ContentType}]
	return fn, ok
}
