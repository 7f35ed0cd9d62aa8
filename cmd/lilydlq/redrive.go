package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/internal/frame"
	"github.com/lily-mq/lily/internal/queue"
	"github.com/lily-mq/lily/internal/sanitize"
	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/wire"
)

var redriveCmd = &command{
	name: "redrive", args: "<selection> [flags] <dlq>",
	summary: "move chosen copies back to their source queues",
	help: `The selection is -all, or any of -id, -reason, -reason-contains, -type,
-since, -until (a copy must match each one given). Ids, types and reasons
match by their whole value, as sent or as list prints it when list prints it
whole: a reason list cuts ("...") is chosen by -reason-contains, or by the
whole reason (export has it). An -id no copy carries is reported, and the
exit code is 1; so is a selection (other than -all) that chose no copy.
-all with any of the others is a usage error.

With -id, the chosen copies move once the read has seen every copy, so
each one's body is held in memory until then, beside the window's: 40
chosen copies of 4 MiB take 160 MiB more, whatever -window (-every moves
each as it is read). An -id that more than one copy carries (the message
failed again after an unconfirmed re-drive) moves nothing, of any -id, as
in purge: redrive lists those copies and exits 1. Choose one with -reason,
-reason-contains, -type, -since or -until, or give -every to move each copy
chosen. A read that was not whole moves nothing either.

A copy goes back to its source queue: x-lily-failure-queue, or the queue of
its latest x-death entry when the broker dead-lettered it itself, or after
Lily's failure facts were written. Each is published mandatory through the
default exchange on a confirm-mode channel; only after the broker confirmed
it and returned nothing is the DLQ copy ACKed. A copy whose publish is
returned (its queue does not exist) or refused (a full queue with overflow
reject-publish) stays in the DLQ, and the exit code is 1; a queue with
overflow reject-publish-dlx also dead-letters the refused copy, so its DLQ
then holds the message twice. So does a chosen
copy that cannot go back: one without a source queue, one whose source is
the DLQ itself (it would only go round), one whose source is a direct
reply-to address (amq.rabbitmq.reply-to.*, a requester's channel, not a
queue: the broker drops what it cannot hand on there, unreported), and one
whose headers the client cannot decode, or not whole (quarantined: list
shows why; its headers are unknown, so it cannot be sent back as it came). So does one
whose x-lily-failure-queue and latest x-death name different queues (but
for the expiry from one of that queue's retry buckets, on its way back): a
producer can write either, the failure facts on a copy the broker
dead-lettered and x-death on one Lily moved, so neither is trusted to route
it. list shows both names. So does
the copy of a poison message (x-lily-poison-copy, or an earlier Lily's of
kind poison), which keeps only the original's sanitized identity and body:
the guard refuses it again.

-to sends every chosen copy to the queue named instead of its source, which
is how copies without a trusted source go back once their queue is known. A
direct reply-to address is refused as -to (exit 2), and so is a re-drive's lock
(lilydlq.redrive.*).
Copies not chosen stay where they are.

The copy sent back is the DLQ copy with its body and properties (but for
user_id and expiration, which the broker would refuse or apply again),
persistent, and its headers but for the failure facts (x-lily-failure-*),
the handoff id of the copy (the publisher writes its own), and the broker's
records of the DLQ's life: x-death, x-first-death-*, x-last-death-*,
x-delivery-count and x-acquired-count. x-death goes because RabbitMQ before
3.13 reads a published message's x-death in its cycle check: a message that
expires from a retry bucket into a queue its x-death says it already left
for a reason other than rejected is dropped without a word (measured on
3.10.8), so a re-driven delivery_limit, expired or maxlen copy would vanish
at its first retry. x-delivery-count goes because it counted the DLQ's
returns, not the source queue's. x-lily-attempt is set to 1, or kept with
-keep-attempt; x-lily-redriven counts the re-drives and x-lily-redriven-from
names the DLQ.

-dry-run prints what would move and moves nothing: as list, it ends quietly,
exit 0, when the reader of its output closes it (| head). It looks for each
destination queue (a passive declare): a copy whose queue does not exist
would not move, and the exit code is 1, as the run's would be. -rate paces the
publishes, -limit stops after that many moved.

A re-drive runs alone. It holds a lock while it runs, an exclusive queue
named lilydlq.redrive.<dlq> (the user needs the configure permission on it),
which the broker frees when the re-drive's connection ends: a second
re-drive of the DLQ is refused at its start. It also refuses to begin beside
another consumer of the DLQ (a list, a service), reads with exclusive
consumers, and stops when it finds one not its own, counting at the start of
each window and every second within one, and with -id once more after the
last copy (a quorum DLQ does not enforce exclusive consumers). Beside another
re-drive it could move a copy twice: the one the other leaves in doubt,
unconfirmed, once it is handed back.

-step bounds each broker step of a publish: the write of the copy, and then
the wait for its confirm. Over a slow link it must cover the largest body's
write: a 4 MiB body at 512 KiB/s takes 8 s. A copy whose step runs out ends
the run: it stays in the DLQ and may be in its queue too. Do not just run
the re-drive again then: if the copy is in its queue, that sends it twice
(docs/dlq.md says what to do).`,
	flags: func(fs *flag.FlagSet) func(*env) int {
		sel := newSelection()
		fs.Var(&sel.ids, "id", "a message id to move, whole (repeatable); without -every, every chosen copy's body is held in memory until the read ends")
		criteriaFlags(fs, sel, "move")
		fs.BoolVar(&sel.all, "all", false, "move every copy")
		every := fs.Bool("every", false, "with -id, move every copy chosen, though more than one carries an id")
		o := redriveOptions{}
		fs.BoolVar(&o.dryRun, "dry-run", false, "print what would move; move nothing")
		fs.BoolVar(&o.keepAttempt, "keep-attempt", false, "keep x-lily-attempt as the copy has it, instead of setting it to 1")
		fs.Float64Var(&o.rate, "rate", 0, "copies moved per second at most, from 1/3600 to 1e6 (0: no limit)")
		fs.IntVar(&o.limit, "limit", 0, "copies moved at most (0: no limit)")
		fs.StringVar(&o.to, "to", "", "send every chosen copy to this queue instead of its source")
		stepFlag(fs, &o.step)
		return func(e *env) int {
			switch {
			case sel.empty():
				return e.usageError("redrive", "choose copies: -all, or -id, -reason, -reason-contains, -type, -since, -until")
			case sel.all && (len(sel.ids) > 0 || sel.narrowed()):
				// As purge's -all: every copy, never narrowed. Taken as a
				// narrowing, a criterion that matched nothing (a typo) moved
				// nothing and exited 0, -all being allowed to find nothing.
				return e.usageError("redrive", "-all chooses every copy: give it alone, or -id, -reason, -reason-contains, -type, -since, -until without it")
			case *every && len(sel.ids) == 0:
				return e.usageError("redrive", "-every moves each copy an -id chose: give -id")
			case o.rate < 0:
				return e.usageError("redrive", "-rate must not be negative")
			case o.rate != 0 && !(o.rate >= minRate && o.rate <= maxRate):
				// NaN, an infinity, or a rate whose interval overflows or
				// rounds to nothing would silently mean no limit.
				return e.usageError("redrive", "-rate must be 0 (no limit) or copies a second from 1/3600 (one an hour) to 1e6")
			case o.limit < 0:
				return e.usageError("redrive", "-limit must not be negative")
			case len(o.to) > maxQueue:
				return e.usageError("redrive", "-to names no queue: longer than 255 bytes")
			case frame.DirectReply("", o.to):
				return e.usageError("redrive", "-to names %s", directReplyWhy)
			case isLock(o.to):
				return e.usageError("redrive", "-to names %s", lockWhy)
			case o.step <= 0 || o.step > queue.MaxDuration:
				return e.usageError("redrive", "-step must be positive, at most %s", queue.MaxDuration)
			}
			o.every = *every
			return redrive(e, sel, o)
		}
	},
}

