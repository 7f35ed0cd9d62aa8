package ledger

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lily-mq/lily/internal/services"
	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/topology"
)

var processesN = flag.Int("ledger.processes.n", 1500, "messages in TestLedgerProcesses")

// TestLedgerProcesses runs the process ledger: three consumer processes
// (this test binary run again, as TestLedgerProcessChild) compete on one
// queue, fed by the outbox relay in a process of its own, while the test
// writes -ledger.processes.n messages into the outbox over 20 s and kills
// one of the four with SIGKILL every 1 to 3 s, starting another after a
// short pause. Nothing is lost, every second run and extra copy is
// explained, no 406, and both roles were killed. It needs RabbitMQ and
// PostgreSQL; a missing one fails it.
func TestLedgerProcesses(t *testing.T) {
	url, dsn := services.RabbitMQ(t), services.PostgreSQL(t)
	s := testSeed(t)
	res, err := RunProcesses(context.Background(), ProcessConfig{
		Config: Config{
			N: *processesN, Seed: s, BrokerURL: url, PostgresDSN: dsn,
			FaultEvery: 2 * time.Second, PublishOver: 20 * time.Second, Deadline: 75 * time.Second,
		},
		ChildArgs: []string{"-test.run=^TestLedgerProcessChild$"},
	})
	if err != nil {
		t.Fatal(err)
	}
	accounted(t, res, *processesN)
	for _, kind := range []string{consumerKilled, relayKilled} {
		if res.Faults[kind] == 0 {
			t.Errorf("no %s", kind)
		}
	}
	if len(res.Reports) != 3 {
		t.Errorf("%d consumer reports at the end, want 3", len(res.Reports))
	}
}

