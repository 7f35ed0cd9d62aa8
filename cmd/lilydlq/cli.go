package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/lily-mq/lily/internal/cliflag"
)

// Exit codes, the same for every command.
const (
	exitOK      = 0
	exitFailure = 1 // the broker failed, or a chosen copy could not be moved
	exitUsage   = 2 // bad arguments
)

const defaultURL = "amqp://guest:guest@127.0.0.1:5672/"

// command is one lilydlq subcommand.
type command struct {
	name, args, summary string
	// help is the rest of the -h text, after the usage line and the flags.
	help string
	// flags adds the command's own flags and returns its body.
	flags func(fs *flag.FlagSet) func(e *env) int
}

// env is what a command's body works with.
type env struct {
	ctx            context.Context
	url, queue     string
	read           readOptions
	stdout, stderr io.Writer
}

// commands are the subcommands, in the order lilydlq -h lists them.
var commands = []*command{listCmd, showCmd, exportCmd, redriveCmd, purgeCmd}

const usage = `lilydlq inspects a Lily dead-letter queue and moves its copies back to the
queues they failed in.

Usage:
  lilydlq <command> [flags] <dlq>

Commands:
%s
Run lilydlq <command> -h (or lilydlq help <command>) for a command's flags.
Flags may come before or after the queue.

Reading (list, show, export, and redrive for the copies it leaves) takes
nothing from the DLQ: each copy is held unacknowledged and handed back when
the read ends. On a quorum DLQ each read adds one to every copy's
x-delivery-count (docs/dlq.md says when that matters).

The broker is -url, else $LILY_AMQP_URL, else ` + defaultURL + `.

Exit codes (every command):
  0  done
  1  failure: the broker refused or failed, the queue does not exist, or a
     chosen copy could not be moved (it stays in the DLQ)
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
		fmt.Fprintf(stderr, "lilydlq: unknown command %q (lilydlq -h lists them)\n", text(args[0], maxID))
		return exitUsage
	}
	c := commands[i]
	fs := flag.NewFlagSet("lilydlq "+c.name, flag.ContinueOnError)
	e := &env{ctx: ctx, stdout: stdout, stderr: stderr}
	url := defaultURL
	if v := os.Getenv("LILY_AMQP_URL"); v != "" {
		url = v
	}
	fs.StringVar(&e.url, "url", url, "the broker's AMQP URL")
	fs.IntVar(&e.read.window, "window", 1000, "copies one reading consumer may hold (its prefetch, 1..65535): the most the client buffers at once")
	fs.DurationVar(&e.read.idle, "wait", 5*time.Second, "how long to wait for the next copy before deciding the DLQ holds fewer than it did when the read began")
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
		fmt.Fprintf(stderr, "lilydlq %s: name one queue (lilydlq %s -h explains)\n", c.name, c.name)
		return exitUsage
	}
	if e.read.window < 1 || e.read.window > 65535 {
		fmt.Fprintf(stderr, "lilydlq %s: -window must be 1..65535\n", c.name)
		return exitUsage
	}
	if e.read.idle <= 0 {
		fmt.Fprintf(stderr, "lilydlq %s: -wait must be positive\n", c.name)
		return exitUsage
	}
	e.queue = rest[0]
	return body(e)
}

// fail prints a command's failure and returns exitFailure.
func (e *env) fail(name string, err error) int {
	fmt.Fprintf(e.stderr, "lilydlq %s: %v\n", name, err)
	return exitFailure
}

// usageError prints a command's usage error and returns exitUsage.
func (e *env) usageError(name, format string, args ...any) int {
	fmt.Fprintf(e.stderr, "lilydlq %s: %s (lilydlq %s -h explains)\n", name, fmt.Sprintf(format, args...), name)
	return exitUsage
}

// readNote tells, on stderr, what a read could not see or changed: copies
// other consumers hold, copies that went away meanwhile, and on a quorum DLQ
// the delivery count the read added to.
func (e *env) readNote(name string, res readResult, maxCount int64) {
	if res.Consumers > 0 {
		fmt.Fprintf(e.stderr, "lilydlq %s: note: the DLQ has %d other consumer(s): copies they hold were not read\n", name, res.Consumers)
	}
	if res.Idle {
		fmt.Fprintf(e.stderr, "lilydlq %s: note: %d of %d ready copies came within -wait; the others were taken or expired meanwhile\n", name, res.Read, res.Ready)
	}
	if maxCount > 0 {
		fmt.Fprintf(e.stderr, "lilydlq %s: note: a quorum DLQ: each read returns the copies, and the broker adds one to each x-delivery-count (now up to %d); a quorum DLQ with a delivery limit drops or dead-letters a copy at its limit (docs/dlq.md)\n", name, maxCount+1)
	}
}