type redriveOptions struct {
	dryRun, keepAttempt bool
	every               bool // with -id, move every copy chosen, though several carry one id
	rate                float64
	limit               int
	to                  string // the queue every chosen copy goes to, when not ""
	step                time.Duration
}

// defaultStep is -step's default. The runtime's 5 s suits a consumer beside
// its broker; an operator's tool runs over a WAN or a VPN, where the write of
// one large copy alone can take longer.
const defaultStep = 30 * time.Second

// stepFlag adds -step, the publisher's step timeout, to a command that
// publishes.
func stepFlag(fs *flag.FlagSet, step *time.Duration) {
	fs.DurationVar(step, "step", defaultStep, "how long one broker step of a publish may take, the write of a copy and then the wait for its confirm: over a slow link, at least the largest body's size over the link's rate")
}

// newPublisher is the confirm-mode publisher of a command that publishes,
// with step as its step timeout.
func newPublisher(e *env, step time.Duration) (*runtime.Publisher, error) {
	return runtime.NewPublisher(runtime.Config{
		URLs:        []string{e.url},
		StepTimeout: step,
		Logger:      slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}, 1)
}

func redrive(e *env, sel *selection, o redriveOptions) int {
	pub, err := newPublisher(e, o.step)
	if err != nil {
		return e.fail("redrive", err)
	}
	defer pub.Close()
	pace := pacer{every: interval(o.rate)}
	var chosen, moved, failed int
	var maxCount int64
	verb := "moved"
	if o.dryRun {
		verb = "would move"
		e.quiet = true // it changes nothing, as list
	}
	// The broker's frame size, which the Publisher's connection to it
	// negotiates too; Lily asks for frame.Size, and a broker may give less.
	sendFrame := frame.Size
	read := e.read
	read.connected = func(n int) { sendFrame = min(sendFrame, n) }
	read.alone = !o.dryRun
	dests := destinations{url: e.url, missing: map[string]bool{}}
	defer dests.close()
	// move sends one chosen copy back (or says it would): take once its
	// publish was confirmed; an error ends the run. open, when not nil, is
	// asked right before the publish whether the copy can still be ACKed.
	move := func(c pendingCopy, open func() error) (verdict, error) {
		f := c.f
		if o.dryRun {
			// The run would find a queue that is not there by its publish,
			// returned: the dry run asks the broker first.
			missing, err := dests.missingQueue(c.to)
			if err != nil {
				return keep, err
			}
			if missing {
				failed++
				fmt.Fprintf(e.stdout, "would not move %s (%s) -> %s: no queue named %s; it stays in the DLQ\n", orDash(f.ID), orDash(f.Type), c.shown, c.shown)
				return keep, nil
			}
			moved++
			fmt.Fprintf(e.stdout, "%s %s (%s) -> %s: %s\n", verb, orDash(f.ID), orDash(f.Type), c.shown, f.Reason)
			return keep, enough(moved, o.limit)
		}
		if err := pace.wait(e.ctx); err != nil {
			return keep, err
		}
		if open != nil {
			if err := open(); err != nil {
				return keep, err
			}
		}
		err := send(e.ctx, pub, o.step, c.to, c.next)
		switch {
		case err == nil:
			moved++
			fmt.Fprintf(e.stdout, "%s %s (%s) -> %s\n", verb, orDash(f.ID), orDash(f.Type), c.shown)
			return take, enough(moved, o.limit)
		case errors.Is(err, runtime.ErrReturned):
			failed++
			fmt.Fprintf(e.stdout, "not moved %s (%s) -> %s: %s; it stays in the DLQ\n", orDash(f.ID), orDash(f.Type), c.shown, sanitize.Text(err.Error(), maxReason))
			return keep, nil
		case errors.Is(err, runtime.ErrNacked):
			// A full queue with overflow reject-publish-dlx dead-letters what
			// it refuses: with this DLQ for its target, the copy is here twice.
			failed++
			fmt.Fprintf(e.stdout, "not moved %s (%s) -> %s: %s; it stays in the DLQ (if %s dead-letters what it refuses, reject-publish-dlx, the refused copy is in its DLQ too)\n",
				orDash(f.ID), orDash(f.Type), c.shown, sanitize.Text(err.Error(), maxReason), c.shown)
			return keep, nil
		case errors.Is(err, runtime.ErrUnconfirmed):
			failed++
			return keep, fmt.Errorf("%s (%s) -> %s: %s; it stays in the DLQ and may be in %s too: %s", orDash(f.ID), orDash(f.Type), c.shown, sanitize.Text(err.Error(), maxReason), c.shown, unconfirmedAdvice(len(c.next.Body), o.step))
		default:
			failed++
			return keep, fmt.Errorf("%s (%s) -> %s not sent: %s; it stays in the DLQ", orDash(f.ID), orDash(f.Type), c.shown, sanitize.Text(err.Error(), maxReason))
		}
	}
	// With -id, and without -every, the copies are moved once the read saw
	// every one, as purge -id deletes them: an id two copies carry (the copy
	// an unconfirmed re-drive left and the one of the message's next
	// failure) moves nothing, nor does a read that was not whole.
	decide := len(sel.ids) > 0 && !o.every
	// Relying on a whole read, as purge -id does, it counts the consumers
	// once more after its last copy too: one begun since the last count may
	// hold a copy of a chosen id. (A dry run moves nothing, and does not
	// consume exclusively beside a service that may begin.)
	read.watch = decide && !o.dryRun
	var (
		pending   []pendingCopy
		by        = map[string]int{} // copies that would move under each -id
		ambiguous []string
		notWhole  bool
	)
	if decide {
		read.settle = func(res readResult, h *holding) error {
			for id, n := range by {
				if n > 1 {
					ambiguous = append(ambiguous, id)
				}
			}
			notWhole = !res.whole()
			if len(ambiguous) > 0 || notWhole {
				return nil
			}
			// Each copy is ACKed once its publish is confirmed, as a copy
			// the read moves at once is, and none is sent once the reading
			// channel is closed: a failure leaves at most the copy in
			// flight in two places, and says which.
			for _, c := range pending {
				v, err := move(c, h.open)
				if v == take {
					if lost := h.ack(c.tag); lost != nil {
						return fmt.Errorf("%s (%s) -> %s: moved, but its ACK failed: it is in %s and in the DLQ too; no copy after it was sent: %w", orDash(c.f.ID), orDash(c.f.Type), c.shown, c.shown, lost)
					}
				}
				if err != nil {
					return err
				}
			}
			return nil
		}
	}
	res, err := readQueue(e.ctx, e.url, e.queue, "redrive", read, func(d *amqp.Delivery, quarantined string) (verdict, error) {
		f := factsOf(d, quarantined)
		maxCount = max(maxCount, f.Count)
		sel.see(d)
		if !sel.match(d, f) {
			return keep, nil
		}
		chosen++
		// Copies that cannot go back as they came are reported and kept:
		// never ACKed, so the DLQ still holds them.
		to, shown := f.Source, f.shownQueue()
		if o.to != "" {
			to, shown = o.to, sanitize.Text(o.to, maxQueue)
		}
		next := redriven(d, e.queue, o.keepAttempt)
		// What the Publisher refuses before it writes, checked here first: a
		// failed Send would end the run, as the broker's failure does.
		refused := frame.CheckPublish("", to, next)
		tooLarge := frame.CheckSent(next, sendFrame)
		var why string
		switch {
		case f.Quarantined != "":
			why = "its headers cannot be read as they are (" + f.Quarantined + "), so it cannot be sent back as it came"
		case (f.PoisonCopy || f.Kind == "poison") && o.to == "":
			// An earlier Lily's poison copies carry no mark, only their kind.
			why = "it is the copy of a poison message, which keeps only the original's sanitized identity and body: the guard refuses it again (have its producer send the message again, fixed; -to moves the copy elsewhere)"
		case to == "" && f.Conflict != "":
			why = "its source is in doubt (" + f.Conflict + "): a producer can write either; send it with -to"
		case to == "" || len(to) > maxQueue:
			why = "no source queue (no " + envelope.HeaderFailureQueue + ", no x-death entry)"
		case to == e.queue:
			why = "its destination is the DLQ itself: a re-drive would only move it to the DLQ's tail, without its failure facts"
		case isLock(to):
			// A copy's source header is anyone's to write.
			why = "its destination is " + lockWhy
		case frame.DirectReply("", to):
			why = "its destination is " + directReplyWhy
		case refused != nil:
			// Its own trouble, not the broker's, as is a copy too large:
			// the others go on.
			why = "re-driven, the publisher would refuse it (" + sanitize.Text(refused.Error(), maxReason) + ")"
		case tooLarge != nil:
			why = "re-driven, it would not fit a frame (" + tooLarge.Error() + ")"
		}
		if why != "" {
			failed++
			fmt.Fprintf(e.stdout, "not moved %s (%s): %s; it stays in the DLQ\n", orDash(f.ID), orDash(f.Type), why)
			return keep, nil
		}
		c := pendingCopy{d.DeliveryTag, f, sel.carried(d), to, shown, next}
		// Only copies that would move count: one that stays is not moved
		// twice.
		for _, id := range c.ids {
			by[id]++
		}
		if decide {
			// Held, not moved: settle moves it once every copy was seen.
			pending = append(pending, c)
			return keep, nil
		}
		return move(c, nil)
	})
	if err == nil || res.Read > 0 {
		line := fmt.Sprintf("%s: %s %d of %d chosen (%d read, %d ready when the read began)", sanitize.Text(e.queue, maxQueue), verb, moved, chosen, res.Read, res.Ready)
		if failed > 0 {
			line += fmt.Sprintf("; %d not moved, still in the DLQ", failed)
		}
		e.summary("redrive", line)
	}
	if err != nil {
		return e.fail("redrive", err)
	}
	e.readNote("redrive", res, maxCount)
	e.refuseAmbiguous("redrive", "moved", "move", ambiguous, by, func(yield func(facts, []string) bool) {
		for _, c := range pending {
			if !yield(c.f, c.ids) {
				return
			}
		}
	})
	var missing []string
	// A read cut short by -limit did not look for the other ids.
	if o.limit == 0 || moved < o.limit {
		missing = sel.missing()
	}
	for _, id := range missing {
		fmt.Fprintf(e.stderr, "lilydlq redrive: no copy with id %s %s %s\n", sanitize.Text(id, maxID), among(res), sanitize.Text(e.queue, maxQueue))
	}
	// Copies that did not come, or were not read for the copies another
	// consumer handed back, may have been chosen: as with export, the run
	// did not do all it was asked.
	incomplete := (res.Idle || res.Consumers > 0) && (o.limit == 0 || moved < o.limit)
	if incomplete {
		nothing := ""
		if notWhole {
			nothing = ": nothing moved (a copy not read may carry a chosen id)"
		}
		fmt.Fprintf(e.stderr, "lilydlq redrive: incomplete: %d of the %d copies ready when the read began were read, beside %d other consumer(s)%s\n", res.Read, res.Ready, res.Consumers, nothing)
	}
	// A selection that chose nothing (a reason pasted as list cut it, a
	// typo) is told from one whose copies all moved, as an -id no copy
	// carries is: -all alone may find nothing to do.
	none := !sel.all && chosen == 0
	if none {
		// A copy in another envelope profile has its type where its
		// producer put it; -type finds it by the type the runtime read.
		foreign := ""
		if sel.typ != "" {
			foreign = "; a copy of another envelope profile by the type the runtime read, " + envelope.HeaderFailureType +
				", which copies made before Lily wrote it do not carry: choose those by reason or time"
		}
		fmt.Fprintf(e.stderr, "lilydlq redrive: the selection chose none of the %d copies read from %s: nothing was moved (choose by the whole value, as sent or as list prints it uncut; a reason list cut with \"...\" by -reason-contains%s)\n", res.Read, sanitize.Text(e.queue, maxQueue), foreign)
	}
	if failed > 0 || len(missing) > 0 || incomplete || none || len(ambiguous) > 0 {
		return exitFailure
	}
	return exitOK
}