// A process ledger whose kills never struck did not test them: each kind
// is counted from the start, and one still at 0 is a problem, as in Run.
// (The writes hold their last messages back for a kind that has not struck,
// until two thirds of the Deadline: a short one keeps the test short.)
func TestLedgerProcessesReportsKillsThatNeverStruck(t *testing.T) {
	url, dsn := services.RabbitMQ(t), services.PostgreSQL(t)
	res, err := RunProcesses(context.Background(), ProcessConfig{
		Config: Config{
			N: 30, Seed: testSeed(t), BrokerURL: url, PostgresDSN: dsn,
			FaultEvery: 10 * time.Minute, Deadline: 6 * time.Second,
		},
		ChildArgs: []string{"-test.run=^TestLedgerProcessChild$"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("faults %v lost %d problems %q", res.Faults, res.Fates[Lost], res.Problems)
	for _, kind := range []string{consumerKilled, relayKilled} {
		if n, ok := res.Faults[kind]; !ok || n != 0 {
			t.Errorf("Faults[%q] = %d, %v; want 0, counted", kind, n, ok)
		}
		wantProblem(t, res, fmt.Sprintf("no fault %q struck", kind))
	}
}

// TestLedgerProcessChild is a process of TestLedgerProcesses, which starts
// it; alone, it does nothing.
func TestLedgerProcessChild(t *testing.T) {
	child, err := RunChild()
	if !child {
		t.Skip("a process of TestLedgerProcesses, which starts it")
	}
	if err != nil {
		t.Fatal(err)
	}
}

// The accounting's verdicts on what a killed process and the relay leave.

func TestAccountExplainsARunInAKilledProcess(t *testing.T) {
	// A killed process ran attempt 1 and wrote no record; another ran it
	// again and acked it.
	e := oneMessage(Success, acked(1))
	e.runs[workKey{"m1", 1}] = 2
	wantProblem(t, account(e), "m1 attempt 1: the handler ran 2 times")
	e.killed = map[workKey]int{{"m1", 1}: 1}
	res := account(e)
	wantNoProblem(t, res)
	if res.SecondDeliveries[killedMidRun] != 1 {
		t.Errorf("second runs %v", res.SecondDeliveries)
	}

	// The killed process handed attempt 1 off to the DLQ before it died:
	// the message is there twice.
	dead := runtime.Record{MessageID: "m1", Attempt: 1, Path: runtime.PathDeadLettered, Handler: "permanent",
		Handoff: "confirmed", Destination: dlq, Reason: "permanent failure: refused"}
	e = oneMessage(Refused, dead)
	e.runs[workKey{"m1", 1}] = 2
	e.queued["m1"] = []found{{InDLQ, 1, false}, {InDLQ, 1, false}}
	e.killed = map[workKey]int{{"m1", 1}: 1}
	res = account(e)
	wantNoProblem(t, res)
	if res.ExtraCopies[killedMidRun] != 1 {
		t.Errorf("extra copies %v", res.ExtraCopies)
	}

	// A second run of attempt 2: two copies of it, one handed off by the
	// killed process.
	e = oneMessage(Flaky, handedOff(1, "q.retry"), acked(2), acked(2))
	e.runs[workKey{"m1", 1}] = 2
	e.runs[workKey{"m1", 2}] = 2
	wantProblem(t, account(e), "m1 attempt 2: the handler ran 2 times")
	e.killed = map[workKey]int{{"m1", 1}: 1}
	res = account(e)
	wantNoProblem(t, res)
	if res.SecondDeliveries[killedHandoff] != 1 {
		t.Errorf("second runs %v", res.SecondDeliveries)
	}
}

// An ACK a killed process logged never proven is among the ambiguous
// already: counted again as the killed process's, one ACK would explain two
// redeliveries.
func TestKilledACKsLeaveOutThoseLoggedAmbiguous(t *testing.T) {
	k := workKey{"m1", 1}
	kid := func(killed bool, acked, proven, ambiguous int) *proc {
		p := &proc{runs: map[workKey]int{}, ran: map[workKey]int{},
			acked: map[workKey]int{k: acked}, proven: map[workKey]int{k: proven}, ambiguous: map[workKey]int{k: ambiguous}, exited: make(chan struct{})}
		p.killed.Store(killed)
		close(p.exited)
		return p
	}
	c := &children{all: []*proc{kid(true, 2, 1, 1), kid(true, 3, 0, 1), kid(false, 4, 0, 0)}}
	if _, acks, _ := c.killedRuns(); acks[k] != 2 {
		t.Errorf("killed ACKs %v, want 2: the second process's two not logged", acks)
	}
}

func TestAccountTakesTheClaimOfAKilledProcess(t *testing.T) {
	// No record, in no queue: lost, even with a claim, unless a process
	// that ran it was killed (after its ACK, before its record).
	e := oneMessage(Success)
	e.runs[workKey{"m1", 1}] = 1
	e.succeeded[workKey{"m1", 1}] = true
	e.claimed = map[string]bool{"m1": true}
	wantProblem(t, account(e), "m1 (success) is lost")
	e.killed = map[workKey]int{{"m1", 1}: 1}
	res := account(e)
	wantNoProblem(t, res)
	if res.Fates[Acked] != 1 {
		t.Errorf("fates %v", res.Fates)
	}
	clear(e.succeeded)
	wantProblem(t, account(e), "m1 (success) is lost")
	e.succeeded[workKey{"m1", 1}] = true
	e.claimed = nil
	wantProblem(t, account(e), "m1 (success) is lost")

	// The kill is of the attempt that succeeded: a process killed while it
	// ran attempt 1, before it returned, acked nothing, though attempt 2
	// succeeded (its commit's outcome unknown, requeued) and its claim
	// committed.
	e = oneMessage(Success, requeued(2, "commit ambiguous"))
	e.runs[workKey{"m1", 1}] = 1
	e.runs[workKey{"m1", 2}] = 1
	e.succeeded[workKey{"m1", 2}] = true
	e.claimed = map[string]bool{"m1": true}
	e.killed = map[workKey]int{{"m1", 1}: 1}
	wantProblem(t, account(e), "m1 (success) is lost")

	// Attempt 2's redelivery met the claim in a process killed after that
	// duplicate's ACK and before its record: it ran no handler, and acked
	// the committed work.
	e = oneMessage(Flaky, handedOff(1, "q.retry"), requeued(2, "commit ambiguous"))
	e.runs[workKey{"m1", 1}] = 1
	e.runs[workKey{"m1", 2}] = 1
	e.succeeded[workKey{"m1", 2}] = true
	e.claimed = map[string]bool{"m1": true}
	wantProblem(t, account(e), "m1 (retryable-then-success) is lost")
	e.killedDuplicates = map[workKey]int{{"m1", 2}: 1}
	res = account(e)
	wantNoProblem(t, res)
	if res.Fates[Acked] != 1 {
		t.Errorf("fates %v", res.Fates)
	}
	// Unless no success of its handler committed.
	clear(e.succeeded)
	wantProblem(t, account(e), "m1 (retryable-then-success) is lost")
}

// A killed process's inbox duplicates are counted, by attempt, beyond those
// its records show: it settled them without a run, so its runs do not.
func TestKilledDuplicatesLeaveOutThoseRecorded(t *testing.T) {
	k := workKey{"m1", 2}
	pr := &processRun{run: newRun(Config{}, processSpec("q"))}
	c := &children{pr: pr}
	kid := func(killed bool, recorded bool) *proc {
		p := &proc{runs: map[workKey]int{}, ran: map[workKey]int{}, duplicates: map[workKey]int{}, recordedDuplicates: map[workKey]int{},
			acked: map[workKey]int{}, exited: make(chan struct{})}
		c.apply(p, event{Kind: evDuplicate, ID: "m1", Attempt: 2})
		if recorded {
			c.apply(p, event{Kind: evRecord, Record: &runtime.Record{MessageID: "m1", Attempt: 2, Path: runtime.PathAcked, Commit: "duplicate"}})
		}
		p.killed.Store(killed)
		close(p.exited)
		return p
	}
	c.all = []*proc{kid(true, false), kid(true, true), kid(false, false)}
	if _, _, duplicates := c.killedRuns(); duplicates[k] != 1 || len(duplicates) != 1 {
		t.Errorf("killed duplicates %v, want the first process's alone", duplicates)
	}
	pr.ids, pr.kids = []string{"m1"}, c
	if !pr.openOnlyWhereKilled() {
		t.Error("m1, settled as a duplicate by a killed process, holds the quiet end")
	}
}

func TestAccountExplainsACopyTheRelayPublishedAgain(t *testing.T) {
	// The relay published m1 twice: the second copy failed too, and is in
	// the DLQ beside the first.
	dead := runtime.Record{MessageID: "m1", Attempt: 1, Path: runtime.PathDeadLettered, Handler: "permanent",
		Handoff: "confirmed", Destination: dlq, Reason: "permanent failure: refused"}
	e := oneMessage(Refused, dead, dead)
	e.runs[workKey{"m1", 1}] = 2
	e.queued["m1"] = []found{{InDLQ, 1, false}, {InDLQ, 1, false}}
	res := account(e)
	wantProblem(t, res, "m1 attempt 1: the handler ran 2 times")
	wantProblem(t, res, "m1 (permanent) is present 2 times at the end")
	e.leasedAgain = map[string]int{"m1": 1}
	e.arrivals = map[workKey][]arrival{{"m1", 1}: {{"p1", false}, {"p2", false}}}
	res = account(e)
	wantNoProblem(t, res)
	if res.SecondDeliveries[relayedAgain] != 1 || res.ExtraCopies[relayedAgain] != 1 {
		t.Errorf("second runs %v, extra copies %v", res.SecondDeliveries, res.ExtraCopies)
	}

	// A lease explains a second run only if the runs came from two
	// publishes: one publish delivered again is a redelivery, which only a
	// journey without proof explains.
	e.arrivals = map[workKey][]arrival{{"m1", 1}: {{"p1", false}, {"p1", true}}}
	wantProblem(t, account(e), "m1 attempt 1: the handler ran 2 times")

	// A lease whose publish no run noted may be a copy left, or a delivery
	// settled from the record, each once.
	e = oneMessage(Success, acked(1))
	e.runs[workKey{"m1", 1}] = 1
	e.arrivals = map[workKey][]arrival{{"m1", 1}: {{"p1", false}}}
	e.queued["m1"] = []found{{InMain, 1, false}}
	wantProblem(t, account(e), "m1 attempt 1: the handler ran 1 times, with 1 copies of it left in a queue")
	e.leasedAgain = map[string]int{"m1": 1}
	wantNoProblem(t, account(e))
	fromRecord := runtime.Record{MessageID: "m1", Attempt: 1, Path: runtime.PathAcked, Handler: "completed earlier"}
	e.records = append(e.records, fromRecord)
	wantProblem(t, account(e), "m1 attempt 1: the handler ran 1 times and 1 more deliveries found its work done, with 1 copies of it left in a queue")
}

// A child tells how each run's delivery came, and each duplicate's, for the
// accounting to tell a publish made again from a redelivery.
func TestChildrenNoteHowDeliveriesCame(t *testing.T) {
	pr := &processRun{run: newRun(Config{}, processSpec("q"))}
	c := &children{pr: pr}
	p := &proc{runs: map[workKey]int{}, duplicates: map[workKey]int{}}
	c.apply(p, event{Kind: evRun, ID: "m1", Attempt: 1, Publish: "p1"})
	c.apply(p, event{Kind: evDuplicate, ID: "m1", Attempt: 1, Publish: "p2", Redelivered: true})
	want := []arrival{{"p1", false}, {"p2", true}}
	if got := pr.arrivals[workKey{"m1", 1}]; !slices.Equal(got, want) {
		t.Errorf("arrivals %v, want %v", got, want)
	}
	if pr.runs[workKey{"m1", 1}] != 1 || p.runs[workKey{"m1", 1}] != 1 {
		t.Errorf("runs %v, the process's %v: a duplicate ran no handler", pr.runs, p.runs)
	}
}

// The quiet end takes a journey no record shows over for one a killed
// process ended; any other is still under way, its delivery perhaps held by
// a live consumer, which the queues' counts of ready messages do not show.
func TestQuietEndWaitsForJourneysNoKillExplains(t *testing.T) {
	pr := &processRun{run: newRun(Config{}, processSpec("q"))}
	pr.ids = []string{"m1", "m2"}
	pr.done["m2"] = true
	kid := func(killed bool) *proc {
		p := &proc{runs: map[workKey]int{{"m1", 1}: 1}, ran: map[workKey]int{}, exited: make(chan struct{})}
		p.killed.Store(killed)
		close(p.exited)
		return p
	}
	pr.kids = &children{all: []*proc{kid(false)}}
	if pr.openOnlyWhereKilled() {
		t.Error("m1, run by a live process and not seen over, is taken for over")
	}
	pr.kids.all = append(pr.kids.all, kid(true))
	if !pr.openOnlyWhereKilled() {
		t.Error("m1, run by a killed process, holds the quiet end")
	}
}

// Each consumer process that stopped well is held to its own report; a
// killed one left none, and the relay's is not of deliveries.
func TestEveryConsumerProcessIsHeldToItsReport(t *testing.T) {
	kid := func(name string, killed bool, rep *runtime.Report, recs ...runtime.Record) *proc {
		p := &proc{role: consumerRole, name: name, records: recs, report: rep, exited: make(chan struct{})}
		p.killed.Store(killed)
		close(p.exited)
		return p
	}
	c := &children{all: []*proc{
		kid("c1", false, &runtime.Report{Counts: map[runtime.Path]int{runtime.PathAcked: 1}, AcksProven: 1}, acked(1)),
		kid("c2", true, nil, acked(1)),
		kid("c3", false, &runtime.Report{Counts: map[runtime.Path]int{runtime.PathAcked: 2}, AcksProven: 1}, acked(1)),
	}}
	// The relay's report counts what it published, of which no consumer
	// writes a record.
	relay := kid("r1", false, &runtime.Report{Counts: map[runtime.Path]int{"published": 3}})
	relay.role = relayRole
	c.all = append(c.all, relay)
	e := oneMessage(Success, acked(1), acked(1), acked(1))
	e.runs[workKey{"m1", 1}] = 3
	e.ambiguous[workKey{"m1", 1}] = 2
	e.reported = c.reported()
	res := account(e)
	if len(res.Problems) != 1 {
		t.Fatalf("problems %q, want c3's alone", res.Problems)
	}
	wantProblem(t, res, "consumer process c3: the reports count 2 deliveries acked, the records 1")
}

// The runtime records a timeout at the deadline, before the handler
// returns and tells how it ended: a process killed in between leaves the
// record's "timed out", and the retryable copy its handoff made, with no
// end the ledger heard. They stand on that run's word alone.
func TestAccountTakesTheTimeoutOfARunKilledBeforeItsEnd(t *testing.T) {
	timedOut := handedOff(1, "q.retry")
	timedOut.Handler = "timed out"
	e := oneMessage(Hangs, timedOut, acked(2))
	clear(e.ended)
	e.ended[ending{workKey{"m1", 2}, "ok"}] = true
	e.runs[workKey{"m1", 1}] = 1
	e.runs[workKey{"m1", 2}] = 1
	e.failures = []failure{{id: "m1", fate: InBucket, kind: "retryable", attempt: 1}}
	e.unheard = map[workKey]int{{"m1", 1}: 1}
	wantNoProblem(t, account(e))
	// Its end heard, the run is held to it.
	e.unheard = nil
	res := account(e)
	wantProblem(t, res, `m1 (hang) attempt 1's record says its handler ended "timed out", and the ledger's runs of it ended in no way it heard`)
	wantProblem(t, res, `m1 (hang) has a copy whose failure kind is "retryable" on attempt 1, and the ledger's runs of it ended in no way it heard`)
	// Nor does it vouch for another kind.
	e.unheard = map[workKey]int{{"m1", 1}: 1}
	e.failures = []failure{{id: "m1", fate: InBucket, kind: "none", attempt: 1}}
	wantProblem(t, account(e), `m1 (hang) has a copy whose failure kind is "none" on attempt 1`)
}

// A killed run excuses a permanent message's retry only when the ledger
// never heard it end: one that told "permanent" before its process died
// was not timed out.
func TestAccountHoldsAKilledRunItHeardEndToItsEnd(t *testing.T) {
	e := oneMessage(Refused)
	e.runs[workKey{"m1", 1}] = 1
	e.killed = map[workKey]int{{"m1", 1}: 1}
	e.ended[ending{workKey{"m1", 1}, "permanent"}] = true
	e.queued["m1"] = []found{{InMain, 2, false}}
	wantProblem(t, account(e), "m1 (permanent) reached attempt 2, and its handler failed permanently on attempt 1")
	clear(e.ended)
	e.unheard = map[workKey]int{{"m1", 1}: 1}
	for _, p := range account(e).Problems {
		if strings.Contains(p, "failed permanently") {
			t.Errorf("problem %q", p)
		}
	}
}

// A run's end is heard by its last note, how it returned: a "timed out"
// before it is not an end.
func TestUnheardRunsAreThoseOfKilledProcessesNeverTold(t *testing.T) {
	c := &children{pr: &processRun{run: newRun(Config{N: 1}, spec("q", topology.Classic))}}
	p := &proc{runs: map[workKey]int{}, ran: map[workKey]int{}, heard: map[workKey]int{}, exited: make(chan struct{})}
	c.all = []*proc{p}
	for _, ev := range []event{
		{Kind: evRun, ID: "m1", Attempt: 1}, {Kind: evEnded, ID: "m1", Attempt: 1, Detail: "timed out"}, {Kind: evEnded, ID: "m1", Attempt: 1, Detail: "permanent"},
		{Kind: evRun, ID: "m1", Attempt: 1}, {Kind: evEnded, ID: "m1", Attempt: 1, Detail: "timed out"},
	} {
		c.apply(p, ev)
	}
	close(p.exited)
	if unheard := c.unheardRuns(); len(unheard) != 0 {
		t.Errorf("unheard %v in a process not killed", unheard)
	}
	p.killed.Store(true)
	if unheard := c.unheardRuns(); unheard[workKey{"m1", 1}] != 1 {
		t.Errorf("unheard %v, want one run of attempt 1", unheard)
	}
}
