package lilytest

import (
	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/runtime/internal/trial"
)

// RawDelivery returns p as a handler of spec's queue gets it, read by the
// runtime's guard, for calling a handler method directly. It fails with the
// guard's verdict (oversized or poison, and why) when the guard would stop
// p before any handler. Options change the delivery as in Deliver.
func RawDelivery(spec runtime.QueueSpec, p runtime.Publishing, opts ...Option) (runtime.RawDelivery, error) {
	rd, err := trial.Read(spec.Messages, spec.MaxBodyBytes, delivery(p, spec.Name, opts))
	if err != nil {
		return runtime.RawDelivery{}, err
	}
	return rd.(runtime.RawDelivery), nil
}