// pendingCopy is a chosen copy and where it goes.
type pendingCopy struct {
	tag       uint64
	f         facts
	ids       []string        // the -id values it carries
	to, shown string          // its destination, and as printed
	next      amqp.Publishing // held, body and all, until it is sent
}

// destinations are what a dry run learned of the queues it would send to.
type destinations struct {
	url     string
	conn    *amqp.Connection // dialed for the first queue asked about
	missing map[string]bool  // by name, each queue asked about
}

// missingQueue reports whether no queue is named q, by a passive declare on
// a channel of its own: a 404 closes the channel it came on.
func (d *destinations) missingQueue(q string) (bool, error) {
	if missing, ok := d.missing[q]; ok {
		return missing, nil
	}
	if d.conn == nil {
		conn, _, err := dial(d.url, "redrive -dry-run")
		if err != nil {
			return false, err
		}
		d.conn = conn
	}
	ch, err := d.conn.Channel()
	if err != nil {
		return false, fmt.Errorf("open a channel to look for %s: %s", sanitize.Text(q, maxQueue), sanitize.Text(err.Error(), maxReason))
	}
	_, err = ch.QueueDeclarePassive(q, true, false, false, false, nil)
	var ae *amqp.Error
	switch {
	case err == nil:
		_ = ch.Close()
	case errors.As(err, &ae) && ae.Code == amqp.NotFound:
	default:
		return false, fmt.Errorf("look for %s: %w", sanitize.Text(q, maxQueue), queueError(q, err))
	}
	d.missing[q] = err != nil
	return err != nil, nil
}

