package pgoutbox_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/internal/pgschema"
	"github.com/lily-mq/lily/outbox/pgoutbox"
	"github.com/lily-mq/lily/runtime"
)

// The outbox ledger's writers: each transaction writes a business row and
// its messages, and a writer whose COMMIT was killed finds out whether it
// committed before it writes again, so that no copy starts on the writers'
// side.

const (
	ledgerWriters = 4
	ledgerKeys    = 5
	// ledgerTries bounds a transaction's attempts: only a fault fails one.
	ledgerTries = 20
)

// txPlan is one writer transaction.
type txPlan struct {
	name string // the business row's key
	ids  []string
	keys []string // each message's order key; "" for none
	// rollback: the writer rolls the transaction back, so its messages
	// must never arrive.
	rollback bool
}

// plan draws the transactions from the seed: n messages in transactions of
// 1 to 5, one message in five with an order key; one transaction in 50
// more, of other ids, rolled back.
func (l *ledgerRun) plan() {
	rng := rand.New(rand.NewPCG(l.seed, 2))
	for written, i := 0, 0; written < l.n; i++ {
		p := txPlan{name: "tx" + strconv.Itoa(i), rollback: rng.IntN(50) == 0}
		size := 1 + rng.IntN(5)
		if !p.rollback {
			size = min(size, l.n-written)
		}
		for j := range size {
			key := ""
			if rng.IntN(5) == 0 {
				key = "k" + strconv.Itoa(rng.IntN(ledgerKeys))
			}
			id := fmt.Sprintf("m%06d", written+j)
			if p.rollback {
				id = fmt.Sprintf("rolled-back-%d-%d", i, j)
			} else if key != "" {
				l.keyed++
			}
			p.ids, p.keys = append(p.ids, id), append(p.keys, key)
		}
		if !p.rollback {
			written += size
		}
		l.plans = append(l.plans, p)
	}
}

// writeTally counts what the writers did: transactions committed and rolled
// back, COMMITs killed by what they turned out to be, and statements that
// failed before the COMMIT.
type writeTally struct {
	committed, rolledBack          int
	killedAborted, killedCommitted int
	failedBefore                   int
}

// write runs the plans from ledgerWriters writers, paced so that the writing
// takes about n/250 seconds, and returns what they did.
func (l *ledgerRun) write() writeTally {
	pool, err := pgschema.Pool(l.ctx, l.e.pgURL, l.schema, l.app+"-w", 2*ledgerWriters)
	if err != nil {
		l.t.Fatal(err)
	}
	defer pool.Close()
	pace := time.Duration(l.n) * 4 * time.Millisecond * ledgerWriters / time.Duration(len(l.plans))
	var (
		mu    sync.Mutex
		tally writeTally
		wg    sync.WaitGroup
	)
	for w := range ledgerWriters {
		wg.Go(func() {
			for i := w; i < len(l.plans); i += ledgerWriters {
				one := l.writeTx(pool, l.plans[i])
				mu.Lock()
				tally.committed += one.committed
				tally.rolledBack += one.rolledBack
				tally.killedAborted += one.killedAborted
				tally.killedCommitted += one.killedCommitted
				tally.failedBefore += one.failedBefore
				mu.Unlock()
				time.Sleep(pace)
			}
		})
	}
	wg.Wait()
	return tally
}

// writeTx writes one planned transaction until it committed (or, planned
// so, rolled back). A COMMIT that failed may have committed: pg_xact_status
// says, and only a transaction that did not commit is written again.
func (l *ledgerRun) writeTx(pool *pgxpool.Pool, p txPlan) writeTally {
	var tally writeTally
	var last error
	for range ledgerTries {
		// The commit fault asks for a slow COMMIT, to find it and kill it.
		slow := l.slowCommit.CompareAndSwap(true, false)
		xid, atCommit, err := l.tryTx(pool, p, slow)
		switch {
		case err == nil && p.rollback:
			tally.rolledBack++
			return tally
		case err == nil:
			tally.committed++
			return tally
		case !atCommit:
			// Nothing was committed: the statement's connection was killed
			// (the commit fault may kill a backend just after its COMMIT).
			tally.failedBefore++
			last = err
			continue
		}
		committed, serr := l.commitStatus(pool, xid)
		if serr != nil {
			l.t.Errorf("transaction %s: COMMIT failed (%v) and its outcome is unknown: %v", p.name, err, serr)
			return tally
		}
		if committed {
			tally.killedCommitted++
			tally.committed++
			return tally
		}
		tally.killedAborted++
		last = err
	}
	l.t.Errorf("transaction %s: not written in %d tries; last: %v", p.name, ledgerTries, last)
	return tally
}

