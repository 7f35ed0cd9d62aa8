package ledger

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/lily-mq/lily/internal/backoff"
	"github.com/lily-mq/lily/internal/faults"
	"github.com/lily-mq/lily/runtime"
)

// Cluster is a RabbitMQ cluster the ledger runs on, and the script that acts
// on its nodes (the repository's .ci/cluster).
type Cluster struct {
	// URLs reach each node, in the order the script numbers them from 1.
	URLs []string
	// Script is called as "stop N", "start N" (which waits until the node
	// runs in the cluster again), "kill N" (SIGKILL), "leader QUEUE" and
	// "node-of CONNECTION", which print a node's number, and "ctl ARGS...",
	// rabbitmqctl ARGS on the first node that answers.
	Script string
}

// do runs the script with args and returns what it printed.
func (c *Cluster) do(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, c.Script, args...)
	cmd.WaitDelay = 5 * time.Second // the script's rabbitmqctl may outlive it
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", c.Script, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}

// node asks the script for a node's number.
func (c *Cluster) node(ctx context.Context, args ...string) (int, error) {
	out, err := c.do(ctx, args...)
	if err != nil {
		return 0, err
	}
	lines := strings.Split(out, "\n")
	n, err := strconv.Atoi(strings.TrimSpace(lines[len(lines)-1]))
	if err != nil || n < 1 || n > len(c.URLs) {
		return 0, fmt.Errorf("%s %s printed %q, not a node's number", c.Script, strings.Join(args, " "), out)
	}
	return n, nil
}

// down takes node n down by how ("stop" or "kill") and measures, from the
// moment it asked (a stop_app closes the node's connections before it
// returns), how soon consumption resumes after fault. It runs to its end
// whatever ctx says, so that a node is never left half down.
func (r *run) down(ctx context.Context, fault, how string, n int) error {
	r.struck(fault)
	_, err := r.cfg.Cluster.do(context.WithoutCancel(ctx), how, strconv.Itoa(n))
	return err
}

// downAndUp takes node n down, waits, and starts it again, whatever ctx
// says and even when the way down failed: a node left down would fail the
// next fault and the drain.
func (r *run) downAndUp(ctx context.Context, fault, how string, n int) error {
	err := r.down(ctx, fault, how, n)
	if err == nil {
		backoff.Sleep(ctx, r.between(time.Second, 3*time.Second))
	}
	_, started := r.cfg.Cluster.do(context.WithoutCancel(ctx), "start", strconv.Itoa(n))
	return errors.Join(err, healed(started))
}

// The faults of a cluster run.
const (
	faultNodeStopped    = "a node stopped (stop_app), then started"
	faultLeaderKilled   = "the queue leader's node killed (SIGKILL), then started"
	faultConsumerNode   = "the consumer's node killed (SIGKILL), then started"
	faultRollingRestart = "every node restarted in turn (stop_app, start_app)"
)

// nodeFault says whether the fault named name took a node down.
func nodeFault(name string) bool {
	switch name {
	case faultNodeStopped, faultLeaderKilled, faultConsumerNode, faultRollingRestart:
		return true
	}
	return false
}

// clusterFaults are the faults of a cluster run: nodes stopped and killed
// under the consumer, each started again before the next fault. Each
// measures, from the moment its node went down, how soon consumption
// resumed.
func (r *run) clusterFaults() []fault {
	c := r.cfg.Cluster
	kinds := []fault{
		{faultNodeStopped, func(ctx context.Context) (bool, error) {
			return true, r.downAndUp(ctx, faultNodeStopped, "stop", 1+r.rng.IntN(len(c.URLs)))
		}},
		{faultLeaderKilled, func(ctx context.Context) (bool, error) {
			n, err := c.node(ctx, "leader", r.spec.Name)
			if err != nil {
				return false, err
			}
			return true, r.downAndUp(ctx, faultLeaderKilled, "kill", n)
		}},
		{faultConsumerNode, func(ctx context.Context) (bool, error) {
			n, err := c.node(ctx, "node-of", faults.ConnectionName(r.spec.Name, "consume"))
			if err != nil {
				return false, err
			}
			return true, r.downAndUp(ctx, faultConsumerNode, "kill", n)
		}},
	}
	if r.cfg.RestartBroker {
		kinds = append(kinds, fault{faultRollingRestart, func(ctx context.Context) (bool, error) {
			for n := range len(c.URLs) {
				err := r.down(ctx, faultRollingRestart, "stop", n+1)
				if _, started := c.do(context.WithoutCancel(ctx), "start", strconv.Itoa(n+1)); err != nil || started != nil {
					return false, errors.Join(err, healed(started))
				}
			}
			return true, nil
		}})
	}
	return kinds
}

// nodeDown is a node taken down, and whether and how soon consumption
// resumed after it: the consumer acked a delivery it received after.
type nodeDown struct {
	fault   string
	at      time.Time
	resumed bool
	after   time.Duration
}

// struck starts measuring how soon consumption resumes after fault, a node
// going down now. One measured before, if consumption did not resume after
// it, stays in the list as such.
func (r *run) struck(fault string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.downs = append(r.downs, nodeDown{fault: fault, at: time.Now()})
}

// resumed measures, with rec just written, how long after the last node
// fault the consumer acked the first delivery it received after it. r.mu
// is held.
func (r *run) resumed(rec runtime.Record) {
	if len(r.downs) == 0 || rec.Path != runtime.PathAcked {
		return
	}
	last := &r.downs[len(r.downs)-1]
	now := time.Now()
	if last.resumed || now.Add(-rec.Duration).Before(last.at) {
		return // measured already, or received before the fault
	}
	last.resumed, last.after = true, now.Sub(last.at)
}

// resumes are the resume times measured, by fault, of node faults in order.
func resumes(faults []nodeDown) map[string][]time.Duration {
	out := map[string][]time.Duration{}
	for _, f := range faults {
		if f.resumed {
			out[f.fault] = append(out[f.fault], f.after)
		}
	}
	return out
}

// nodeFaultLines tell of each node fault, in order: when, which, and how
// soon consumption resumed after it, or that it did not before the next
// node fault or the end.
func nodeFaultLines(faults []nodeDown) []string {
	var out []string
	for i, f := range faults {
		line := f.at.Format("15:04:05.000") + " " + f.fault + ": "
		switch {
		case f.resumed:
			line += "consumption resumed after " + f.after.Round(time.Millisecond).String()
		case i < len(faults)-1:
			line += "consumption did not resume before the next node fault"
		default:
			line += "consumption did not resume before the end"
		}
		out = append(out, line)
	}
	return out
}
