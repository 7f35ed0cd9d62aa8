package runtime_test

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/runtime/internal/fixture"
)

// Tests in this file change broker-wide settings for a moment, so they run
// alone: `make test` runs them after every other test, with
// LILY_BROKER_SETTINGS_TESTS=1. Without it they say why they skip.
func brokerSettingsTest(t *testing.T) {
	t.Helper()
	if os.Getenv("LILY_BROKER_SETTINGS_TESTS") != "1" {
		t.Skip("changes broker-wide settings: run alone with LILY_BROKER_SETTINGS_TESTS=1 (make test does, after the other tests)")
	}
}

func setBrokerEnv(t *testing.T, key, value string) {
	t.Helper()
	out, err := exec.Command("rabbitmqctl", "eval", "application:set_env(rabbit, "+key+", "+value+").").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ok") {
		t.Fatalf("rabbitmqctl eval set_env %s: %v: %s", key, err, out)
	}
}

// The broker's consumer_timeout closes a channel that holds a delivery too
// long. Lily reports it as such, reconnects, and settles the redelivery from
// the record of the work the handler completed: it does not run twice.
func TestBrokerSettingsConsumerTimeoutIsReported(t *testing.T) {
	brokerSettingsTest(t)
	// Restored however the setting fails: a broker left with a consumer
	// timeout of a second would close the channels of every later test that
	// holds a delivery longer.
	t.Cleanup(func() {
		setBrokerEnv(t, "consumer_timeout", "1800000")
		setBrokerEnv(t, "channel_tick_interval", "60000")
	})
	setBrokerEnv(t, "consumer_timeout", "1000")
	setBrokerEnv(t, "channel_tick_interval", "200")
	q := brokerSpec(t, func(q *runtime.QueueSpec) { q.HandlerTimeout = 10 * time.Second })
	declareTopology(t, q)
	publish(t, q.Name, order(t, "held-1"))
	var runs atomic.Int32
	c := start(t, q, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error {
		if runs.Add(1) == 1 {
			time.Sleep(3 * time.Second) // past the broker's consumer_timeout
		}
		return nil
	}, func(cfg *runtime.Config) {
		cfg.ReconnectMax = 200 * time.Millisecond
	})
	// While the first handler still runs, its redelivery waits its turn
	// (requeued); once it returned, the next one is settled from the record.
	// The first delivery's record, which follows its handler, may come after
	// that one's.
	fromRecord := func(r runtime.Record) bool { return r.Path == runtime.PathAcked && r.Handler == "completed earlier" }
	ran := func(r runtime.Record) bool { return r.Handler == "ok" }
	var recs []runtime.Record
	for !slices.ContainsFunc(recs, fromRecord) || !slices.ContainsFunc(recs, ran) {
		recs = c.await(len(recs) + 1)
	}
	rep := c.stop()
	if len(rep.Lost) == 0 || !strings.Contains(rep.Lost[0], "consumer_timeout") {
		t.Errorf("lost: %v", rep.Lost)
	}
	// The delivery whose handler ran is unresolved: its channel closed
	// under it. A redelivery requeued meanwhile may be too, when the
	// broker's timeout closed its channel during its pause: it never ran.
	var unresolved int
	for _, r := range recs {
		switch {
		case r.Path == runtime.PathUnresolved && r.Handler == "ok":
			unresolved++
		case r.Path == runtime.PathUnresolved && r.Handler != "":
			t.Errorf("an unresolved redelivery ran its handler: %+v", r)
		}
	}
	if unresolved != 1 || runs.Load() != 1 {
		t.Errorf("%d unresolved after the handler ran, handler runs %d; records %+v", unresolved, runs.Load(), recs)
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}})
}
