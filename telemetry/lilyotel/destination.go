package lilyotel

import (
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// The destination names of the RabbitMQ page of the semantic conventions
// v1.43.0. Span names ("{operation} {destination}") take their
// low-cardinality forms.

// sentTo is messaging.destination.name on the producer side:
// "{exchange}:{routing key}", or the one of them that is not empty, or
// amq.default. A retry or DLQ copy goes through the default exchange, so its
// destination is the queue its routing key names.
func sentTo(exchange, routingKey string) string {
	switch {
	case exchange != "" && routingKey != "":
		return exchange + ":" + routingKey
	case exchange != "":
		return exchange
	case routingKey != "":
		return routingKey
	}
	return "amq.default"
}

// consumedFrom is messaging.destination.name on the consumer side:
// "{exchange}:{routing key}:{queue}", each part left out when empty, and the
// routing key left out when it names the queue itself (as a delivery through
// the default exchange does). All three come as nameText gives them, the
// delivery's exchange and key escaped by RawDelivery and the queue's name
// escaped alike, or a key naming the queue would not be found to.
func consumedFrom(exchange, routingKey, queue string) string {
	if routingKey == queue {
		routingKey = ""
	}
	name := exchange
	for _, part := range [...]string{routingKey, queue} {
		if part == "" {
			continue
		}
		if name != "" {
			name += ":"
		}
		name += part
	}
	return name
}

// consumedFromLow is consumedFrom with a routing key the producer picked
// left as the placeholder "{routing key}", for span names: they must have
// few values, and a key may carry an id.
func consumedFromLow(exchange, routingKey, queue string) string {
	if routingKey != "" && routingKey != queue {
		routingKey = "{routing key}"
	}
	return consumedFrom(exchange, routingKey, queue)
}

// spanName is "{operation} {destination}", or the operation alone where no
// destination is known, as the conventions name spans.
func spanName(operation, destination string) string {
	if destination == "" {
		return operation
	}
	return operation + " " + destination
}

// subscription is messaging.destination.subscription.name: the consumed
// queue's name escaped as nameText escapes it in the destination's name,
// so that the two read alike.
func subscription(queue string) attribute.KeyValue {
	return semconv.MessagingDestinationSubscriptionName(nameText(queue))
}