// close ends the connection missingQueue dialed, if any.
func (d *destinations) close() {
	if d.conn != nil {
		_ = d.conn.Close()
	}
}

// directReplyWhy says why lilydlq sends nothing to a direct reply-to
// address: the Publisher sends there without mandatory (frame.DirectReply),
// so its confirm proves nothing, and a copy then ACKed would be gone. Every
// other name, amq.* ones among them, goes mandatory: a queue not there is
// returned.
const directReplyWhy = "a direct reply-to address, not a queue: it is sent without mandatory, and the broker drops it unreported once its requester is gone"

// isLock reports whether q is a re-drive's lock (lockName): no queue to
// send copies to, since the lock takes them and is deleted, with them, when
// its re-drive's connection ends.
func isLock(q string) bool { return strings.HasPrefix(q, lockPrefix) }

// lockWhy says why lilydlq sends nothing to a re-drive's lock.
const lockWhy = "a re-drive's lock (" + lockPrefix + "*), a queue deleted, with what it holds, when its re-drive's connection ends"

// unconfirmedAdvice is what to do about a copy of size bytes whose publish
// went unconfirmed within step.
func unconfirmedAdvice(size int, step time.Duration) string {
	return "running again would send it twice if it is; find out first (docs/dlq.md), or send it -to a queue of your own. " + stepAdvice(size, step)
}

