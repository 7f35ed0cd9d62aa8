package runtime

import "context"

// RouteKey selects the handler for one message: its type, version and content type.
type RouteKey struct {
	Type        string
	Version     int
	ContentType string
}

// Route decodes one delivery with its typed extractor and calls the user's handler.
// Generated code builds routes; an extractor's failure must come back wrapped in
// Permanent.
type Route func(ctx context.Context, d RawDelivery) error

// Routes is a queue's dispatch table, generated from the schema.
type Routes map[RouteKey]Route

// dispatch finds the route for a validated envelope. A miss is an unsupported
// message: a permanent failure decided before any scope is opened.
func (r Routes) dispatch(env *Envelope) (Route, bool) {
	route, ok := r[RouteKey{Type: env.Type, Version: env.Version, ContentType: env.ContentType}]
	return route, ok
}
