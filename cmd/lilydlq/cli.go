package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/lily-mq/lily/internal/cliflag"
	"github.com/lily-mq/lily/internal/sanitize"
)

// Exit codes, the same for every command.
const (
	exitOK      = 0
	exitFailure = 1 // the broker failed, a chosen copy could not be moved, or a command could not do all it was asked
	exitUsage   = 2 // bad arguments
)

const defaultURL = "amqp://guest:guest@127.0.0.1:5672/"

// defaultWindow is -window's default. The window bounds copies, not bytes:
// the client may buffer a window of the largest bodies the DLQ holds, so it
// is kept small. A quorum DLQ keeps its order through 32 windows: 2,048
// copies at this window; readNote says when a read used more.
const defaultWindow = 64

// quorumWindows is how many windows a quorum queue puts back in order.
const quorumWindows = 32

// command is one lilydlq subcommand.
type command struct {
	name, args, summary string
	// file: the command's operand is a file, not the DLQ.
	file bool
	// help is the rest of the -h text, after the usage line and the flags.
	help string
	// flags adds the command's own flags and returns its body.
	flags func(fs *flag.FlagSet) func(e *env) int
}

// env is what a command's body works with.
type env struct {
	ctx            context.Context
	url, queue     string
	file           string // the operand of a command that takes a file
	read           readOptions
	stdout, stderr io.Writer
	// quiet: the command changes nothing (list, show, redrive -dry-run), so
	// a reader that closed its stdout (| head) read what it wanted: it ends
	// quietly, exit 0.
	quiet bool
	// told: the command said on stderr that its stdout failed.
	told bool
}

// commands are the subcommands, in the order lilydlq -h lists them.
var commands = []*command{listCmd, showCmd, exportCmd, redriveCmd, purgeCmd, importCmd}

const usage = `lilydlq inspects a Lily dead-letter queue and moves its copies back to the
queues they failed in.

Usage:
  lilydlq <command> [flags] <dlq>
  lilydlq import -to <queue> [flags] <file>

Commands:
%s
Run lilydlq <command> -h (or lilydlq help <command>) for a command's flags.
Flags may come before or after the queue (or import's file).

Reading (list, show, export, and redrive and purge -id for the copies they
leave) takes nothing from the DLQ: each copy is held unacknowledged and handed back when
the read ends. It reads in windows of -window copies: memory is about
window × the largest body. On a quorum DLQ each read adds one to every
copy's x-delivery-count, and a read of more than 32 windows puts the copies
back out of order: raise -window for a quorum DLQ of more than 32 × window
copies (docs/dlq.md says when that matters). A quorum DLQ with a delivery
limit drops or dead-letters a copy a read returns past it, unannounced, and
AMQP does not show the limit: every read of copies that carry
x-delivery-count warns; give the limit as -delivery-limit N (rabbitmqctl
list_queues name type arguments policy shows it) and a read stops, exit 1,
at a copy it would return at N. redrive -all -to <a queue without a limit>
moves the copies out, returning none it moves.

A copy whose headers the AMQP client cannot decode (nested too deep, too
wide), or would decode only in part (a table that names an entry twice: it
keeps one value), is read through a filter that puts a marker in their
place: list, show and export show it as quarantined; redrive leaves it in
the DLQ; purge -id deletes it alone.

The broker is -url, else $LILY_AMQP_URL, else ` + defaultURL + `.

Exit codes (every command):
  0  done
  1  failure: the broker refused or failed, the queue does not exist, a
     chosen copy could not be moved (it stays in the DLQ), an -id no copy
     carries, a redrive selection (other than -all) that chose no copy, an export or a redrive that read fewer copies than were
     ready when it began or read beside another consumer of the DLQ (a
     redrive refuses to begin beside one or beside another redrive; a
     redrive, an export and a purge -id stop when one begins), an
     export that met quarantined copies, a purge -expect N of a DLQ that
     does not hold N, a purge -id that read fewer copies than were ready,
     or beside another consumer, or whose id more than one copy carries (it deletes nothing then;
     a redrive -id so moves nothing),
     an import stopped before its last line (it says where it stands), a
     command whose stdout failed, however late (it stops as at an
     interrupt, and writes its summary to stderr instead; list, show and
     redrive -dry-run whose stdout's reader closed it, as | head does,
     exit 0)
  2  usage errors
`

func mainUsage() string {
	var b strings.Builder
	for _, c := range commands {
		fmt.Fprintf(&b, "  %-8s %s\n", c.name, c.summary)
	}
	return fmt.Sprintf(usage, b.String())
}