// tryTx writes p's transaction once: its order keys' counters, its business
// row and its messages. It returns the transaction's id, and whether an
// error came from the COMMIT, whose outcome it does not tell.
func (l *ledgerRun) tryTx(pool *pgxpool.Pool, p txPlan, slow bool) (xid string, atCommit bool, err error) {
	ctx := l.ctx
	tx, err := pool.Begin(ctx)
	if err != nil {
		return "", false, err
	}
	defer func() { _ = tx.Rollback(ctx) }() // after a COMMIT, nothing to do
	if err := tx.QueryRow(ctx, "SELECT pg_current_xact_id()::text").Scan(&xid); err != nil {
		return "", false, err
	}
	// A key's row lock orders its writers: the next transaction of a key
	// writes only after the last one ended, so a key's messages are numbered
	// and get their outbox ids in commit order. Keys are locked in order, so
	// that two writers never wait for each other.
	seqs := make([]int, len(p.ids))
	keys := slices.Compact(slices.Sorted(slices.Values(p.keys)))
	for _, k := range keys {
		if k == "" {
			continue
		}
		var before int
		if err := tx.QueryRow(ctx, "UPDATE ledger_keys SET written = written + $2 WHERE key = $1 RETURNING written - $2",
			k, count(p.keys, k)).Scan(&before); err != nil {
			return "", false, err
		}
		for i := range p.ids {
			if p.keys[i] == k {
				before++
				seqs[i] = before
			}
		}
	}
	msgs := make([]runtime.Message, len(p.ids))
	for i, id := range p.ids {
		m := runtime.Message{RoutingKey: l.queue, OrderKey: p.keys[i], Publishing: runtime.Publishing{
			MessageId: id, Type: "LedgerEvent", ContentType: "application/json", Body: []byte(`{"id":"` + id + `"}`),
			Headers: amqp.Table{"x-ledger-seq": int64(seqs[i])},
		}}
		if p.keys[i] != "" {
			m.Headers["x-ledger-key"] = p.keys[i]
		}
		msgs[i] = m
	}
	if _, err := tx.Exec(ctx, "INSERT INTO ledger_business (tx, ids, keys, seqs, slow) VALUES ($1, $2, $3, $4, $5)",
		p.name, p.ids, p.keys, seqs, slow); err != nil {
		return "", false, err
	}
	if err := pgoutbox.Write(ctx, tx, msgs...); err != nil {
		return "", false, err
	}
	if p.rollback {
		return xid, false, tx.Rollback(ctx)
	}
	return xid, true, tx.Commit(ctx)
}

func count(keys []string, k string) int {
	n := 0
	for _, key := range keys {
		if key == k {
			n++
		}
	}
	return n
}

// commitStatus asks pg_xact_status, on another connection, whether the
// transaction xid committed. It asks again while the answer is "in
// progress": the killed backend may still be ending.
func (l *ledgerRun) commitStatus(pool *pgxpool.Pool, xid string) (bool, error) {
	for {
		var status *string // NULL: too old to know
		err := pool.QueryRow(l.ctx, "SELECT pg_xact_status($1::text::xid8)", xid).Scan(&status)
		switch {
		case err == nil && status != nil && *status == "committed":
			return true, nil
		case err == nil && status != nil && *status == "aborted":
			return false, nil
		case l.ctx.Err() != nil:
			return false, fmt.Errorf("unresolved by the run's deadline (status %v, error %v)", status, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
