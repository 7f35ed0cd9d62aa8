package pgoutbox_test

import (
	"sync"
	"time"

	"github.com/lily-mq/lily/internal/faults"
)

// The outbox ledger's faults, one at a time, at moments and of kinds drawn
// from the seed. Each is undone before the next.

// The kinds of fault, as the summary counts them.
const (
	faultWriterCommit = "writer COMMIT killed"
	faultRelayKilled  = "relay process killed (SIGKILL) and started again"
	faultCut          = "relay connection cut before a confirm"
	faultDelete       = "relay's delete killed in the database"
)

// strike strikes faults one after another, 0.2 to 0.8 s apart, until
// written is closed.
func (l *ledgerRun) strike(written <-chan struct{}) {
	for {
		pause := 200*time.Millisecond + time.Duration(l.rng.Int64N(int64(600*time.Millisecond)))
		select {
		case <-written:
			return
		case <-time.After(pause):
		}
		switch l.rng.IntN(4) {
		case 0:
			l.killWriterCommit()
		case 1:
			l.killRelayProcess()
		case 2:
			l.cutBeforeConfirm()
		case 3:
			l.killRelayDeletes()
		}
	}
}

// killWriterCommit has the next writer transaction's COMMIT made slow
// (faults.SlowCommitSQL, on its business row) and kills the writer backend
// found sleeping in that COMMIT.
func (l *ledgerRun) killWriterCommit() {
	l.slowCommit.Store(true)
	pid, err := faults.KillInCommit(l.ctx, l.e.pgURL, l.app+"-w", 3*time.Second)
	l.slowCommit.Store(false)
	if err != nil {
		l.t.Errorf("kill in COMMIT: %v", err)
	}
	if pid != 0 {
		l.faults[faultWriterCommit]++
	}
}

// killRelayProcess kills the relay process with SIGKILL and starts another
// after up to 300 ms. It strikes as a confirm travels to the process (or
// after 2 s without one), so that the process dies busy: with publishes
// written and unanswered, or confirmed and not yet deleted. The rows it had
// leased wait for their leases' end.
func (l *ledgerRun) killRelayProcess() {
	busy := make(chan struct{})
	var once sync.Once
	l.procProxy.Intercept(func(f faults.Frame) faults.Action {
		if f.Dir == faults.ToClient && f.Is(faults.BasicAck) {
			once.Do(func() { close(busy) })
		}
		return faults.Forward
	})
	select {
	case <-busy:
	case <-time.After(2 * time.Second):
	}
	l.proc.kill(l.t)
	l.procProxy.Intercept(nil)
	l.faults[faultRelayKilled]++
	time.Sleep(time.Duration(l.rng.Int64N(int64(300 * time.Millisecond))))
	p, err := l.startProcess()
	if err != nil {
		l.t.Errorf("the relay process not started again: %v", err)
		return
	}
	l.proc = p
}

// cutBeforeConfirm cuts the connection of the first relay whose publisher
// confirm (basic.ack) passes a proxy within 2 s, before the client sees
// it: what that relay had in flight is written and unconfirmed.
func (l *ledgerRun) cutBeforeConfirm() {
	fired := make(chan struct{})
	var once sync.Once
	cut := func(f faults.Frame) faults.Action {
		first := false
		if f.Dir == faults.ToClient && f.Is(faults.BasicAck) {
			once.Do(func() { first = true; close(fired) })
		}
		if first {
			return faults.CutBefore
		}
		return faults.Forward
	}
	l.proxy.Intercept(cut)
	l.procProxy.Intercept(cut)
	select {
	case <-fired:
		l.faults[faultCut]++
	case <-time.After(2 * time.Second):
	}
	l.proxy.Intercept(nil)
	l.procProxy.Intercept(nil)
}

// killRelayDeletes makes one relay's deletes slow (ledger_slow_deleters)
// and kills each while it runs, for longer than a lease: the rows it
// confirmed meanwhile stay, their leases end, and a relay publishes them
// again.
func (l *ledgerRun) killRelayDeletes() {
	apps := []string{l.app + "-a", l.app + "-b", l.proc.app}
	app := apps[l.rng.IntN(len(apps))]
	if _, err := l.e.pool.Exec(l.ctx, "INSERT INTO ledger_slow_deleters VALUES ($1)", app); err != nil {
		l.t.Errorf("delete fault: %v", err)
		return
	}
	killed := 0
	for end := time.Now().Add(ledgerLease + 500*time.Millisecond); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		var n int
		// The relay names its table with its schema ("s"."lily_outbox").
		err := l.e.pool.QueryRow(l.ctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE application_name = $1 AND state = 'active' AND query ILIKE 'DELETE FROM %lily_outbox%'`, app).Scan(&n)
		if err != nil {
			l.t.Errorf("delete fault: %v", err)
			break
		}
		killed += n
	}
	if _, err := l.e.pool.Exec(l.ctx, "DELETE FROM ledger_slow_deleters"); err != nil {
		l.t.Errorf("delete fault: %v", err)
	}
	if killed > 0 {
		l.faults[faultDelete]++
		l.deleteKills += killed
	}
}
