package runtime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/envelope"
)

// rerouting is a Telemetry whose Publish routes the publish elsewhere and
// writes the broker's records of a message's life.
type rerouting struct{}

func (rerouting) Received(ctx context.Context, _ string, _ RawDelivery) context.Context { return ctx }
func (rerouting) Publish(_ context.Context, _, _ string, p *Publishing) func(string, time.Time) {
	p.Headers["CC"] = []any{"elsewhere"}
	p.Headers["BCC"] = []any{"elsewhere"}
	p.Headers["x-death"] = []any{amqp.Table{"queue": "orders.retry.1s", "reason": "expired", "count": int64(1)}}
	p.Headers["x-first-death-queue"] = "orders.retry.1s"
	p.Headers["x-delivery-count"] = int64(7)
	p.Headers["tenant"] = "b"
	return nil
}
func (rerouting) Settle(context.Context, string) func(string, time.Time) { return nil }
func (rerouting) Settled(context.Context, Record)                        {}
func (rerouting) Lost(string, string)                                    {}

// A hook can neither send a copy to other queues (CC, BCC) nor write the
// broker's records (x-death), which would have the broker drop a retry copy
// where its bucket's TTL sends it back: those it adds are dropped, those it
// changes kept as they were; other headers of its own it may write.
func TestTelemetryCannotRouteACopyOrWriteTheBrokersRecords(t *testing.T) {
	h := hook{t: rerouting{}, log: slog.New(slog.DiscardHandler), queue: "orders"}
	for _, had := range []amqp.Table{
		{"tenant": "a"},
		{"tenant": "a", "CC": []any{"audit"}, "x-delivery-count": int64(2)},
	} {
		p := Publishing{Headers: amqp.Table{}}
		for k, v := range had {
			p.Headers[k] = v
		}
		got, _ := h.publishing(context.Background(), "", "orders.retry.1s", p, nil, nil)
		want := amqp.Table{"tenant": "b"}
		for _, k := range []string{"CC", "x-delivery-count"} {
			if v, ok := had[k]; ok {
				want[k] = v
			}
		}
		if fmt.Sprint(got.Headers) != fmt.Sprint(want) {
			t.Errorf("headers %v, after the hook: %v; want %v", had, got.Headers, want)
		}
	}
}

// lostCalls is a Telemetry that writes down each Lost call.
type lostCalls struct {
	rerouting
	whys []string
}

func (l *lostCalls) Lost(_, why string) { l.whys = append(l.whys, why) }

// Telemetry.Lost is told each loss, with its plain reason, while
// Report.Lost counts a reason that comes again at once in its line.
func TestTelemetryIsToldEachLossNotEachLine(t *testing.T) {
	tel := &lostCalls{}
	c, err := NewConsumer(laneSpec(), Routes{{Type: "t"}: func(context.Context, RawDelivery) error { return nil }}, Config{Telemetry: tel, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	r := c.newRun()
	for _, why := range []string{"refused", "refused", "refused", "gone"} {
		c.intakeLost(r, 0, errors.New(why))
	}
	if want := []string{"refused", "refused", "refused", "gone"}; !slices.Equal(tel.whys, want) {
		t.Errorf("Lost told %q, want %q", tel.whys, want)
	}
	if want := []string{"refused (3 times in a row)", "gone"}; !slices.Equal(r.report.lostLines(), want) {
		t.Errorf("Report.Lost %q, want %q", r.report.lostLines(), want)
	}
}

// writing is a Telemetry whose Publish writes headers into each publish.
type writing struct {
	rerouting
	headers amqp.Table
}

func (w writing) Publish(_ context.Context, _, _ string, p *Publishing) func(string, time.Time) {
	maps.Copy(p.Headers, w.headers)
	return nil
}

// A hook may not make a Send's message poison at the Lily consumer it
// reaches, whose guard has the default limits, any more than a copy: where
// the headers it left break them and the message's own do not, the message
// goes with its own alone, and that is logged. A trace context within the
// sizes the guard counts apart travels beside a message at the bound; one
// beyond the bounds already is no worse for the hook's headers, which it
// keeps.
func TestTelemetryCannotMakeASendPoison(t *testing.T) {
	const traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	b3 := amqp.Table{"b3": "80f198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1-1"}
	for _, tc := range []struct {
		name string
		own  int // the message's own headers
		hook amqp.Table
		kept bool
	}{
		{"b3 beside 64", envelope.MaxHeaders, b3, false},
		{"a long tracestate beside 64", envelope.MaxHeaders, amqp.Table{"traceparent": traceparent, "tracestate": "k=" + strings.Repeat("v", envelope.MaxTracestate)}, false},
		{"baggage beside 64", envelope.MaxHeaders, amqp.Table{"traceparent": traceparent, "baggage": "tenant=shop"}, false},
		{"the trace context beside 64", envelope.MaxHeaders, amqp.Table{"traceparent": traceparent, "tracestate": "k=" + strings.Repeat("v", envelope.MaxTracestate-2)}, true},
		{"b3 beside 63", envelope.MaxHeaders - 1, b3, true},
		{"b3 beside 65", envelope.MaxHeaders + 1, b3, true},
	} {
		var logs bytes.Buffer
		h := hook{t: writing{headers: tc.hook}, log: slog.New(slog.NewJSONHandler(&logs, nil))}
		p := Publishing{Headers: amqp.Table{}}
		for i := range tc.own {
			p.Headers[fmt.Sprint("h", i)] = int64(i)
		}
		got, _ := h.publishing(context.Background(), "shop", "orders.placed", p, nil, nil)
		for k, v := range p.Headers {
			if got.Headers[k] != v {
				t.Errorf("%s: the message's header %s is %v, want %v", tc.name, k, got.Headers[k], v)
			}
		}
		for k, v := range tc.hook {
			if _, ok := got.Headers[k]; ok != tc.kept || ok && got.Headers[k] != v {
				t.Errorf("%s: the hook's header %s sent %t, want %t", tc.name, k, ok, tc.kept)
			}
		}
		if logged := strings.Contains(logs.String(), "its headers are ignored"); logged == tc.kept {
			t.Errorf("%s: logged %t, want %t: %s", tc.name, logged, !tc.kept, logs.String())
		}
	}
}

// halfWritten is a Telemetry whose Publish edits the headers and then
// panics.
type halfWritten struct{ rerouting }

func (halfWritten) Publish(_ context.Context, _, _ string, p *Publishing) func(string, time.Time) {
	delete(p.Headers, "tenant")
	p.Headers["injected"] = "half"
	panic("publish")
}

// A Publish that panics stands for nothing: the message goes as it was,
// without the edits the hook made before it panicked, and the panic is
// logged.
func TestTelemetryPublishThatPanickedChangesNothing(t *testing.T) {
	var logs bytes.Buffer
	h := hook{t: halfWritten{}, log: slog.New(slog.NewJSONHandler(&logs, nil)), queue: "orders"}
	p := Publishing{Headers: amqp.Table{"tenant": "shop", "x-lily-attempt": int32(2)}}
	got, done := h.publishing(context.Background(), "", "orders.retry.1s", p, nil, nil)
	if want := (amqp.Table{"tenant": "shop", "x-lily-attempt": int32(2)}); fmt.Sprint(got.Headers) != fmt.Sprint(want) {
		t.Errorf("headers after a Publish that panicked: %v, want %v", got.Headers, want)
	}
	done("confirmed", time.Now())
	if !strings.Contains(logs.String(), `"method":"Publish"`) || !strings.Contains(logs.String(), "panicked: publish") {
		t.Errorf("the panic was not logged: %s", logs.String())
	}
}