// run is lilydlq with its arguments; it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, mainUsage())
		return exitUsage
	}
	switch a := args[0]; {
	case a == "help" && len(args) > 1:
		return run(ctx, []string{args[1], "-h"}, stdout, stderr)
	case a == "help" || a == "-h" || a == "-help" || a == "--help":
		fmt.Fprint(stdout, mainUsage())
		return exitOK
	}
	i := slices.IndexFunc(commands, func(c *command) bool { return c.name == args[0] })
	if i < 0 {
		fmt.Fprintf(stderr, "lilydlq: unknown command %q (lilydlq -h lists them)\n", sanitize.Text(args[0], maxID))
		return exitUsage
	}
	c := commands[i]
	fs := flag.NewFlagSet("lilydlq "+c.name, flag.ContinueOnError)
	e := &env{ctx: ctx, stdout: stdout, stderr: stderr}
	// The default is resolved after parsing, not shown as -url's default:
	// the help would print $LILY_AMQP_URL, password and all.
	fs.StringVar(&e.url, "url", "", "the broker's AMQP URL (default $LILY_AMQP_URL, else "+defaultURL+")")
	// A command that takes a file reads no queue.
	if !c.file {
		fs.IntVar(&e.read.window, "window", defaultWindow, "copies one reading consumer may hold (its prefetch, 1..65535): the most the client buffers at once, so memory is about window × the largest body")
		fs.Int64Var(&e.read.limit, "delivery-limit", 0, "the DLQ's delivery limit, when it is a quorum queue with one (x-delivery-limit, a policy's delivery-limit, RabbitMQ 4's default 20; AMQP does not show it): a read stops at a copy it would return at that count (0: not known)")
		fs.DurationVar(&e.read.idle, "wait", 5*time.Second, "how long to wait for the next copy before deciding the DLQ holds fewer than it did when the read began (over a slow link, longer than the largest body takes to arrive), and after the read for the broker to count its consumers gone")
	}
	body := c.flags(fs)
	// Help asked for goes to stdout; help after a usage error, to stderr.
	out := stderr
	if slices.ContainsFunc(args, func(a string) bool { return a == "-h" || a == "-help" || a == "--help" }) {
		out = stdout
	}
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprintf(out, "Usage: lilydlq %s %s\n\n%s\n\nFlags:\n", c.name, c.args, c.summary)
		fs.PrintDefaults()
		fmt.Fprintf(out, "\n%s\n\nExit codes: 0 done, 1 failure, 2 usage (lilydlq -h explains).\n", c.help)
	}
	rest, err := cliflag.ParseInterspersed(fs, args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if len(rest) != 1 || rest[0] == "" {
		operand := "queue"
		if c.file {
			operand = "file"
		}
		fmt.Fprintf(stderr, "lilydlq %s: name one %s (lilydlq %s -h explains)\n", c.name, operand, c.name)
		return exitUsage
	}
	if !c.file && (e.read.window < 1 || e.read.window > 65535) {
		fmt.Fprintf(stderr, "lilydlq %s: -window must be 1..65535\n", c.name)
		return exitUsage
	}
	if !c.file && e.read.limit < 0 {
		fmt.Fprintf(stderr, "lilydlq %s: -delivery-limit must not be negative (0: not known)\n", c.name)
		return exitUsage
	}
	if !c.file && e.read.idle <= 0 {
		fmt.Fprintf(stderr, "lilydlq %s: -wait must be positive\n", c.name)
		return exitUsage
	}
	if e.url == "" {
		e.url = cmp.Or(os.Getenv("LILY_AMQP_URL"), defaultURL)
	}
	if c.file {
		e.file = rest[0]
	} else {
		e.queue = rest[0]
	}
	code := body(e)
	// A failed stdout fails the command, however late it failed: the read
	// notices it only while it runs, and after the read a purge or a
	// re-drive may still have changed the DLQ, unseen.
	if err := e.outputFailed(); err != nil && !e.closedEarly() {
		if !e.told {
			fmt.Fprintf(stderr, "lilydlq %s: %v\n", c.name, outputError{err})
		}
		return exitFailure
	}
	return code
}

// outputFailed is the error of the first failed write to stdout, when
// stdout is closable's, or nil.
func (e *env) outputFailed() error {
	if s, ok := e.stdout.(*stopOnError); ok {
		return s.failed()
	}
	return nil
}

