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
// that a test interrupts, set up as main sets lilydlq up: it prints "ready";
// set to "hold", it waits for its context's end, prints "cancelled", and
// then holds on as a publish in flight would; to "pipe", it then writes to
// its broken stdout; to "closed", it writes to its stdout until its context
// ends, and says how on stderr.
const interruptHelper = "LILYDLQ_INTERRUPT_HELPER"

func TestInterruptHelper(t *testing.T) {
	if os.Getenv(interruptHelper) == "" {
		t.Skip("run by TestSecondInterruptStopsAtOnce")
	}
	ctx, stdout := closable(context.Background(), os.Stdout)
	ctx, stop := interruptible(ctx, os.Stderr, stopSignals()...)
	defer stop()
	fmt.Println("ready")
	if os.Getenv(interruptHelper) == "closed" {
		for end := time.Now().Add(deadline); ctx.Err() == nil && time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			fmt.Fprintln(stdout, "writing")
		}
		fmt.Fprintf(os.Stderr, "cancelled: %v, canceled %t\n", context.Cause(ctx), ctx.Err() == context.Canceled)
		return
	}
	<-ctx.Done()
	if os.Getenv(interruptHelper) == "pipe" {
		// Its stdout is a pipe whose reader is gone: each write fails.
		for range 50 {
			if _, err := fmt.Println("cancelled"); err == nil {
				fmt.Fprintln(os.Stderr, "a write to the broken pipe succeeded")
			}
			time.Sleep(10 * time.Millisecond)
		}
		fmt.Fprintln(os.Stderr, "wrote past the broken pipe")
		return
	}
	fmt.Printf("cancelled: %v, canceled %t\n", context.Cause(ctx), ctx.Err() == context.Canceled)
	time.Sleep(deadline)
	fmt.Println("held on to the end")
}

// TestSecondInterruptStopsAtOnce: the first interrupt, SIGTERM or SIGHUP
// (a closed terminal, a dropped SSH session) cancels the context and says on
// stderr that the publish in flight is seen through, and how to stop at
// once; the second ends the process, by the signal, though its work still
// holds on.
func TestSecondInterruptStopsAtOnce(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		sig  syscall.Signal
		name string
	}{{syscall.SIGINT, "interrupt"}, {syscall.SIGTERM, "terminated"}, {syscall.SIGHUP, "hangup"}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			signalTwice(t, c.sig, c.name)
		})
	}
}

// signalTwice runs the interrupt helper and sends it sig twice; name is the
// signal's String.
func signalTwice(t *testing.T, sig syscall.Signal, name string) {
	h := startHelper(t, "hold")
	h.expect("ready")
	h.signal(sig)
	if l := h.expect("cancelled"); l != "cancelled: "+name+" signal received, canceled true" {
		t.Errorf("the helper printed %q", l)
	}
	h.signal(sig)
	err := h.cmd.Wait()
	ws, ok := h.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != sig {
		t.Errorf("the second %s did not end the helper (%v):\nstderr:\n%s", name, err, h.errs.String())
	}
	for _, want := range []string{"lilydlq: " + name + " signal received: stopping once the publish in flight, if any, is answered", "a second signal stops at once"} {
		if !strings.Contains(h.errs.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, h.errs.String())
		}
	}
}

// TestNohupKeepsSIGHUPIgnored: started with SIGHUP ignored, as nohup starts
// it, lilydlq does not catch it (which would undo the ignoring): a SIGHUP
// does nothing, and the interrupt sent after it is the one that stops.
func TestNohupKeepsSIGHUPIgnored(t *testing.T) {
	t.Parallel()
	h := startHelper(t, "hold", "sh", "-c", `trap "" HUP; exec "$0" "$@"`)
	h.expect("ready")
	h.signal(syscall.SIGHUP)
	h.signal(syscall.SIGINT)
	if l := h.expect("cancelled"); l != "cancelled: interrupt signal received, canceled true" {
		t.Errorf("the helper printed %q; stderr:\n%s", l, h.errs.String())
	}
}

// TestHangupSurvivesABrokenPipe: after the first signal, a write to a
// broken stdout fails instead of killing the process (SIGPIPE) while it sees
// its publish through: a hang-up ends a "lilydlq ... | tee log" too.
func TestHangupSurvivesABrokenPipe(t *testing.T) {
	t.Parallel()
	h := startHelper(t, "pipe")
	h.expect("ready")
	h.out.Close() // the reader goes, as tee does at a hang-up
	h.signal(syscall.SIGHUP)
	err := h.cmd.Wait()
	if err != nil || !strings.Contains(h.errs.String(), "wrote past the broken pipe") {
		t.Errorf("the helper ended %v, want exit 0 past its writes:\n%s", err, h.errs.String())
	}
}

// TestClosedOutputStops: without a signal, a write to a stdout whose
// reader is gone (| head) fails instead of killing the process (SIGPIPE),
// and cancels its context as a first signal does, saying why.
func TestClosedOutputStops(t *testing.T) {
	t.Parallel()
	h := startHelper(t, "closed")
	h.expect("ready")
	h.out.Close()
	err := h.cmd.Wait()
	want := "cancelled: its output was closed (write /dev/stdout: broken pipe), canceled true"
	if err != nil || !strings.Contains(h.errs.String(), want) {
		t.Errorf("the helper ended %v, want exit 0 and %q:\n%s", err, want, h.errs.String())
	}
}

// helper is a running interrupt helper.
type helper struct {
	t     *testing.T
	cmd   *exec.Cmd
	out   io.ReadCloser
	lines chan string
	errs  *strings.Builder
}

// startHelper starts the interrupt helper in mode (interruptHelper's
// value: hold, pipe or closed), through the command wrap if one is given
// (the helper's path and arguments follow it), and kills it when the test
// ends.
func startHelper(t *testing.T, mode string, wrap ...string) *helper {
	t.Helper()
	args := append(wrap, os.Args[0], "-test.run=^TestInterruptHelper$", "-test.count=1")
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), interruptHelper+"="+mode)
	h := &helper{t: t, cmd: cmd, lines: make(chan string), errs: &strings.Builder{}}
	cmd.Stderr = h.errs
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	h.out = out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	go func() {
		defer close(h.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	return h
}

// expect returns the helper's next line, which must begin with prefix.
func (h *helper) expect(prefix string) string {
	h.t.Helper()
	select {
	case l, ok := <-h.lines:
		if !ok || !strings.HasPrefix(l, prefix) {
			h.t.Fatalf("the helper printed %q (open %t), want %q; stderr:\n%s", l, ok, prefix, h.errs.String())
		}
		return l
	case <-time.After(deadline):
		h.t.Fatalf("the helper printed no %q within %s", prefix, deadline)
	}
	return ""
}

func (h *helper) signal(sig syscall.Signal) {
	h.t.Helper()
	if err := h.cmd.Process.Signal(sig); err != nil {
		h.t.Fatal(err)
	}
}
