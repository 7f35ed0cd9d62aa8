package ledger

import (
	"context"
	"flag"
	"testing"
	"time"

	"github.com/lily-mq/lily/internal/services"
)

var clusterN = flag.Int("ledger.cluster.n", 1500, "messages in TestLedgerCluster")

// TestLedgerCluster runs the ledger on the three-node cluster (.ci/cluster):
// quorum queues, the consumer and the publisher given the three URLs, while
// nodes are stopped, the queue leader's node and the consumer's node are
// killed with SIGKILL, each started again. Nothing is lost, every second run
// and extra copy is explained, no 406, and consumption resumed after each
// node fault. Publishing lasts at least 75 s; while a kind of fault has not
// struck, its last messages trickle out up to 120 s in (two thirds of the
// deadline), leaving 60 s for a node started again and the last journeys.
// make test's cluster step runs it; go test ./... skips it.
func TestLedgerCluster(t *testing.T) {
	urls := services.Cluster(t)
	dsn := services.PostgreSQL(t)
	s := testSeed(t)
	res, err := Run(context.Background(), Config{
		N: *clusterN, Seed: s, BrokerURL: urls[0], PostgresDSN: dsn,
		Cluster:    &Cluster{URLs: urls, Script: "../.ci/cluster"},
		FaultEvery: 2 * time.Second, PublishOver: 75 * time.Second, Deadline: 180 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	// accounted holds it to every kind of fault striking: the database's
	// and the consumer's beside the nodes'.
	accounted(t, res, *clusterN)
	if len(res.Resumes) == 0 {
		t.Error("consumption was not seen to resume after any node fault")
	}
}
