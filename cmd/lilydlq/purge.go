package main

import (
	"flag"
	"fmt"
	"strconv"

	amqp "github.com/rabbitmq/amqp091-go"
)

var purgeCmd = &command{
	name: "purge", args: "-confirm <dlq> (-expect N | -all | -id <message id>) [flags] <dlq>",
	summary: "delete the ready copies, or chosen ones (needs -confirm with the queue's name)",
	help: `purge deletes copies for good. It refuses unless -confirm repeats the
queue's exact name, and unless it is told which copies, by one of:

-expect N deletes every ready copy (queue.purge), only if the DLQ holds
exactly N: the count list or a complete export showed. A DLQ that holds
another count (a copy that came after the list) is left as it is (exit 1).
It checks a count, not which copies: a DLQ that gains and loses as many
between the two (new failures, a TTL) passes. A copy that arrives between
the check and the purge is purged with the others; purge then says so and
exits 1. An export that found quarantined copies is not complete: their
headers are only in the DLQ.

-all deletes every ready copy, however many there are.

-id deletes the copies with that message id only (repeatable; whole, as
sent or as list prints it): purge reads the DLQ as redrive does, ACKs each
copy with a chosen id, and hands every other back. A quarantined copy
(which redrive cannot move) or the copy of a poison message is deleted so,
alone. An -id no copy carries is reported, and the exit code is 1.

Copies a consumer holds unacknowledged are not ready, and stay. Export the
DLQ first if its copies may matter.`,
	flags: func(fs *flag.FlagSet) func(*env) int {
		confirm := fs.String("confirm", "", "the queue's name again: the purge's confirmation")
		expect := -1 // not given
		fs.Func("expect", "purge every ready copy, only if the DLQ holds exactly this many (the count list or export showed)", func(v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return fmt.Errorf("want a count, 0 or more")
			}
			expect = n
			return nil
		})
		all := fs.Bool("all", false, "purge every ready copy, however many")
		var ids idList
		fs.Var(&ids, "id", "delete only the copies with this message id, whole (repeatable)")
		return func(e *env) int {
			given := 0
			for _, set := range []bool{expect >= 0, *all, len(ids) > 0} {
				if set {
					given++
				}
			}
			switch {
			case *confirm != e.queue:
				return e.usageError("purge", "refusing to purge %s without -confirm %s (the queue's exact name)", text(e.queue, maxQueue), text(e.queue, maxQueue))
			case given == 0:
				return e.usageError("purge", "say which copies: -expect N (the count list or export showed), -all, or -id")
			case given > 1:
				return e.usageError("purge", "-expect, -all and -id choose the copies in different ways: give one")
			case len(ids) > 0:
				return purgeIDs(e, &selection{ids: ids})
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
	if expect == 0 {
		// Nothing to purge, so no purge: a quorum queue whose leader is
		// slow to answer counts as empty (RabbitMQ 3.10's stat gives up
		// after 250 ms), and a purge would then delete what it holds.
		fmt.Fprintf(e.stdout, "%s: holds no ready copies, as -expect 0 says; nothing purged\n", text(e.queue, maxQueue))
		return exitOK
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

// purgeIDs deletes the copies sel's ids choose, and hands every other back.
func purgeIDs(e *env, sel *selection) int {
	deleted := 0
	var maxCount int64
	res, err := readQueue(e.ctx, e.url, e.queue, "purge", e.read, func(d *amqp.Delivery, quarantined string) (verdict, error) {
		f := factsOf(d, quarantined)
		maxCount = max(maxCount, f.Count)
		sel.see(d)
		if !sel.match(d, f) {
			return keep, nil
		}
		deleted++
		fmt.Fprintf(e.stdout, "deleted %s (%s): %s\n", orDash(f.ID), orDash(f.Type), f.Reason)
		return take, nil
	})
	if err == nil || res.Read > 0 {
		fmt.Fprintf(e.stdout, "%s: deleted %d copies (%d read, %d ready when the read began)\n", text(e.queue, maxQueue), deleted, res.Read, res.Ready)
	}
	if err != nil {
		return e.fail("purge", err)
	}
	e.readNote("purge", res, maxCount)
	missing := sel.missing()
	for _, id := range missing {
		fmt.Fprintf(e.stderr, "lilydlq purge: no copy with id %s in %s\n", text(id, maxID), text(e.queue, maxQueue))
	}
	// A copy not read may have carried a chosen id.
	incomplete := !res.whole()
	if incomplete {
		fmt.Fprintf(e.stderr, "lilydlq purge: incomplete: %d of the %d copies ready when the read began were read, beside %d other consumer(s)\n", res.Read, res.Ready, res.Consumers)
	}
	if len(missing) > 0 || incomplete {
		return exitFailure
	}
	return exitOK
}
