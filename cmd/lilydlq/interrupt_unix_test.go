//go:build unix

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// interruptHelper, set in its environment, makes the test binary a process
// that a test interrupts: it prints "ready", waits for its context's end,
// prints "cancelled", and then holds on as a publish in flight would.
const interruptHelper = "LILYDLQ_INTERRUPT_HELPER"

func TestInterruptHelper(t *testing.T) {
	if os.Getenv(interruptHelper) == "" {
		t.Skip("run by TestSecondInterruptStopsAtOnce")
	}
	ctx, stop := interruptible(context.Background(), os.Stderr, os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Println("ready")
	<-ctx.Done()
	fmt.Printf("cancelled: %v, canceled %t\n", context.Cause(ctx), ctx.Err() == context.Canceled)
	time.Sleep(deadline)
	fmt.Println("held on to the end")
}

// TestSecondInterruptStopsAtOnce: the first interrupt cancels the context
// and says on stderr that the publish in flight is seen through, and how to
// stop at once; the second ends the process, by the signal, though its work
// still holds on.
func TestSecondInterruptStopsAtOnce(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^TestInterruptHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), interruptHelper+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errs strings.Builder
	cmd.Stderr = &errs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }()
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	expect := func(prefix string) string {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok || !strings.HasPrefix(l, prefix) {
				t.Fatalf("the helper printed %q (open %t), want %q; stderr:\n%s", l, ok, prefix, errs.String())
			}
			return l
		case <-time.After(deadline):
			t.Fatalf("the helper printed no %q within %s", prefix, deadline)
		}
		return ""
	}
	expect("ready")
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if l := expect("cancelled"); l != "cancelled: interrupt signal received, canceled true" {
		t.Errorf("the helper printed %q", l)
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGINT {
		t.Errorf("the second interrupt did not end the helper (%v):\nstderr:\n%s", err, errs.String())
	}
	for _, want := range []string{"lilydlq: interrupt signal received: stopping once the publish in flight, if any, is answered", "a second signal stops at once"} {
		if !strings.Contains(errs.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errs.String())
		}
	}
}
