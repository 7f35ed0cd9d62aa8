// Command lilydlq inspects a Lily dead-letter queue and moves its copies back
// to the queues they failed in.
//
//	lilydlq list    <dlq>                  copies grouped by failure reason, with counts
//	lilydlq show    -id <message id> <dlq> one copy: properties, headers, body
//	lilydlq export  [-o file] <dlq>        every copy as a line of JSON
//	lilydlq redrive <selection> <dlq>      move chosen copies back to their queues
//	lilydlq purge   -confirm <dlq> (-expect N | -all | -id <message id>) <dlq>
//	                                       delete every ready copy (only if
//	                                       there are N), or the chosen ones
//	lilydlq import  -to <queue> <file>     publish an export's copies, as they were
//
// Reading takes nothing from the DLQ: list, show and export hold each copy
// unacknowledged and hand all back when they close their channel. A re-drive
// publishes each chosen copy to its source queue (the runtime's
// x-lily-failure-queue, or for a copy the broker dead-lettered itself the
// queue of its latest x-death entry), mandatory and confirmed, and only then
// ACKs the copy: killed at any moment, it leaves each copy in the DLQ or in
// its queue, possibly both, never neither. An import publishes the copies of
// an export so, one at a time, each confirmed before the next.
//
// The first interrupt (or SIGTERM, or SIGHUP: a closed terminal or a dropped
// SSH session) stops a command before its next copy, once a publish in
// flight is answered; a second stops it at once. A failed write to stdout
// stops it as a first interrupt does, and fails it, exit 1, however late it
// came: it says why on stderr, and writes there the summary (what moved,
// what was deleted) stdout could not take. A reader that closed stdout
// (| head) ends list, show and redrive -dry-run, which change nothing,
// quietly, exit 0. SIGPIPE is ignored: it would kill lilydlq between a
// publish and its ACK.
//
// The broker is -url, else $LILY_AMQP_URL, else amqp://guest:guest@127.0.0.1:5672/.
// Exit codes: 0 done, 1 failure (of the broker, a copy that could not be
// moved, a failed stdout), 2 usage. Run lilydlq -h for the flags;
// docs/dlq.md has examples and what was verified on which RabbitMQ.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// stopSignals are the signals that stop a command gracefully. SIGHUP is
// among them: a dropped SSH session or a closed terminal is the likeliest end
// of a long re-drive, and by default it kills the process at once, leaving
// the copy in flight possibly in its queue and in the DLQ. A signal ignored
// when lilydlq starts (nohup ignores SIGHUP) is left so: catching it would
// undo what the caller asked for.
func stopSignals() []os.Signal {
	var sigs []os.Signal
	for _, s := range []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP} {
		if !signal.Ignored(s) {
			sigs = append(sigs, s)
		}
	}
	return sigs
}

func main() {
	ctx, stdout := closable(context.Background(), os.Stdout)
	ctx, stop := interruptible(ctx, os.Stderr, stopSignals()...)
	code := run(ctx, os.Args[1:], stdout, os.Stderr)
	stop()
	os.Exit(code)
}
