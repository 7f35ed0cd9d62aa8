package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestRedriveKilledLosesNothing: a re-drive killed with SIGKILL half way
// leaves every copy in the DLQ or in its source queue, possibly both, never
// neither. The command is built and run as its own process, and killed when
// the source holds some of the copies but not all.
func TestRedriveKilledLosesNothing(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	bin := build(t)
	dlq, src := b.queue("dlq", nil), b.queue("src", nil)
	const copies = 2000
	all := make(map[string]bool, copies)
	msgs := make([]amqp.Publishing, copies)
	for i := range msgs {
		id := fmt.Sprintf("k-%04d", i)
		all[id] = true
		msgs[i] = lilyCopy(id, "t", "permanent failure", "permanent", src, 1, time.Now())
	}
	b.publish(dlq, msgs...)

	var out bytes.Buffer
	cmd := exec.Command(bin, "redrive", dlq, "-all", "-rate", "400", "-url", b.url)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the source to hold 500 copies", func() bool { return b.ready(src) >= 500 })
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the re-drive ended before the kill (%v):\n%s", err, out.String())
	}
	// The broker returns what the killed connection held.
	waitFor(t, "the DLQ to hold no unacknowledged copy", func() bool { _, u := queueCounts(t, dlq); return u == 0 })

	inDLQ, inSrc := ids(b.take(dlq)), ids(b.take(src))
	seen := map[string]int{}
	for _, list := range [][]string{inDLQ, inSrc} {
		once := map[string]bool{}
		for _, id := range list {
			if once[id] {
				t.Errorf("%s twice in one queue", id)
			}
			once[id] = true
			seen[id]++
		}
	}
	var missing, both int
	for id := range all {
		switch seen[id] {
		case 0:
			missing++
		case 2:
			both++
		}
	}
	t.Logf("after SIGKILL: %d in the source, %d in the DLQ, %d in both, %d in neither", len(inSrc), len(inDLQ), both, missing)
	if missing > 0 || len(seen) != copies {
		t.Errorf("%d of %d copies in neither queue (%d ids seen)", missing, copies, len(seen))
	}
	if len(inSrc) == 0 || len(inSrc) == copies {
		t.Errorf("killed with %d of %d moved: want some, not all", len(inSrc), copies)
	}
}

// TestRedriveOutputClosedEndsInOnePlace: a re-drive whose stdout's reader
// goes (| head) stops as a first interrupt stops it: the copy whose line
// failed is ACKed, no other is published, it says why on stderr, with the
// summary its stdout could not take, and exits 1, not killed by SIGPIPE
// between a publish and its ACK.
func TestRedriveOutputClosedEndsInOnePlace(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	bin := build(t)
	dlq, src := b.queue("dlq", nil), b.queue("src", nil)
	const copies = 300
	msgs := make([]amqp.Publishing, copies)
	for i := range msgs {
		msgs[i] = lilyCopy(fmt.Sprintf("p-%03d", i), "t", "permanent failure", "permanent", src, 1, time.Now())
	}
	b.publish(dlq, msgs...)

	var errs strings.Builder
	cmd := exec.Command(bin, "redrive", dlq, "-all", "-rate", "100", "-url", b.url)
	cmd.Stderr = &errs
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sc := bufio.NewScanner(out)
	for i := range 5 {
		if !sc.Scan() {
			t.Fatalf("the re-drive printed %d lines (%v):\n%s", i, sc.Err(), errs.String())
		}
	}
	out.Close() // the reader goes, as head does after its lines
	err = cmd.Wait()
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || ws.Signaled() || ws.ExitStatus() != exitFailure {
		t.Errorf("the re-drive ended %v, want exit 1:\n%s", err, errs.String())
	}
	if !strings.Contains(errs.String(), "lilydlq redrive: its output was closed") {
		t.Errorf("stderr does not say why it stopped:\n%s", errs.String())
	}
	waitFor(t, "the DLQ to hold no unacknowledged copy", func() bool { _, u := queueCounts(t, dlq); return u == 0 })

	inDLQ, inSrc := ids(b.take(dlq)), ids(b.take(src))
	seen := map[string]int{}
	for _, id := range slices.Concat(inDLQ, inSrc) {
		seen[id]++
	}
	for id, n := range seen {
		if n > 1 {
			t.Errorf("%s is in the DLQ and in its source (or twice in one)", id)
		}
	}
	if len(seen) != copies || len(inDLQ)+len(inSrc) != copies {
		t.Errorf("%d copies in the DLQ, %d in the source, %d ids: want each of %d in one place", len(inDLQ), len(inSrc), len(seen), copies)
	}
	if len(inSrc) < 5 || len(inSrc) == copies {
		t.Errorf("stopped with %d of %d moved: want the 5 read and a few more, not all", len(inSrc), copies)
	}
	// The summary its stdout could not take is the only count of the
	// copies moved after the lines read.
	if want := fmt.Sprintf("lilydlq redrive: %s: moved %d of ", dlq, len(inSrc)); !strings.Contains(errs.String(), want) {
		t.Errorf("stderr lacks the summary %q:\n%s", want, errs.String())
	}
}

// build builds the command, to be run as its own process, and returns its
// path.
func build(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "lilydlq")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}
