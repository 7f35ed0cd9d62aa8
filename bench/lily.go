package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/lily-mq/lily/examples/orders/ordersmsg"
	"github.com/lily-mq/lily/runtime"
)

// benchHandler is the user's code under Lily: nothing on the ack path but
// noting the delivery in t; on the retry path the first attempt fails
// retryably, which sends the message to the retry bucket by a confirmed
// handoff before the ACK.
type benchHandler struct {
	ordersmsg.UnimplementedOrdersHandler
	t         *tracker
	failFirst bool
}

var errUnavailable = errors.New("downstream unavailable")

func (h benchHandler) HandleOrderPlacedV2(_ context.Context, _ *ordersmsg.OrderPlacedV2, d runtime.RawDelivery) error {
	h.t.deliver()
	if h.failFirst && d.Attempt() == 1 {
		return runtime.Retryable(errUnavailable)
	}
	return nil
}

// drainLily runs the generated routes (extractor, typed headers, handler)
// under runtime.NewConsumer. The settlement moment is Config.Observe: it sees
// each delivery's record when its journey ends, after the ACK was written.
// Its logger takes no level (slog.DiscardHandler), so the runtime builds no
// diagnostics record: its emit returns at Logger.Enabled.
func drainLily(ctx context.Context, r runConfig, t *tracker) error {
	want := runtime.PathAcked
	if r.scenario == scenarioRetry {
		want = runtime.PathRetried
	}
	wrong := make(chan runtime.Record, 1)
	c, err := runtime.NewConsumer(r.spec, ordersmsg.OrdersRoutes(benchHandler{t: t, failFirst: r.scenario == scenarioRetry}), runtime.Config{
		URLs:   []string{r.url},
		Logger: slog.New(slog.DiscardHandler),
		Observe: func(rec runtime.Record) {
			if rec.Path != want {
				select {
				case wrong <- rec:
				default:
				}
				return
			}
			t.settle(rec.MessageID)
		},
	})
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	// Run consumes until runCtx ends: at the n-th settlement, or at the first
	// delivery that took another path.
	stopped := make(chan error, 1)
	go func() {
		var err error
		select {
		case <-t.done:
		case rec := <-wrong:
			err = fmt.Errorf("message %s took path %s: %s", rec.MessageID, rec.Path, rec.Reason)
		case <-runCtx.Done():
		}
		stop()
		stopped <- err
	}()
	report, err := c.Run(runCtx)
	stop()
	if wrongPath := <-stopped; wrongPath != nil {
		return wrongPath
	}
	if err != nil {
		return err
	}
	if got := report.Counts[want]; got != r.n {
		return fmt.Errorf("lily: %d deliveries %s, want %d: %s", got, want, r.n, report)
	}
	return ctx.Err()
}
