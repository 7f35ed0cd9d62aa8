package main

import (
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
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
	bin := filepath.Join(t.TempDir(), "lilydlq")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
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
