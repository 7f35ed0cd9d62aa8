package ledger

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/lily-mq/lily/runtime"
)

// slots are the roles of the process ledger's four processes: three
// consumers and the relay. A killed process's successor takes its slot.
var slots = [...]string{consumerRole, consumerRole, consumerRole, relayRole}

// proc is one child process.
type proc struct {
	role, name string
	cmd        *exec.Cmd
	started    chan struct{} // closed once SIGTERM stops it well
	exited     chan struct{} // closed once its output is read and it ended
	// killed is set before the fault kills it.
	killed atomic.Bool
	// What it streamed, its reader's alone until exited, by attempt: the
	// handler runs it announced, those its records show ran and those it
	// told the end of, the inbox duplicates it announced and those its
	// records show, the ACKs its records show sent, those proven and those
	// it logged never proven; its records and its report; why its first
	// connection failed, or its service did.
	runs, ran, heard, duplicates, recordedDuplicates map[workKey]int
	acked, proven, ambiguous                         map[workKey]int
	records                                          []runtime.Record
	report                                           *runtime.Report
	startFailed, runFailed                           string
	// output keeps the end of its stderr and of what it wrote that is not an
	// event (a test binary's verdict, a panic), shown when it fails.
	output tail
}

// children starts, kills and stops the child processes of a run, and hands
// what they stream to the run.
type children struct {
	pr     *processRun
	binary string
	last   atomic.Int64 // when an event last came, in Unix nanoseconds

	mu       sync.Mutex
	live     [len(slots)]*proc
	all      []*proc
	named    map[string]int // processes started, by role, to name each
	failures [len(slots)]int
	stopping bool
}

// maxFailedStarts is how many processes of one slot that ended by
// themselves are a setup error (credentials, a vhost), not bad luck: the
// slot is then left empty.
const maxFailedStarts = 50

func newChildren(pr *processRun) *children {
	c := &children{pr: pr, named: map[string]int{}}
	c.last.Store(time.Now().UnixNano())
	return c
}

// lastEvent is when a child last told something.
func (c *children) lastEvent() time.Time { return time.Unix(0, c.last.Load()) }

// start starts a process in slot.
func (c *children) start(slot int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.startLocked(slot)
}

// startLocked starts a process in slot, unless the run is stopping; c.mu is
// held.
func (c *children) startLocked(slot int) error {
	if c.stopping {
		return nil
	}
	if c.binary == "" {
		binary, err := os.Executable() // this program, run again
		if err != nil {
			return err
		}
		c.binary = binary
	}
	role := slots[slot]
	c.named[role]++
	p := &proc{role: role, name: fmt.Sprintf("%c%d", role[0], c.named[role]), started: make(chan struct{}), exited: make(chan struct{}),
		runs: map[workKey]int{}, ran: map[workKey]int{}, heard: map[workKey]int{}, duplicates: map[workKey]int{}, recordedDuplicates: map[workKey]int{},
		acked: map[workKey]int{}, proven: map[workKey]int{}, ambiguous: map[workKey]int{}}
	pr := c.pr
	cfg, err := json.Marshal(childConfig{
		Role: role, Name: p.name, N: pr.cfg.N, Seed: pr.cfg.Seed,
		AMQP: pr.urls[slot], DSN: pr.cfg.PostgresDSN, Schema: pr.schema, Queue: pr.spec.Name, App: pr.app + "-" + p.name,
	})
	if err != nil {
		return err
	}
	p.cmd = exec.Command(c.binary, pr.pcfg.ChildArgs...)
	p.cmd.Env = append(os.Environ(), childEnv+"="+string(cfg))
	// A group of its own: a terminal's ^C stops the parent, which stops
	// the children well, rather than killing them all.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p.cmd.Stderr = &p.output
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		return err
	}
	// Its stdin stays open while this process lives: its end tells the child
	// to stop, so that none outlives a parent that died.
	if _, err := p.cmd.StdinPipe(); err != nil {
		return err
	}
	if err := p.cmd.Start(); err != nil {
		return fmt.Errorf("ledger: starting %s process %s: %w", role, p.name, err)
	}
	c.live[slot] = p
	c.all = append(c.all, p)
	go c.read(slot, p, out)
	return nil
}

