package main

import (
	"flag"
	"fmt"
	"strconv"
)

var purgeCmd = &command{
	name: "purge", args: "-confirm <dlq> [-expect N] [flags] <dlq>",
	summary: "delete every ready copy (needs -confirm with the queue's name)",
	help: `purge deletes, for good, every copy ready in the DLQ (queue.purge): copies a
consumer holds unacknowledged at that moment are not ready and stay. It
refuses unless -confirm repeats the queue's exact name. Export the DLQ first
if its copies may matter.

-expect N refuses (exit 1, nothing purged) unless the DLQ holds exactly N
ready copies: export, then purge -expect with the count a complete export
wrote, and the purge deletes nothing the export missed (an export that
found quarantined copies is not complete: their headers are only in the
DLQ). It checks a count, not which
copies: a DLQ that gains and loses as many between the two (new failures, a
TTL) passes. A copy that arrives between the check and the purge is purged
with the others; purge then says so and exits 1.`,
	flags: func(fs *flag.FlagSet) func(*env) int {
		confirm := fs.String("confirm", "", "the queue's name again: the purge's confirmation")
		expect := -1 // no check
		fs.Func("expect", "purge only if the DLQ holds exactly this many ready copies (the count export wrote)", func(v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return fmt.Errorf("want a count, 0 or more")
			}
			expect = n
			return nil
		})
		return func(e *env) int {
			if *confirm != e.queue {
				return e.usageError("purge", "refusing to purge %s without -confirm %s (the queue's exact name)", text(e.queue, maxQueue), text(e.queue, maxQueue))
			}
			return purge(e, expect)
		}
	},
}

// purge empties the DLQ; expect, when not negative, is how many ready
// copies it must hold.
func purge(e *env, expect int) int {
	conn, _, err := dial(e.url, "purge")
	if err != nil {
		return e.fail("purge", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return e.fail("purge", err)
	}
	defer ch.Close()
	// A passive declare first: a purge of a queue that does not exist says
	// so, and -expect is checked against its count.
	q, err := ch.QueueDeclarePassive(e.queue, true, false, false, false, nil)
	if err != nil {
		return e.fail("purge", queueError(e.queue, err))
	}
	if expect >= 0 && q.Messages != expect {
		return e.fail("purge", fmt.Errorf("refusing to purge %s: it holds %d ready copies, not the %d of -expect; nothing purged", text(e.queue, maxQueue), q.Messages, expect))
	}
	n, err := ch.QueuePurge(e.queue, false)
	if err != nil {
		return e.fail("purge", queueError(e.queue, err))
	}
	fmt.Fprintf(e.stdout, "%s: purged %d copies\n", text(e.queue, maxQueue), n)
	if expect >= 0 && n != expect {
		return e.fail("purge", fmt.Errorf("purged %d copies, not the %d of -expect: copies came or went between the check and the purge", n, expect))
	}
	return exitOK
}