// closedEarly reports whether the reader of a quiet command's stdout closed
// it (| head).
func (e *env) closedEarly() bool {
	return e.quiet && errors.Is(e.outputFailed(), syscall.EPIPE)
}

// fail prints a command's failure and returns exitFailure. A failure that is
// its stdout's reader closing it ends a quiet command quietly, exit 0.
func (e *env) fail(name string, err error) int {
	if out := e.outputFailed(); out != nil && errors.Is(err, out) {
		if e.closedEarly() {
			return exitOK
		}
		e.told = true
	}
	fmt.Fprintf(e.stderr, "lilydlq %s: %v\n", name, err)
	return exitFailure
}

// wrote is the exit code of list or show once they wrote to stdout, err the
// write's error.
func (e *env) wrote(name string, err error) int {
	if err != nil {
		return e.fail(name, err)
	}
	return exitOK
}

// summary writes line, what a command did, to stdout, or to stderr when
// stdout failed: after a re-drive stopped by a closed stdout, it is the
// only count of the copies moved, as export's "incomplete: stopped after"
// is of those written. A quiet command whose reader left has no one to tell.
func (e *env) summary(name, line string) {
	if _, err := fmt.Fprintln(e.stdout, line); err == nil || e.closedEarly() {
		return
	}
	fmt.Fprintf(e.stderr, "lilydlq %s: %s\n", name, line)
}

// usageError prints a command's usage error and returns exitUsage.
func (e *env) usageError(name, format string, args ...any) int {
	fmt.Fprintf(e.stderr, "lilydlq %s: %s (lilydlq %s -h explains)\n", name, fmt.Sprintf(format, args...), name)
	return exitUsage
}

// readNote tells, on stderr, what a read could not see or changed: copies
// other consumers hold, copies that went away meanwhile, on a quorum DLQ the
// delivery count the read added to, and a read of more windows than a quorum
// DLQ puts back in order. AMQP does not say a queue's type, and
// x-delivery-count only hints at it (a quorum DLQ sets it from its second
// read; a copy from a quorum source may carry one into a classic DLQ), so
// the last two are said as conditions, the count as a warning: a read can
// take a quorum DLQ's copies past its delivery limit, which it cannot see.
func (e *env) readNote(name string, res readResult, maxCount int64) {
	if res.Consumers > 0 {
		fmt.Fprintf(e.stderr, "lilydlq %s: note: the DLQ has %d other consumer(s): copies they hold were not read, and copies they handed back during the read may have been read in the place of ready ones; stop them for a whole read\n", name, res.Consumers)
	}
	if res.Idle {
		// -wait counts from one whole copy to the next: a body whose
		// transfer outlasts it ends the read as a copy that never came.
		fmt.Fprintf(e.stderr, "lilydlq %s: note: %d of %d ready copies came within -wait; the others were taken or expired meanwhile, or were still arriving (raise -wait for large bodies on a slow link)\n", name, res.Read, res.Ready)
	}
	if maxCount > 0 {
		fmt.Fprintf(e.stderr, "lilydlq %s: warning: copies carry x-delivery-count (up to %d after this read): if the DLQ is a quorum queue, each read that returns a copy adds one, and with a delivery limit (x-delivery-limit, a policy's delivery-limit, RabbitMQ 4's default 20) the broker drops or dead-letters a copy once its count passes it, unannounced. AMQP does not show lilydlq the limit: look it up (rabbitmqctl list_queues name type arguments policy) and give it as -delivery-limit, which stops a read at a copy it would return at the limit; redrive -all -to <a queue without one> moves the copies out, returning none (docs/dlq.md)\n", name, maxCount+1)
	}
	if res.Lingering > 0 {
		fmt.Fprintf(e.stderr, "lilydlq %s: note: -wait after the read, the DLQ still counted %d consumer(s) more than before it: if they are the read's (a quorum DLQ hands a closed channel's copies back late), the copies they hold return to the DLQ's head later, and a read begun before then reads them after the others; run the next command once the DLQ counts none (docs/dlq.md)\n", name, res.Lingering)
	}
	if res.Windows > quorumWindows {
		fit := min((res.Ready+quorumWindows-1)/quorumWindows, 65535)
		fmt.Fprintf(e.stderr, "lilydlq %s: warning: the read used %d windows of %d copies: if the DLQ is a quorum queue, it put the copies of more than %d windows back out of their order (a classic queue keeps it); read a quorum DLQ with -window %d or more, at about that many times its largest body in memory (docs/dlq.md)\n", name, res.Windows, e.read.window, quorumWindows, fit)
	}
}