// read hands p's events to the run until its stdout ends, then waits for
// its end and supervises it.
func (c *children) read(slot int, p *proc, out io.Reader) {
	sc := bufio.NewScanner(out)
	sc.Buffer(nil, 64<<20) // a report lists up to a thousand records
	for sc.Scan() {
		line := sc.Bytes()
		var ev event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &ev) != nil {
			fmt.Fprintf(&p.output, "%s\n", line)
			continue
		}
		c.last.Store(time.Now().UnixNano())
		c.apply(p, ev)
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintf(&p.output, "ledger: reading its output: %v\n", err)
		_, _ = io.Copy(io.Discard, out) // or it blocks on a full pipe
	}
	_ = p.cmd.Wait()
	close(p.exited)
	c.supervise(slot, p)
}

// apply adds one event of p's to the run's evidence, as if the run's own
// consumer had observed and logged it, and to p's tally.
func (c *children) apply(p *proc, ev event) {
	pr := c.pr
	switch ev.Kind {
	case evStarted:
		close(p.started)
	case evRun, evDuplicate:
		k := workKey{ev.ID, ev.Attempt}
		pr.mu.Lock()
		pr.arrivals[k] = append(pr.arrivals[k], arrival{ev.Publish, ev.Redelivered})
		if ev.Kind == evRun {
			pr.runs[k]++
			p.runs[k]++
		} else {
			p.duplicates[k]++
		}
		pr.mu.Unlock()
	case evSucceeded:
		pr.mu.Lock()
		pr.succeeded[workKey{ev.ID, ev.Attempt}] = true
		pr.mu.Unlock()
	case evEnded:
		k := workKey{ev.ID, ev.Attempt}
		pr.noteEnding(ending{k, ev.Detail})
		// Each run notes once how it returned; a "timed out" may come
		// before or after. An after_delivery out of time is no run's end.
		if ev.Detail != "timed out" && ev.Detail != afterLate {
			p.heard[k]++
		}
	case evRecord:
		if ev.Record == nil {
			return
		}
		rec := *ev.Record
		pr.observe(rec)
		p.records = append(p.records, rec)
		k := workKey{rec.MessageID, rec.Attempt}
		if ran(rec) {
			p.ran[k]++
		}
		if rec.Commit == "duplicate" {
			p.recordedDuplicates[k]++
		}
		switch rec.Path {
		case runtime.PathAcked, runtime.PathRetried, runtime.PathDeadLettered:
			p.acked[k]++
		}
	case evProven:
		p.proven[workKey{ev.ID, ev.Attempt}]++
	case evWarning:
		if ev.Stage == "ack-ambiguous" {
			p.ambiguous[workKey{ev.ID, ev.Attempt}]++
		}
		_ = pr.Handle(context.Background(), ev.asRecord())
	case evReport:
		p.report = ev.Report
	case evFailedStart:
		p.startFailed = ev.Detail
	case evError:
		// As a session that ended: a 406 among them is counted.
		pr.mu.Lock()
		pr.lost = append(pr.lost, p.name+": "+ev.Detail)
		pr.mu.Unlock()
		p.runFailed = ev.Detail
	}
}

// supervise answers the end of p, which was in slot: a process that ended
// by itself (neither killed nor stopped) is started again after 100 ms, as a
// supervisor would, and counted: a failed start, or a harness error.
func (c *children) supervise(slot int, p *proc) {
	c.mu.Lock()
	unexpected := !p.killed.Load() && !c.stopping && c.live[slot] == p
	c.mu.Unlock()
	if !unexpected {
		return
	}
	if p.startFailed == "" {
		c.pr.harnessError("%s process %s ended by itself (%s): %s %s", p.role, p.name, p.cmd.ProcessState, p.runFailed, p.output.String())
	} else {
		c.pr.mu.Lock()
		c.pr.failedStarts++
		c.pr.mu.Unlock()
	}
	time.Sleep(100 * time.Millisecond)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.live[slot] != p {
		return
	}
	if c.failures[slot]++; c.failures[slot] == maxFailedStarts {
		c.pr.harnessError("%d %s processes of one slot ended by themselves; the last: %s", maxFailedStarts, p.role, p.startFailed)
		return
	}
	if err := c.startLocked(slot); err != nil {
		c.pr.harnessError("starting a %s process: %v", p.role, err)
	}
}

