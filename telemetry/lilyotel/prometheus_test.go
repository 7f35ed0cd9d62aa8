package lilyotel_test

import (
	"net/http"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// The same meter, read by OpenTelemetry's Prometheus exporter into a
// registry that promhttp serves, is scraped with the counts the manual
// reader sees.
func TestBrokerPrometheusScrape(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.start(nil)
	r.publish(message(id("ok"), "ok"), message(id("fail-once"), "fail-once"))
	q := attribute.String("messaging.destination.subscription.name", r.q.Name)
	rm := r.awaitMetric("three processings measured", func(rm metricdata.ResourceMetrics) bool {
		return count(rm, "messaging.process.duration", q) == 3 && count(rm, "messaging.client.operation.duration", q) == 3
	})

	resp, err := http.Get(r.metrics)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	// Each family's series of this test's queue: a publish's carry the
	// queue it goes to instead.
	queue := func(labels map[string]string) map[string]string {
		labels["messaging_destination_subscription_name"] = r.q.Name
		return labels
	}
	for _, c := range []struct {
		family string
		kind   dto.MetricType
		labels map[string]string
		want   float64
	}{
		{"lily_deliveries_total", dto.MetricType_COUNTER, queue(map[string]string{"lily_path": "acked"}), float64(sum(rm, "lily.deliveries", q, attribute.String("lily.path", "acked")))},
		{"lily_deliveries_total", dto.MetricType_COUNTER, queue(map[string]string{"lily_path": "retried"}), 1},
		{"lily_handoffs_total", dto.MetricType_COUNTER, queue(map[string]string{"lily_handoff": "confirmed", "messaging_destination_name": r.bucket()}), 1},
		{"lily_handoff_duration_seconds", dto.MetricType_HISTOGRAM, queue(map[string]string{"lily_handoff": "confirmed"}), 1},
		{"messaging_client_consumed_messages_total", dto.MetricType_COUNTER, queue(map[string]string{"messaging_system": "rabbitmq"}), 3},
		{"messaging_client_sent_messages_total", dto.MetricType_COUNTER, map[string]string{"messaging_destination_name": r.bucket()}, 1},
		{"messaging_process_duration_seconds", dto.MetricType_HISTOGRAM, queue(map[string]string{}), float64(count(rm, "messaging.process.duration", q))},
		{"messaging_process_duration_seconds", dto.MetricType_HISTOGRAM, queue(map[string]string{"error_type": "retryable"}), 1},
		{"messaging_client_operation_duration_seconds", dto.MetricType_HISTOGRAM, queue(map[string]string{"messaging_operation_name": "ack"}), 3},
	} {
		f, ok := families[c.family]
		if !ok {
			t.Errorf("no family %s in the scrape", c.family)
			continue
		}
		if f.GetType() != c.kind {
			t.Errorf("%s is a %s, want a %s", c.family, f.GetType(), c.kind)
		}
		var got float64
		for _, m := range f.GetMetric() {
			if !labelled(m, c.labels) {
				continue
			}
			if c.kind == dto.MetricType_COUNTER {
				got += m.GetCounter().GetValue()
			} else {
				got += float64(m.GetHistogram().GetSampleCount())
			}
		}
		if got != c.want {
			t.Errorf("%s%v: %v, want %v", c.family, c.labels, got, c.want)
		}
	}
}

// labelled reports whether m carries every label of want.
func labelled(m *dto.Metric, want map[string]string) bool {
	found := 0
	for _, l := range m.GetLabel() {
		if v, ok := want[l.GetName()]; ok && v == l.GetValue() {
			found++
		}
	}
	return found == len(want)
}
