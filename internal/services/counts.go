package services

import (
	"bytes"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Counts are a queue's ready and unacknowledged messages, as rabbitmqctl
// list_queues gives them.
type Counts struct{ Ready, Unacked int }

// A read is one rabbitmqctl run and the callers it answers.
type read struct {
	done   chan struct{}
	counts map[string]Counts
	err    error
}

// The reads of one test binary. Its broker tests run side by side and each
// rabbitmqctl run starts an Erlang VM, about a second of CPU, which on two
// cores is time taken from the tests themselves: so the callers that wait
// at the same moment share one run. A run answers only the callers that
// came before it started, so that none is given figures older than its
// call.
var reads struct {
	sync.Mutex
	next    *read // the run not yet started, which callers join
	running bool
}

// QueueCounts reads every queue's counts on the machine's broker (the vhost
// "/") with rabbitmqctl, failing t when it cannot. The map is shared with
// the other callers of the same run: it is not to be changed.
func QueueCounts(t testing.TB) map[string]Counts {
	t.Helper()
	reads.Lock()
	if reads.next == nil {
		reads.next = &read{done: make(chan struct{})}
	}
	r := reads.next
	if !reads.running {
		reads.running = true
		go runReads()
	}
	reads.Unlock()
	<-r.done
	if r.err != nil {
		t.Fatalf("rabbitmqctl list_queues: %v", r.err)
	}
	return r.counts
}

// runReads runs rabbitmqctl while callers wait for a run, one run at a time.
func runReads() {
	reads.Lock()
	defer reads.Unlock()
	for reads.next != nil {
		r := reads.next
		reads.next = nil
		reads.Unlock()
		r.counts, r.err = listQueues()
		close(r.done)
		reads.Lock()
	}
	reads.running = false
}

func listQueues() (map[string]Counts, error) {
	out, err := exec.Command("rabbitmqctl", "list_queues", "-q", "--no-table-headers", "name", "messages_ready", "messages_unacknowledged").Output()
	if err != nil {
		return nil, err
	}
	counts := map[string]Counts{}
	for line := range bytes.Lines(out) {
		if f := strings.Fields(string(line)); len(f) == 3 {
			ready, _ := strconv.Atoi(f[1])
			unacked, _ := strconv.Atoi(f[2])
			counts[f[0]] = Counts{ready, unacked}
		}
	}
	return counts, nil
}
