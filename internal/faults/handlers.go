package faults

import (
	"context"

	"github.com/lily-mq/lily/runtime"
)

// Handler faults: routes that misbehave as user code can.

// Panics is a route that panics with v.
func Panics(v any) func(context.Context, runtime.RawDelivery) error {
	return func(context.Context, runtime.RawDelivery) error { panic(v) }
}

// Hangs is a route that ignores its context and returns nil only when
// release is closed: it outlives its handler timeout, and the force window if
// release stays open.
func Hangs(release <-chan struct{}) func(context.Context, runtime.RawDelivery) error {
	return func(context.Context, runtime.RawDelivery) error {
		<-release
		return nil
	}
}
