package ledger

import (
	"context"
	"flag"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/lily-mq/lily/internal/services"
	_ "github.com/lily-mq/lily/internal/update"
	"github.com/lily-mq/lily/runtime"
)

var (
	n    = flag.Int("ledger.n", 1000, "messages in TestLedger")
	seed = flag.Uint64("ledger.seed", 0, "seed of TestLedger (0: a random one, printed)")
)

// TestLedger publishes -ledger.n messages of mixed behaviours, consumes them
// while every kind of fault strikes in rounds, and accounts for every id:
// nothing lost, every second run of a handler and every extra copy
// explained, no 406. Publishing lasts at least 30 s, in which a round of
// every kind (some 11 to 21 s with its retries) fits on a quiet machine; on a
// loaded one, where a rabbitmqctl takes seconds, the last messages trickle
// out until every kind struck, up to 80 s in, two thirds of the deadline. A
// run that passes ends when its journeys are over, long before the deadline.
// It needs RabbitMQ with rabbitmqctl, and PostgreSQL; a missing one fails it.
func TestLedger(t *testing.T) {
	s := testSeed(t)
	url, dsn := services.RabbitMQ(t), services.PostgreSQL(t)
	res, err := Run(context.Background(), Config{
		N: *n, Seed: s, BrokerURL: url, PostgresDSN: dsn,
		FaultEvery: 400 * time.Millisecond, PublishOver: 30 * time.Second, Deadline: 120 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	accounted(t, res, *n)
	t.Logf("%d faults in %v", total(res.Faults), res.Duration.Round(time.Second))
	// The forced stop under a burst must have met work in flight.
	forced := false
	for _, rep := range res.Reports {
		forced = forced || slices.ContainsFunc(rep.Phases, func(p runtime.Phase) bool { return p.Name == "force window" })
	}
	if !forced {
		t.Error("no consumer stopped through a force window")
	}
	if res.AbortedInFlight == 0 {
		t.Error("no final abort found a delivery in flight")
	}
	if res.NotStarted == 0 {
		t.Error("no delivery was received and not started")
	}
}

// testSeed is -ledger.seed, or a random one, logged so that a failing run's
// schedule can be run again.
func testSeed(t *testing.T) uint64 {
	s := *seed
	if s == 0 {
		s = rand.Uint64() >> 16
	}
	t.Logf("seed %d (rerun the schedule with -ledger.seed=%d)", s, s)
	return s
}

// accounted logs the ledger and fails t unless it holds its n messages,
// none is lost and no promise broke.
func accounted(t *testing.T, res *Result, n int) {
	t.Helper()
	t.Log("\n" + res.String())
	if res.Fates[Lost] != 0 || len(res.Problems) > 0 {
		t.Errorf("%d lost, %d problems (listed above)", res.Fates[Lost], len(res.Problems))
	}
	if res.N != n {
		t.Errorf("the ledger holds %d messages, not %d", res.N, n)
	}
}
