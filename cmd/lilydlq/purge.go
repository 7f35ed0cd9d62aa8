package main

import (
	"flag"
	"fmt"
	"iter"
	"slices"
	"strconv"

	"github.com/lily-mq/lily/internal/sanitize"
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

-id deletes the copy with that message id only (repeatable; whole, as
sent or as list prints it): purge reads the whole DLQ as redrive does,
holding each copy, then ACKs the chosen ones and hands every other back. A
quarantined copy (which redrive cannot move) or the copy of a poison
message is deleted so, alone. An -id no copy carries is reported, and the
exit code is 1.

An -id that more than one copy carries (the message failed again after a
re-drive, or two producers' ids collide) deletes nothing, of any -id: purge
lists those copies, with their failure time and reason, and exits 1. Choose
one with -reason, -reason-contains, -type, -since or -until (as redrive
takes them: a copy must match each one given), or give -every to delete
every copy chosen.

A read that was not whole (fewer copies came than were ready, or another
consumer of the DLQ held some) deletes nothing either: a copy it did not
read may carry a chosen id. It says incomplete, and the exit code is 1.
Begun with no other consumer, it reads with exclusive consumers (a classic
DLQ refuses another meanwhile) and counts the DLQ's consumers throughout,
and once more before it deletes: one that began during the read may hold a
copy it never saw, so it stops, deleting nothing (exit 1).

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
		sel := newSelection()
		fs.Var(&sel.ids, "id", "delete only the copy with this message id, whole (repeatable)")
		criteriaFlags(fs, sel, "with -id, delete only")
		every := fs.Bool("every", false, "with -id, delete every copy chosen, though more than one carries an id")
		return func(e *env) int {
			given := 0
			for _, set := range []bool{expect >= 0, *all, len(sel.ids) > 0} {
				if set {
					given++
				}
			}
			switch {
			case *confirm != e.queue:
				return e.usageError("purge", "refusing to purge %s without -confirm %s (the queue's exact name)", sanitize.Text(e.queue, maxQueue), sanitize.Text(e.queue, maxQueue))
			case len(sel.ids) == 0 && (sel.narrowed() || *every):
				return e.usageError("purge", "-reason, -reason-contains, -type, -since, -until and -every narrow -id: give -id")
			case given == 0:
				return e.usageError("purge", "say which copies: -expect N (the count list or export showed), -all, or -id")
			case given > 1:
				return e.usageError("purge", "-expect, -all and -id choose the copies in different ways: give one")
			case len(sel.ids) > 0:
				return purgeIDs(e, sel, *every)
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
		return e.fail("purge", fmt.Errorf("refusing to purge %s: it holds %d ready copies, not the %d of -expect; nothing purged", sanitize.Text(e.queue, maxQueue), q.Messages, expect))
	}
	if expect == 0 {
		// Nothing to purge, so no purge: a quorum queue whose leader is
		// slow to answer counts as empty (RabbitMQ 3.10's stat gives up
		// after 250 ms), and a purge would then delete what it holds.
		e.summary("purge", sanitize.Text(e.queue, maxQueue)+": holds no ready copies, as -expect 0 says; nothing purged")
		return exitOK
	}
	n, err := ch.QueuePurge(e.queue, false)
	if err != nil {
		return e.fail("purge", queueError(e.queue, err))
	}
	e.summary("purge", fmt.Sprintf("%s: purged %d copies", sanitize.Text(e.queue, maxQueue), n))
	if expect >= 0 && n != expect {
		return e.fail("purge", fmt.Errorf("purged %d copies, not the %d of -expect: copies came or went between the check and the purge", n, expect))
	}
	return exitOK
}

// purgeIDs deletes the copies sel chooses, and hands every other back. It
// decides once the read is over, so that an -id more than one copy carries,
// without every, deletes nothing: the copy left in the DLQ after an
// unconfirmed re-drive and the one of the message's next failure share their
// id, and deleting both would lose the message's only record. A read that
// was not whole deletes nothing for the same reason: the other copy may be
// one it did not read.
func purgeIDs(e *env, sel *selection, every bool) int {
	type chosenCopy struct {
		tag uint64
		f   facts
		ids []string // the -id values it carries
	}
	var chosen []chosenCopy
	by := map[string]int{} // copies chosen under each -id
	var ambiguous []string
	var maxCount int64
	read := e.read
	read.watch = true
	read.settle = func(res readResult, h *holding) error {
		for id, n := range by {
			if n > 1 && !every {
				ambiguous = append(ambiguous, id)
			}
		}
		// A copy not read (held by another consumer, or not come within
		// -wait) may carry a chosen id: the one read may be its only other
		// record.
		if len(ambiguous) > 0 || !res.whole() {
			return nil
		}
		// A copy is said deleted once its ACK is sent: one whose ACK failed
		// is still in the DLQ. (The close proves the ACKs: when it fails,
		// the error says they are unproven.)
		for _, c := range chosen {
			if err := h.ack(c.tag); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "deleted %s (%s): %s\n", orDash(c.f.ID), orDash(c.f.Type), c.f.Reason)
		}
		return nil
	}
	res, err := readQueue(e.ctx, e.url, e.queue, "purge", read, func(d *amqp.Delivery, quarantined string) (verdict, error) {
		f := factsOf(d, quarantined)
		maxCount = max(maxCount, f.Count)
		sel.see(d)
		if !sel.match(d, f) {
			return keep, nil
		}
		// Held, not taken: settle takes it once every copy was seen.
		c := chosenCopy{d.DeliveryTag, f, sel.carried(d)}
		for _, id := range c.ids {
			by[id]++
		}
		chosen = append(chosen, c)
		return keep, nil
	})
	if err == nil || res.Read > 0 {
		e.summary("purge", fmt.Sprintf("%s: deleted %d copies (%d read, %d ready when the read began)", sanitize.Text(e.queue, maxQueue), res.Taken, res.Read, res.Ready))
	}
	if err != nil {
		return e.fail("purge", err)
	}
	e.readNote("purge", res, maxCount)
	e.refuseAmbiguous("purge", "deleted", "delete", ambiguous, by, func(yield func(facts, []string) bool) {
		for _, c := range chosen {
			if !yield(c.f, c.ids) {
				return
			}
		}
	})
	missing := sel.missing()
	for _, id := range missing {
		fmt.Fprintf(e.stderr, "lilydlq purge: no copy with id %s %s %s\n", sanitize.Text(id, maxID), among(res), sanitize.Text(e.queue, maxQueue))
	}
	// An id some copy carries, which the other criteria chose none of.
	var unchosen []string
	for id := range sel.found {
		if by[id] == 0 {
			unchosen = append(unchosen, id)
		}
	}
	slices.Sort(unchosen)
	for _, id := range unchosen {
		fmt.Fprintf(e.stderr, "lilydlq purge: no copy with id %s matches the other criteria given\n", sanitize.Text(id, maxID))
	}
	incomplete := !res.whole()
	if incomplete {
		fmt.Fprintf(e.stderr, "lilydlq purge: incomplete: %d of the %d copies ready when the read began were read, beside %d other consumer(s): nothing deleted\n", res.Read, res.Ready, res.Consumers)
	}
	if len(ambiguous) > 0 || len(missing) > 0 || len(unchosen) > 0 || incomplete {
		return exitFailure
	}
	return exitOK
}

// refuseAmbiguous tells, for each id of ambiguous (by counting the copies
// chosen under it), the copies that carry it, in DLQ order, and that cmd
// chose none of them: nothing done, as -every would have it ("move",
// "delete").
func (e *env) refuseAmbiguous(cmd, done, verb string, ambiguous []string, by map[string]int, copies iter.Seq2[facts, []string]) {
	slices.Sort(ambiguous)
	for _, id := range ambiguous {
		fmt.Fprintf(e.stderr, "lilydlq %s: %d copies carry the id %s, in DLQ order (failure time, type, reason):\n", cmd, by[id], sanitize.Text(id, maxID))
		for f, ids := range copies {
			if slices.Contains(ids, id) {
				fmt.Fprintf(e.stderr, "  %s  %s  %s\n", timeText(f.Time), orDash(f.Type), f.Reason)
			}
		}
	}
	if len(ambiguous) > 0 {
		fmt.Fprintf(e.stderr, "lilydlq %s: refusing to choose among them: nothing %s. Choose one with -since, -until, -reason, -reason-contains or -type (a copy must match each one given; -until the later copy's time chooses the earlier), or give -every to %s each copy chosen\n", cmd, done, verb)
	}
}