// stepAdvice says, for a copy of size bytes whose publish was not confirmed
// within step, when to raise -step.
func stepAdvice(size int, step time.Duration) string {
	return fmt.Sprintf("Its body is %d bytes: over a slow link, raise -step (%s)", size, step)
}

// sendWait bounds a publish's waits for a connection, a publish slot or a
// broker that blocks publishers; the write and the confirm are bounded by
// the publisher's step timeout, and the send's context leaves room for both.
const sendWait = 30 * time.Second

// send publishes one message to the queue dest, with step the publisher's step
// timeout. Once begun, a publish is seen through to its confirm even when
// the command is asked to stop, so that a re-driven copy is then ACKed and
// ends in one place, not in both.
func send(ctx context.Context, pub *runtime.Publisher, step time.Duration, dest string, p amqp.Publishing) error {
	// The confirm wait ends at the context's deadline if that comes before
	// its step: past the waits, the write and the confirm get a step each.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sendWait+2*step)
	defer cancel()
	return pub.Send(ctx, runtime.Message{RoutingKey: dest, Publishing: p})
}

// enough ends the read once limit copies moved.
func enough(moved, limit int) error {
	if limit > 0 && moved >= limit {
		return errEnough
	}
	return nil
}

// redriven is the message a re-drive publishes for the DLQ copy d: its body
// and properties, its headers without the failure facts and the broker's
// records of its dead-lettering, marked as re-driven from dlq.
func redriven(d *amqp.Delivery, dlq string, keepAttempt bool) amqp.Publishing {
	h := make(amqp.Table, len(d.Headers)+2)
	for k, v := range d.Headers {
		if !stripped(k) {
			h[k] = v
		}
	}
	if !keepAttempt {
		h[envelope.HeaderAttempt] = int64(1)
	}
	h[envelope.HeaderRedriven] = redrivenCount(d.Headers[envelope.HeaderRedriven])
	h[envelope.HeaderRedrivenFrom] = dlq
	return amqp.Publishing{
		Headers: h, Body: d.Body, DeliveryMode: amqp.Persistent,
		ContentType: d.ContentType, ContentEncoding: d.ContentEncoding,
		Priority: d.Priority, CorrelationId: d.CorrelationId, ReplyTo: d.ReplyTo,
		MessageId: d.MessageId, Timestamp: d.Timestamp, Type: d.Type, AppId: d.AppId,
	}
}

