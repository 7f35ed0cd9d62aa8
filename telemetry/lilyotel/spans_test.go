package lilyotel_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// named returns the spans called name, in the order they ended.
func named(spans []sdktrace.ReadOnlySpan, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// where returns the spans whose attribute key is value.
func where(spans []sdktrace.ReadOnlySpan, key string, value any) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if v, ok := attrs(s)[key]; ok && v == value {
			out = append(out, s)
		}
	}
	return out
}

// one returns the only span of spans, or fails the test.
func one(t *testing.T, what string, spans []sdktrace.ReadOnlySpan) sdktrace.ReadOnlySpan {
	t.Helper()
	if len(spans) != 1 {
		t.Fatalf("%d spans for %s, want 1:\n%s", len(spans), what, describe(spans))
	}
	return spans[0]
}

// attrs is a span's attributes as plain values.
func attrs(s sdktrace.ReadOnlySpan) map[string]any {
	m := map[string]any{}
	for _, kv := range s.Attributes() {
		m[string(kv.Key)] = kv.Value.AsInterface()
	}
	return m
}

// expect checks a span's name, kind, status and exact attributes.
func expect(t *testing.T, s sdktrace.ReadOnlySpan, name string, kind trace.SpanKind, status codes.Code, want map[string]any) {
	t.Helper()
	if s.Name() != name || s.SpanKind() != kind || s.Status().Code != status {
		t.Errorf("span %q %s %s, want %q %s %s", s.Name(), s.SpanKind(), s.Status().Code, name, kind, status)
	}
	if diff := cmp.Diff(want, attrs(s)); diff != "" {
		t.Errorf("span %q's attributes (-want +got):\n%s", s.Name(), diff)
	}
}

// childOf checks that s's parent is parent, in parent's trace.
func childOf(t *testing.T, s, parent sdktrace.ReadOnlySpan) {
	t.Helper()
	if got := s.Parent(); got.TraceID() != parent.SpanContext().TraceID() || got.SpanID() != parent.SpanContext().SpanID() {
		t.Errorf("span %q's parent is %s/%s, want %q (%s/%s)", s.Name(), got.TraceID(), got.SpanID(),
			parent.Name(), parent.SpanContext().TraceID(), parent.SpanContext().SpanID())
	}
}

// linkedTo checks that s's only link is to target.
func linkedTo(t *testing.T, s sdktrace.ReadOnlySpan, target trace.SpanContext) {
	t.Helper()
	links := s.Links()
	if len(links) != 1 || links[0].SpanContext.TraceID() != target.TraceID() || links[0].SpanContext.SpanID() != target.SpanID() {
		t.Errorf("span %q's links %v, want one to %s/%s", s.Name(), links, target.TraceID(), target.SpanID())
	}
}

// describe lists spans for a failure message.
func describe(spans []sdktrace.ReadOnlySpan) string {
	var b strings.Builder
	for _, s := range spans {
		keys := slices.Sorted(maps.Keys(attrs(s)))
		fmt.Fprintf(&b, "  %s %q trace %s span %s parent %s links %d:", s.SpanKind(), s.Name(), s.SpanContext().TraceID(), s.SpanContext().SpanID(), s.Parent().SpanID(), len(s.Links()))
		for _, k := range keys {
			fmt.Fprintf(&b, " %s=%v", k, attrs(s)[k])
		}
		b.WriteString("\n")
	}
	return b.String()
}

// sum is the value of counter name's points whose attributes include
// every one of match.
func sum(rm metricdata.ResourceMetrics, name string, match ...attribute.KeyValue) int64 {
	var n int64
	for _, p := range points[metricdata.Sum[int64]](rm, name) {
		for _, dp := range p.DataPoints {
			if has(dp.Attributes, match) {
				n += dp.Value
			}
		}
	}
	return n
}

// count is how many values histogram name recorded with every one of match.
func count(rm metricdata.ResourceMetrics, name string, match ...attribute.KeyValue) uint64 {
	var n uint64
	for _, p := range points[metricdata.Histogram[float64]](rm, name) {
		for _, dp := range p.DataPoints {
			if has(dp.Attributes, match) {
				n += dp.Count
			}
		}
	}
	return n
}

func points[T any](rm metricdata.ResourceMetrics, name string) []T {
	var out []T
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if d, ok := m.Data.(T); ok && m.Name == name {
				out = append(out, d)
			}
		}
	}
	return out
}

func has(set attribute.Set, match []attribute.KeyValue) bool {
	for _, kv := range match {
		if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
			return false
		}
	}
	return true
}
