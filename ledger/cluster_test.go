package ledger

import (
	"context"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/lily-mq/lily/internal/services"
	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/topology"
)

var clusterN = flag.Int("ledger.cluster.n", 1500, "messages in TestLedgerCluster")

// TestLedgerCluster runs the ledger on the three-node cluster (.ci/cluster):
// quorum queues, the consumer and the publisher given the three URLs, while
// nodes are stopped, the queue leader's node and the consumer's node are
// killed with SIGKILL, each started again. Nothing is lost, every second run
// and extra copy is explained, no 406, and consumption was seen to resume
// after some node fault; the log lists each node fault with how soon it
// resumed, or that it did not before the next one or the end (a slow
// cluster may take the next node down first, which is shown, not failed).
// Publishing lasts at least 75 s; while a kind of fault has not
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

// Each node fault is named in the ledger, in order, with how soon
// consumption resumed after it, or that it did not before the next node
// fault or the end: a fault without a resume is not dropped.
func TestEveryNodeFaultSaysWhetherConsumptionResumed(t *testing.T) {
	r := newRun(Config{N: 1}, spec("q", topology.Quorum))
	r.assign()
	acked := runtime.Record{MessageID: r.ids[0], Attempt: 1, Path: runtime.PathAcked, Handler: "ok"}
	r.struck(faultNodeStopped)
	r.struck(faultLeaderKilled)
	r.observe(acked)
	r.struck(faultConsumerNode)
	res := account(r.evidence(nil, map[string][]found{}, map[string]int{}))
	t.Log("\n" + res.String())
	want := []string{
		faultNodeStopped + ": consumption did not resume before the next node fault",
		faultLeaderKilled + ": consumption resumed after ",
		faultConsumerNode + ": consumption did not resume before the end",
	}
	if len(res.NodeFaults) != len(want) {
		t.Fatalf("node faults %q, want %d", res.NodeFaults, len(want))
	}
	for i, w := range want {
		if !strings.Contains(res.NodeFaults[i], w) {
			t.Errorf("node fault %d: %q, want %q in it", i+1, res.NodeFaults[i], w)
		}
	}
	if len(res.Resumes[faultLeaderKilled]) != 1 || len(res.Resumes) != 1 {
		t.Errorf("resumes %v, want one, after %s", res.Resumes, faultLeaderKilled)
	}
}
