package inboxtest_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lily-mq/lily/inbox/inboxtest"
	_ "github.com/lily-mq/lily/internal/update"
	"github.com/lily-mq/lily/runtime"
)

// tiedEnv, set to 1, makes TestSuite's adapter tie its transactions to
// Begin's context; swallowEnv, set to 1, makes it report the commit of an
// aborted transaction done; blockEnv, set to 1, makes a competing claim wait
// until its context ends; blindEnv, set to 1, makes a claim that waited on
// another take the key without looking whether the other committed.
const (
	tiedEnv    = "LILY_INBOXTEST_TIED"
	swallowEnv = "LILY_INBOXTEST_SWALLOW"
	blockEnv   = "LILY_INBOXTEST_BLOCK"
	blindEnv   = "LILY_INBOXTEST_BLIND"
)

// The suite passes a sound adapter: what it fails, below, is each flaw
// alone.
func TestSuite(t *testing.T) {
	m := &memory{
		tied: os.Getenv(tiedEnv) == "1", swallow: os.Getenv(swallowEnv) == "1",
		block: os.Getenv(blockEnv) == "1", blind: os.Getenv(blindEnv) == "1",
	}
	inboxtest.Run(t, inboxtest.Harness{Inbox: m, Write: m.write, Rows: m.rows, Claims: m.claims, Abort: m.abort})
}

// An adapter whose transaction dies with Begin's context, as one that begins
// a database/sql transaction on it does, passes no case that commits: under
// the runtime, which ends that context as Begin returns, none of its
// commits would succeed. A failing suite fails its test, so it runs in a
// test process of its own.
func TestSuiteFailsATransactionTiedToBeginsContext(t *testing.T) {
	t.Parallel() // each runs the suite in a process of its own
	cmd := exec.Command(os.Args[0], "-test.run=^TestSuite$", "-test.count=1")
	cmd.Env = append(os.Environ(), tiedEnv+"=1")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("the suite on a transaction tied to Begin's context: %v, want it failed; its output:\n%s", err, out)
	}
	if !strings.Contains(string(out), sql.ErrTxDone.Error()) {
		t.Errorf("the suite failed, but not on the dead transaction; its output:\n%s", out)
	}
}

// An adapter that reports the commit of a transaction the database aborted
// as done fails the suite: the runtime would ACK work that never happened.
func TestSuiteFailsAnAdapterSwallowingAnAbort(t *testing.T) {
	t.Parallel() // each runs the suite in a process of its own
	suiteFails(t, swallowEnv, "an adapter swallowing an abort", "Commit of a transaction the database aborted = nil")
}

// An adapter that looks for a committed claim and then inserts its own,
// waiting on the open one in between, fails the suite: when the open one
// commits during the wait, it claims a message whose work just committed,
// and the handler runs twice.
func TestSuiteFailsACheckThenInsert(t *testing.T) {
	t.Parallel() // each runs the suite in a process of its own
	suiteFails(t, blindEnv, "a check then insert", "was granted, want a duplicate or a deferral")
}

// suiteFails runs TestSuite in a process of its own, on the adapter that
// env, set, makes of memory (what names it), and checks that it fails, on
// a line containing want.
func suiteFails(t *testing.T, env, what, want string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestSuite$", "-test.count=1")
	cmd.Env = append(os.Environ(), env+"=1")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("the suite on %s: %v, want it failed; its output:\n%s", what, err, out)
	}
	if !strings.Contains(string(out), want) {
		t.Errorf("the suite on %s failed, but without %q; its output:\n%s", what, want, out)
	}
}

// An adapter whose competing claim waits until its context ends, and defers
// only then, fails the suite: under the runtime that context is the step's,
// and the deferral would read as a database that did not answer. The suite's
// context lasts 30 seconds, which this test waits out: not in the quick
// tier.
func TestSuiteFailsAClaimWaitingOutItsContext(t *testing.T) {
	t.Parallel() // each runs the suite in a process of its own
	if testing.Short() {
		t.Skip("waits out the suite's 30 s context")
	}
	suiteFails(t, blockEnv, "a claim waiting out its context", "deferred only as its context ended")
}

