package lilyotel

import (
	"context"

	"go.opentelemetry.io/otel/metric"
)

// Lost counts a consumer's lost session, or a failed attempt to connect
// again after one. Why it was lost is text of many values, for the
// consumer's log and report, not for a metric's attributes.
func (t *Telemetry) Lost(queue, _ string) {
	ctx := context.Background()
	if t.m.reconnects.Enabled(ctx) {
		t.m.reconnects.Add(ctx, 1, metric.WithAttributes(subscription(queue)))
	}
}
