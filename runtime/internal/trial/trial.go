// Package trial hands package lilytest, Lily's public test harness, the
// consumer's own journey with only the broker replaced. The harness is
// public; the journey's machinery (a run's memory, a channel generation and
// its settler, the guard) is not, and package runtime must not grow public
// names for tests: so package runtime sets these variables when it is
// initialised, and lilytest calls them. Nothing else may.
//
// The values that cross this bridge are package runtime's own types, typed
// here as any, since this package cannot import runtime (runtime imports it).
package trial

import (
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/runtime/internal/outcome"
	"github.com/lily-mq/lily/runtime/internal/settle"
)

// Broker stands in for RabbitMQ under one consumer: its consumer channel,
// which takes each delivery's ACK or NACK, and its confirm-mode publisher,
// which answers each retry or DLQ copy.
type Broker interface {
	settle.Acker
	// Publish is a handoff: the mandatory publish of msg to exchange with
	// routing key key, answered with what the broker said of it.
	Publish(exchange, key string, msg amqp.Publishing) outcome.HandoffEvidence
}

// Journeys carries deliveries through one consumer's journey, as its consume
// loop does on a channel the broker never closes: one run of the consumer,
// whose memory of completed work and requeues lasts across deliveries.
type Journeys interface {
	// Deliver carries d through the journey and returns its record (a
	// runtime.Record) once it ends. d's DeliveryTag must grow from one
	// call to the next, as a channel's tags do.
	Deliver(d *amqp.Delivery) any
	// Close cancels the handlers' context and stops the settler.
	Close()
}

var (
	// Open returns the journeys of consumer (a *runtime.Consumer that has
	// not run) with b in the broker's place.
	Open func(consumer any, b Broker) Journeys
	// Read reads d as a consumer of spec (a runtime.QueueSpec) that
	// dispatches by routes (runtime.Routes) reads it before any handler:
	// through the guard, then dispatch. It returns the runtime.RawDelivery a
	// handler would get; or the rejection its record would name, and why; or
	// err when runtime.NewConsumer refuses spec and routes, whatever the
	// Config.
	Read func(spec, routes any, d *amqp.Delivery) (delivery any, rejection outcome.Rejection, reason string, err error)
)