// memory is an in-memory adapter: a claim holds its key until it commits or
// rolls back, and a competing claim waits for that up to lockWait, as on a
// row lock, then looks again or defers.
type memory struct {
	tied    bool // a transaction dies when Begin's context ends
	swallow bool // the commit of an aborted transaction answers nil
	block   bool // a competing claim waits until its context ends
	blind   bool // a claim that waited does not look again

	mu        sync.Mutex
	open      map[claimKey]bool
	committed map[claimKey]bool
	written   map[string]int // committed business rows by key
}

// lockWait bounds a competing claim's wait, past the time the suite's
// holder keeps its claim open while another waits on it (200 ms), and short:
// the concurrent case waits it out, in the quick tier too.
const lockWait = 500 * time.Millisecond

type claimKey struct{ consumer, id string }

type memoryTx struct {
	m       *memory
	key     claimKey
	begun   context.Context // Begin's
	writes  []string
	aborted bool
}

type txKey struct{}

func (m *memory) Begin(ctx context.Context, consumer, id string) (runtime.InboxTx, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := claimKey{consumer, id}
	switch {
	case m.committed[k]:
		return nil, runtime.ErrDuplicate
	case m.open[k] && m.block:
		m.mu.Unlock()
		<-ctx.Done()
		m.mu.Lock()
		return nil, ctx.Err()
	}
	for deadline := time.Now().Add(lockWait); m.open[k]; {
		if time.Now().After(deadline) {
			return nil, errors.New("another claim holds the key")
		}
		m.mu.Unlock()
		select {
		case <-ctx.Done():
			m.mu.Lock()
			return nil, ctx.Err()
		case <-time.After(time.Millisecond):
		}
		m.mu.Lock()
	}
	if m.committed[k] && !m.blind {
		return nil, runtime.ErrDuplicate
	}
	if m.open == nil {
		m.open, m.committed, m.written = map[claimKey]bool{}, map[claimKey]bool{}, map[string]int{}
	}
	m.open[k] = true
	return &memoryTx{m: m, key: k, begun: ctx}, nil
}

// dead reports whether the transaction died with Begin's context, as
// database/sql's does: it then answers every call with sql.ErrTxDone.
func (tx *memoryTx) dead() bool { return tx.m.tied && tx.begun.Err() != nil }

func (tx *memoryTx) Bind(ctx context.Context) context.Context {
	return context.WithValue(ctx, txKey{}, tx)
}

func (tx *memoryTx) Commit(context.Context) error {
	tx.m.mu.Lock()
	defer tx.m.mu.Unlock()
	delete(tx.m.open, tx.key)
	switch {
	case tx.dead():
		return sql.ErrTxDone
	case tx.aborted && tx.m.swallow:
		return nil
	case tx.aborted:
		return errors.New("the transaction was aborted")
	}
	tx.m.committed[tx.key] = true
	for _, w := range tx.writes {
		tx.m.written[w]++
	}
	return nil
}

func (tx *memoryTx) Rollback(context.Context) {
	tx.m.mu.Lock()
	defer tx.m.mu.Unlock()
	delete(tx.m.open, tx.key)
}

func (m *memory) write(ctx context.Context, key string) error {
	tx, ok := ctx.Value(txKey{}).(*memoryTx)
	switch {
	case !ok:
		return errors.New("no transaction in the handler's context")
	case tx.dead():
		return sql.ErrTxDone
	}
	tx.writes = append(tx.writes, key)
	return nil
}

// abort aborts the transaction in ctx, as a failed statement does.
func (m *memory) abort(ctx context.Context) error {
	tx, ok := ctx.Value(txKey{}).(*memoryTx)
	if !ok {
		return errors.New("no transaction in the handler's context")
	}
	tx.aborted = true
	return nil
}

func (m *memory) rows(_ context.Context, key string) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.written[key], nil
}

func (m *memory) claims(_ context.Context, consumer, id string) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.committed[claimKey{consumer, id}] {
		return 1, nil
	}
	return 0, nil
}
