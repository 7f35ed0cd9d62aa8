package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
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