// redrivenCount is the x-lily-redriven of a re-drive of a copy whose own is
// v: v plus one. A count no re-drive wrote (not an integer, negative, or
// too large to grow: only a producer writes one) starts again at 1. It is
// never v: the runtime tells a re-driven copy's work from the delivery that
// failed by it (runtime.workOf), so a count held at its maximum could let
// the record of that failure's confirmed handoff settle the re-driven copy
// unhandled.
func redrivenCount(v any) int64 {
	n, _ := wire.HeaderInt(v)
	if n < 0 || n == math.MaxInt64 {
		return 1
	}
	return n + 1
}

// stripped reports whether a re-drive leaves header k out.
func stripped(k string) bool {
	return strings.HasPrefix(k, envelope.HeaderFailurePrefix) || k == envelope.HeaderHandoffID || envelope.BrokerRecord(k) || envelope.Routing(k)
}

// pacer spaces publishes at least every apart.
type pacer struct {
	every time.Duration
	next  time.Time
}

// The bounds of a -rate other than 0: one copy an hour (the broker's
// consumer_timeout, 30 minutes by default, ends a slower read anyway), and
// a million a second, an interval of 1µs, past which pacing means nothing.
const (
	minRate = 1.0 / 3600
	maxRate = 1e6
)

// interval is the time between publishes at rate copies a second, which is
// 0 (no limit) or within [minRate, maxRate].
func interval(rate float64) time.Duration {
	if rate <= 0 {
		return 0
	}
	return time.Duration(float64(time.Second) / rate)
}

// wait returns when the next publish may go, or when ctx ends.
func (p *pacer) wait(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return context.Cause(ctx)
	}
	if p.every <= 0 {
		return nil
	}
	now := time.Now()
	if d := p.next.Sub(now); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		now = p.next
	}
	p.next = now.Add(p.every)
	return nil
}
