package lilytest

import (
	"errors"
	"fmt"

	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/runtime/internal/outcome"
	"github.com/lily-mq/lily/runtime/internal/trial"
)

// ErrRejected is what RawDelivery's error wraps when the runtime would
// reject the message before any handler. The error names the rejection in
// the words of Record.Rejection ("oversized", "poison", "unsupported") and
// gives the reason the record would.
var ErrRejected = errors.New("lilytest: rejected before any handler")

// RawDelivery returns p as a handler of spec's queue that dispatches by
// routes gets it, for calling a handler method directly: read by the
// runtime's guard, then found a route by its type, version and content
// type. Options change the delivery as in Deliver. p's headers and body are
// copied: changing p after does not change the delivery.
//
// It fails with ErrRejected when the runtime would stop p before any
// handler: over the body limit, poison, or without a route. Routes are
// looked up, not called. As for Deliver, the headers and timestamp are as
// the client decodes them, and a message no client publishes fails.
//
// A spec or routes that runtime.NewConsumer refuses whatever the Config
// fail too, with NewConsumer's error and not ErrRejected, as New fails:
// read by such a spec, p would be rejected for the spec's fault (a zero
// MaxBodyBytes calls every body oversized).
func RawDelivery(spec runtime.QueueSpec, routes runtime.Routes, p runtime.Publishing, opts ...Option) (runtime.RawDelivery, error) {
	d, err := delivery(p, spec.Name, opts)
	if err != nil {
		return runtime.RawDelivery{}, fmt.Errorf("lilytest: %w", err)
	}
	rd, rejection, reason, err := trial.Read(spec, routes, d)
	if err != nil {
		return runtime.RawDelivery{}, fmt.Errorf("lilytest: invalid spec or routes: %w", err)
	}
	if rejection != outcome.NotRejected {
		return runtime.RawDelivery{}, fmt.Errorf("%w as %s: %s", ErrRejected, rejection, reason)
	}
	return rd.(runtime.RawDelivery), nil
}
