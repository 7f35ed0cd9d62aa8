package lilyotel_test

import (
	"strings"
	"testing"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// A poison delivery's trace context is never read: its span starts a trace
// of its own and records the rejection, and its DLQ copy carries that
// trace, not the one it came with. A valid delivery's trace header that is
// not a string, or not a traceparent, is ignored the same way.
func TestBrokerHostileTraceContextIsNotFollowed(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.start(nil)
	hostile := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{0xba, 0xd}, SpanID: trace.SpanID{0xba, 0xd}, TraceFlags: trace.FlagsSampled})
	traceparent := "00-" + hostile.TraceID().String() + "-" + hostile.SpanID().String() + "-01"

	poison := message(id("poison"), "ok")
	poison.Headers["x-lily-attempt"] = "not a number"
	poison.Headers["traceparent"] = traceparent
	odd := map[string]any{
		"bytes":     []byte(traceparent),
		"number":    int64(1),
		"too-long":  traceparent + "-" + strings.Repeat("f", 200),
		"malformed": strings.ToUpper(traceparent),
	}
	msgs := []string{}
	for name, v := range odd {
		m := message(id(name), "ok")
		m.Headers["traceparent"] = v
		r.publish(m)
		msgs = append(msgs, m.MessageId)
	}
	r.publish(poison)
	spans := r.awaitProcessed(len(odd) + 1)

	rejected := one(t, "the poison delivery", where(spans, "lily.rejection", "poison"))
	expect(t, rejected, "process "+r.q.Name, trace.SpanKindConsumer, codes.Error, map[string]any{
		"messaging.system":                           "rabbitmq",
		"messaging.operation.type":                   "process",
		"messaging.operation.name":                   "process",
		"messaging.destination.name":                 r.q.Name,
		"messaging.destination.subscription.name":    r.q.Name,
		"messaging.rabbitmq.destination.routing_key": r.q.Name,
		"lily.attempt":                               int64(1), // the record's count, not the forged header
		"lily.path":                                  "dead-lettered",
		"lily.rejection":                             "poison",
		"lily.handoff":                               "confirmed",
		"error.type":                                 "poison",
	})
	for _, s := range named(spans, "process "+r.q.Name) {
		if s.Parent().IsValid() || len(s.Links()) != 0 || s.SpanContext().TraceID() == hostile.TraceID() {
			t.Errorf("process span of %v: parent %v, links %v, trace %s; want a trace of its own", attrs(s)["messaging.message.id"], s.Parent(), s.Links(), s.SpanContext().TraceID())
		}
	}
	for _, m := range msgs {
		s := one(t, m, where(named(spans, "process "+r.q.Name), "messaging.message.id", m))
		if got := attrs(s)["lily.path"]; got != "acked" {
			t.Errorf("%s: path %v, want acked", m, got)
		}
	}

	ch, err := r.dial().Channel()
	if err != nil {
		t.Fatal(err)
	}
	copied := get(t, ch, r.q.Topology.DeadLetterQueue)
	send := one(t, "the poison's DLQ handoff", named(spans, "send "+r.q.Topology.DeadLetterQueue))
	want := "00-" + rejected.SpanContext().TraceID().String() + "-" + send.SpanContext().SpanID().String() + "-01"
	if got := copied.Headers["traceparent"]; got != want {
		t.Errorf("the poison's DLQ copy carries traceparent %v, want its own trace's %s", got, want)
	}
}
