package main

import (
	"flag"
	"fmt"
)

var purgeCmd = &command{
	name: "purge", args: "-confirm <dlq> [flags] <dlq>",
	summary: "delete every ready copy (needs -confirm with the queue's name)",
	help: `purge deletes, for good, every copy ready in the DLQ (queue.purge): copies a
consumer holds unacknowledged at that moment are not ready and stay. It
refuses unless -confirm repeats the queue's exact name. Export the DLQ first
if its copies may matter.`,
	flags: func(fs *flag.FlagSet) func(*env) int {
		confirm := fs.String("confirm", "", "the queue's name again: the purge's confirmation")
		return func(e *env) int {
			if *confirm != e.queue {
				return e.usageError("purge", "refusing to purge %s without -confirm %s (the queue's exact name)", text(e.queue, maxQueue), text(e.queue, maxQueue))
			}
			return purge(e)
		}
	},
}

func purge(e *env) int {
	conn, err := dial(e.url, "purge")
	if err != nil {
		return e.fail("purge", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return e.fail("purge", err)
	}
	defer ch.Close()
	// A passive declare first: a purge of a queue that does not exist says so.
	if _, err := ch.QueueDeclarePassive(e.queue, true, false, false, false, nil); err != nil {
		return e.fail("purge", queueError(e.queue, err))
	}
	n, err := ch.QueuePurge(e.queue, false)
	if err != nil {
		return e.fail("purge", queueError(e.queue, err))
	}
	fmt.Fprintf(e.stdout, "%s: purged %d copies\n", text(e.queue, maxQueue), n)
	return exitOK
}
