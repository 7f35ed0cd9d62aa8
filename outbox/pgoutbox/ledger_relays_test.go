package pgoutbox_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lily-mq/lily/internal/pgschema"
	"github.com/lily-mq/lily/outbox/pgoutbox"
	"github.com/lily-mq/lily/runtime"
)

// The outbox ledger's relays: two in the test's process, and one in a
// process of its own (this test binary again), which the relay fault kills
// with SIGKILL. Each logs to a file of its own, as JSON, at debug level:
// every publish answer with its message id, which the accounting reads.

// relayProcessEnv carries a relay process's relayProcessConfig.
const relayProcessEnv = "LILY_OUTBOX_LEDGER_RELAY"

type relayProcessConfig struct {
	DSN, Schema, App, AMQP string
}

// TestOutboxLedgerRelayProcess is the relay process of TestOutboxLedger: it
// runs a relay, logging to stderr, until its stdin ends (the test closed
// it, or died) or it is killed.
func TestOutboxLedgerRelayProcess(t *testing.T) {
	raw := os.Getenv(relayProcessEnv)
	if raw == "" {
		t.Skip("the relay process of TestOutboxLedger, which starts it")
	}
	var cfg relayProcessConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	pool, err := pgschema.Pool(ctx, cfg.DSN, cfg.Schema, cfg.App, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	relay, publisher, err := newLedgerRelay(pool, cfg.AMQP, ledgerLogger(os.Stderr))
	if err != nil {
		t.Fatal(err)
	}
	defer publisher.Close()
	if _, err := relay.Run(ctx); err != nil {
		t.Fatal(err)
	}
}

// ledgerLogger logs everything, as JSON lines.
func ledgerLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// newLedgerRelay is a relay on pool with a publisher of its own that reaches
// the broker at url (the proxy), both logging to logger.
func newLedgerRelay(pool *pgxpool.Pool, url string, logger *slog.Logger) (*pgoutbox.Relay, *runtime.Publisher, error) {
	p, err := runtime.NewPublisher(runtime.Config{URLs: []string{url}, StepTimeout: ledgerStep, ReconnectMax: ledgerMaxBackoff, Logger: logger}, 0)
	if err != nil {
		return nil, nil, err
	}
	opts := pgoutbox.Options{Poll: ledgerPoll, Lease: ledgerLease, Batch: ledgerBatch, MaxBackoff: ledgerMaxBackoff, Logger: logger}
	return pgoutbox.NewRelay(pool, p, opts), p, nil
}

// ledgerRelay is one relay of the run: in this process (stop) or in a
// process of its own (cmd).
type ledgerRelay struct {
	name, app string
	log       string // its log file
	// killed is when the fault killed its process; zero if it did not.
	killed time.Time

	stop   func() *runtime.Report
	report *runtime.Report

	cmd    *exec.Cmd
	stdin  io.Closer
	out    bytes.Buffer // the process's stdout: the test framework's verdict
	exited chan struct{}
}

// startInProcess starts a relay in this process; the test's cleanup stops
// it if the test does not.
func (l *ledgerRun) startInProcess(name string) *ledgerRelay {
	r := &ledgerRelay{name: name, app: l.app + "-" + name, log: filepath.Join(l.dir, name+".log")}
	f, err := os.Create(r.log)
	if err != nil {
		l.t.Fatal(err)
	}
	pool, err := pgschema.Pool(l.ctx, l.e.pgURL, l.schema, r.app, 4)
	if err != nil {
		l.t.Fatal(err)
	}
	relay, publisher, err := newLedgerRelay(pool, l.amqpURL, ledgerLogger(f))
	if err != nil {
		l.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan *runtime.Report, 1)
	go func() {
		rep, err := relay.Run(ctx)
		if err != nil {
			l.t.Errorf("relay %s: %v", name, err)
		}
		done <- rep
	}()
	r.stop = sync.OnceValue(func() *runtime.Report {
		cancel()
		rep := <-done
		publisher.Close()
		pool.Close()
		_ = f.Close()
		return rep
	})
	l.t.Cleanup(func() { r.stop() })
	l.relays = append(l.relays, r)
	return r
}

// startProcess starts a relay process; the test's cleanup kills it if the
// test did not stop it. It returns an error rather than failing the test,
// as the fault loop's goroutine calls it too.
func (l *ledgerRun) startProcess() (*ledgerRelay, error) {
	l.procs++
	name := fmt.Sprintf("p%d", l.procs)
	r := &ledgerRelay{name: name, app: l.app + "-" + name, log: filepath.Join(l.dir, name+".log"), exited: make(chan struct{})}
	cfg, err := json.Marshal(relayProcessConfig{DSN: l.e.pgURL, Schema: l.schema, App: r.app, AMQP: l.procURL})
	if err != nil {
		return nil, err
	}
	binary, err := os.Executable() // this test binary
	if err != nil {
		return nil, err
	}
	f, err := os.Create(r.log)
	if err != nil {
		return nil, err
	}
	defer f.Close() // the process has its own descriptor
	r.cmd = exec.Command(binary, "-test.run=^TestOutboxLedgerRelayProcess$", "-test.count=1")
	r.cmd.Env = append(os.Environ(), relayProcessEnv+"="+string(cfg))
	r.cmd.Stderr, r.cmd.Stdout = f, &r.out
	if r.stdin, err = r.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if err := r.cmd.Start(); err != nil {
		return nil, fmt.Errorf("relay process %s: %w", name, err)
	}
	go func() {
		_ = r.cmd.Wait()
		close(r.exited)
	}()
	l.t.Cleanup(func() {
		_ = r.cmd.Process.Kill()
		<-r.exited
	})
	l.relays = append(l.relays, r)
	return r, nil
}

// kill kills r's process with SIGKILL and waits for its end. A process
// that had already ended on its own did not run the relay it was to run:
// that fails the test.
func (r *ledgerRelay) kill(t *testing.T) {
	select {
	case <-r.exited:
		t.Errorf("relay process %s ended before it was killed: %s; its output:\n%s", r.name, r.cmd.ProcessState, r.out.String())
		return
	default:
	}
	r.killed = time.Now()
	_ = r.cmd.Process.Kill() // SIGKILL: no deferred call, no last record
	<-r.exited
}

// stopProcess stops r's process as a supervisor would: its stdin ends, its
// relay stops, and the process must end well.
func (l *ledgerRun) stopProcess(r *ledgerRelay) {
	_ = r.stdin.Close()
	select {
	case <-r.exited:
	case <-time.After(30 * time.Second):
		l.t.Errorf("relay process %s did not stop within 30 s", r.name)
		r.kill(l.t)
		return
	}
	if !r.cmd.ProcessState.Success() {
		l.t.Errorf("relay process %s: %s; its output:\n%s", r.name, r.cmd.ProcessState, r.out.String())
	}
}

// logLine is what the accounting reads of a relay's log line.
type logLine struct {
	Time      time.Time `json:"time"`
	Msg       string    `json:"msg"`
	Stage     string    `json:"stage"`
	Step      string    `json:"step"`
	Owner     string    `json:"owner"`
	MessageID string    `json:"message_id"`
	Path      string    `json:"path"`
}

// readTrail reads r's log: its owner, its publish answers, its failed
// records and its lost leases. A process killed while it wrote leaves its last line cut short.
func readTrail(r *ledgerRelay) (relayTrail, error) {
	tr := relayTrail{name: r.name, killed: r.killed}
	data, err := os.ReadFile(r.log)
	if err != nil {
		return tr, err
	}
	lines := bytes.Split(data, []byte("\n"))
	for i, line := range lines {
		if len(line) == 0 {
			continue
		}
		var ll logLine
		if err := json.Unmarshal(line, &ll); err != nil {
			if i == len(lines)-1 && !r.killed.IsZero() {
				break
			}
			// Not a record: a race report or a panic, shown as it is.
			return tr, fmt.Errorf("%s:%d: not a log record (%w): %s", r.log, i+1, err, clipLine(line))
		}
		if ll.Msg != "lily outbox" {
			continue
		}
		switch {
		case ll.Stage == "relay-started":
			tr.owner = ll.Owner
		case ll.Stage == "publish":
			tr.answers = append(tr.answers, answer{id: ll.MessageID, path: ll.Path, at: ll.Time})
		case ll.Stage == "database" && ll.Step == "record":
			tr.recordFailures = append(tr.recordFailures, ll.Time)
		case ll.Stage == "lease-lost":
			tr.leaseLost = append(tr.leaseLost, ll.MessageID)
		}
	}
	return tr, nil
}

// clipLine is a line of a relay's log as an error shows it.
func clipLine(line []byte) string {
	const most = 500
	if len(line) > most {
		return string(line[:most]) + "…"
	}
	return string(line)
}
