package runtime

import (
	"errors"
	"fmt"
	"log/slog"
)

// DefaultURL is the broker a Config without URL connects to.
const DefaultURL = "amqp://guest:guest@127.0.0.1:5672/"

// Config is how one consumer reaches the broker and reports what it does.
type Config struct {
	// URL of the broker; DefaultURL when empty.
	URL string
	// Logger receives one structured event per delivery stage; slog.Default() when nil.
	Logger *slog.Logger
	// Limits bound the envelope's metadata; zero fields take DefaultLimits.
	Limits Limits
}

// Consumer consumes one queue and settles every delivery by the decision table.
type Consumer struct {
	spec   QueueSpec
	routes Routes
	cfg    Config
}

// NewConsumer checks the queue's spec and dispatch table and returns a consumer
// ready to Run. Generated constructors call it.
func NewConsumer(spec QueueSpec, routes Routes, cfg Config) (*Consumer, error) {
	var errs []error
	if err := spec.Validate(); err != nil {
		errs = append(errs, err)
	}
	if len(routes) == 0 {
		errs = append(errs, fmt.Errorf("queue %s: the dispatch table is empty", spec.Name))
	}
	for key, route := range routes {
		if route == nil {
			errs = append(errs, fmt.Errorf("queue %s: route %+v has no handler", spec.Name, key))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.URL == "" {
		cfg.URL = DefaultURL
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Limits = cfg.Limits.withDefaults()
	return &Consumer{spec: spec, routes: routes, cfg: cfg}, nil
}