// kill kills the process in slot with SIGKILL and waits for its end. It
// reports false when there was none to kill: it had ended by itself.
func (c *children) kill(slot int) bool {
	c.mu.Lock()
	p := c.live[slot]
	ended := p == nil || p.ended()
	if !ended {
		p.killed.Store(true)
	}
	c.mu.Unlock()
	if ended {
		return false
	}
	_ = p.cmd.Process.Kill() // no deferred call, no last record
	<-p.exited
	return true
}

// stopAll stops the live processes as a supervisor would (SIGTERM), each of
// which must end well, and returns the consumers' reports.
func (c *children) stopAll() []*runtime.Report {
	c.mu.Lock()
	c.stopping = true
	live := c.live
	c.mu.Unlock()
	for _, p := range live {
		if p == nil {
			continue
		}
		// One started a moment ago may not handle SIGTERM yet: it would die
		// of it.
		select {
		case <-p.started:
		case <-p.exited:
		case <-time.After(30 * time.Second):
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	var reps []*runtime.Report
	for _, p := range live {
		if p == nil {
			continue
		}
		select {
		case <-p.exited:
		case <-time.After(30 * time.Second):
			c.pr.harnessError("%s process %s did not stop within 30 s: %s", p.role, p.name, p.output.String())
			p.killed.Store(true)
			_ = p.cmd.Process.Kill()
			<-p.exited
			continue
		}
		switch {
		case !p.cmd.ProcessState.Success():
			c.pr.harnessError("%s process %s: %s: %s %s", p.role, p.name, p.cmd.ProcessState, p.runFailed, p.output.String())
		case p.role == consumerRole && p.report != nil:
			reps = append(reps, p.report)
		case p.role == consumerRole && p.startFailed == "":
			c.pr.harnessError("consumer process %s stopped without its report: %s", p.name, p.output.String())
		}
	}
	return reps
}

// reported pairs the records of each consumer that stopped well with its
// report. Every process has ended.
func (c *children) reported() []reported {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []reported
	for _, p := range c.all {
		if p.role == consumerRole && p.report != nil && p.ended() {
			out = append(out, reported{name: p.name, records: p.records, reports: []*runtime.Report{p.report}, ambiguous: maps.Clone(p.ambiguous), runs: maps.Clone(p.runs)})
		}
	}
	return out
}

// killAll kills every process still running: the end of a run that failed.
func (c *children) killAll() {
	c.mu.Lock()
	c.stopping = true
	all := slices.Clone(c.all)
	c.mu.Unlock()
	for _, p := range all {
		if !p.ended() {
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	}
}

// killedRuns counts, by attempt, the handler runs of killed processes that
// wrote no record of them, the ACKs they sent and had neither proven nor
// logged never proven (those are among the run's ambiguous already, and one
// ACK explains one redelivery), and the deliveries they settled as inbox
// duplicates and wrote no record of, of the processes that have ended: at
// the run's end, every one.
func (c *children) killedRuns() (runs, acks, duplicates map[workKey]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	runs, acks, duplicates = map[workKey]int{}, map[workKey]int{}, map[workKey]int{}
	for _, p := range c.all {
		if p.killed.Load() && p.ended() {
			beyond(runs, p.runs, p.ran)
			beyond(duplicates, p.duplicates, p.recordedDuplicates)
			known := maps.Clone(p.proven)
			for k, n := range p.ambiguous {
				known[k] += n
			}
			beyond(acks, p.acked, known)
		}
	}
	return runs, acks, duplicates
}

// unheardRuns counts, by attempt, the handler runs of killed processes
// that never told how they ended, whether they wrote a record or not, of
// the processes that have ended: at the run's end, every one.
func (c *children) unheardRuns() map[workKey]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	unheard := map[workKey]int{}
	for _, p := range c.all {
		if p.killed.Load() && p.ended() {
			beyond(unheard, p.runs, p.heard)
		}
	}
	return unheard
}

// ended says whether p has ended, and its tally is complete.
func (p *proc) ended() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// beyond adds to sum, for each key, how far n exceeds of.
func beyond(sum, n, of map[workKey]int) {
	for k, v := range n {
		if v > of[k] {
			sum[k] += v - of[k]
		}
	}
}

// tail keeps the last tailBytes written to it.
type tail struct {
	mu sync.Mutex
	b  []byte
}

const tailBytes = 4096

func (t *tail) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, b...)
	if len(t.b) > tailBytes {
		t.b = t.b[len(t.b)-tailBytes:]
	}
	return len(b), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.b))
}
