package runtime

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/internal/queue"
)

// A queue's DLQ may exist before its consumer declares it, and differ from
// Lily's declaration in two ways that are Lily's own: its type (a DLQ shared by
// a classic and a quorum queue is of whichever declared it first) and how it
// writes "no delivery limit" (a quorum DLQ's is written by the broker's
// version, so one declared before an upgrade reads otherwise). Every other
// difference is the estate's, and loses or refuses the copies whose confirm
// Lily takes for a handoff: a max-length drops the oldest, a TTL with no
// dead-letter target drops every copy, reject-publish nacks each, a delivery
// limit drops a copy read (a get and a requeue) that often, and a stream keeps
// every copy from Lily's reads and removals. So the DLQ is declared with Lily's
// arguments, and on the 406 that names its type or limit with a value that
// loses no copy, declared again with that value, until the broker has compared
// every other argument: RabbitMQ names only the first argument that differs,
// and may name the type or the limit before a max-length or a TTL.

// yielding bounds the 406s a DLQ's declare reads: that of Lily's arguments,
// one more for each of the two it yields on, and one for a race with another
// declarer. A probe (below) declares at most twice more for each of the two.
const yielding = 4

// deadLetterQueue declares decl, the DLQ. A 406 that names another
// argument, or the type or the limit with a value that would lose copies,
// is returned: the DLQ is refused as any owned queue is. One that names the
// type or the limit with a value this code cannot read (RabbitMQ cuts its
// reply at 255 bytes, so a long DLQ name leaves the value out; another
// RabbitMQ's wording; a field type it does not know for the argument) is
// put to the broker instead: probe declares the DLQ with the values it may
// keep, and the DLQ is refused when the broker takes none of them.
func (d *declarer) deadLetterQueue(decl queue.Declaration) error {
	args := maps.Clone(decl.Args)
	major := brokerMajor(d.conn)
	probed := map[string]bool{}
	_, err := d.ch.QueueDeclare(decl.Name, true, false, false, false, args)
	for range yielding {
		if !isCode(err, amqp.PreconditionFailed) {
			return err
		}
		if err := d.open(); err != nil { // the 406 closed the channel
			return err
		}
		key, current := inequivalent(err)
		if key != "x-queue-type" && key != "x-delivery-limit" {
			return err
		}
		next, refusal := yieldTo(args, key, current, major)
		if refusal != "" {
			return fmt.Errorf("%s: %w", refusal, err)
		}
		if next == nil {
			// A key probed already and named again: the queue changed
			// meanwhile, or the broker compared it after the argument the
			// probe's 406 named. Either way it stays unread.
			if probed[key] {
				return fmt.Errorf("%s: %w", unreadable(key), err)
			}
			probed[key] = true
			taken, result, failed := d.probe(decl.Name, args, key, major)
			if failed != nil {
				return failed
			}
			if taken == nil {
				return fmt.Errorf("%s: %w", unreadable(key), err)
			}
			args, err = taken, result
			continue
		}
		args = next
		_, err = d.ch.QueueDeclare(decl.Name, true, false, false, false, args)
	}
	if found, checkErr := d.exists(decl.Name); found || checkErr != nil {
		return checkErr
	}
	return err
}

// probe declares the DLQ name with args and key set to each value a DLQ
// may keep on a broker of major version major (yieldTo's), but args' own,
// which the broker refused: a classic and a quorum type; no limit, and -1
// from RabbitMQ 4. It returns the first the broker takes for key, and the
// result of its declare: nil, or a 406 that names another argument, for
// the caller to read in turn. taken is nil when the broker took none;
// failed is a failure other than the broker's 406.
func (d *declarer) probe(name string, args map[string]any, key string, major int) (taken map[string]any, result, failed error) {
	values := map[string][]current{
		"x-queue-type":     {{read: true, value: queue.Classic}, {read: true, value: queue.Quorum}},
		"x-delivery-limit": {{read: true, none: true}, {read: true, value: "-1"}},
	}[key]
	for _, v := range values {
		try, refusal := yieldTo(args, key, v, major)
		if try == nil || refusal != "" {
			continue
		}
		_, err := d.ch.QueueDeclare(name, true, false, false, false, try)
		if err == nil {
			return try, nil, nil
		}
		if !isCode(err, amqp.PreconditionFailed) {
			return nil, nil, err
		}
		if named, _ := inequivalent(err); named != key {
			// The caller reads it, on the channel it opens after it.
			return try, err, nil
		}
		if err := d.open(); err != nil { // the 406 closed the channel
			return nil, nil, err
		}
	}
	return nil, nil, nil
}

// unreadable is the refusal of a DLQ whose key the broker's 406 names
// with a value this code cannot read, and whose probe the broker refused.
func unreadable(key string) string {
	if key == "x-queue-type" {
		return "the DLQ's x-queue-type could not be read from the broker's reply, and the broker took neither classic nor quorum for it: only a classic or quorum DLQ can be read, re-driven and emptied"
	}
	return "the DLQ's x-delivery-limit could not be read from the broker's reply, and the broker took no value for it that means no limit: each read of the DLQ (a get and a requeue) counts toward a limit, at which the broker drops a copy or dead-letters it away"
}

var (
	// RabbitMQ's 406 for a declare whose argument differs from the queue's:
	// "inequivalent arg '<key>' for queue '<name>' in vhost '<vhost>':
	// received <value> but current is <value>", each value "none", "'5'",
	// or "the value '5' of type 'long'".
	inequivalentKey = regexp.MustCompile(`^PRECONDITION_FAILED - inequivalent arg '([^']+)' `)
	currentValue    = regexp.MustCompile(` but current is (?:(none)|'([^']*)'|the value '([^']*)' of type '([a-z]+)')$`)
)

// current is a queue's value of an argument, as a 406 says it.
type current struct {
	read       bool // said in words this code reads
	none       bool // the queue has no such argument
	value, typ string
}

// inequivalent returns the argument the broker's 406 names ("" if it names
// none) and the queue's current value of it.
func inequivalent(err error) (key string, cur current) {
	var ae *amqp.Error
	if !errors.As(err, &ae) {
		return "", cur
	}
	if m := inequivalentKey.FindStringSubmatch(ae.Reason); m != nil {
		key = m[1]
	}
	if m := currentValue.FindStringSubmatch(ae.Reason); m != nil {
		cur = current{read: true, none: m[1] != "", value: m[2] + m[3], typ: m[4]}
	}
	return key, cur
}

// yieldTo returns args with key, the DLQ's type or delivery limit, set to cur,
// the queue's own value, when queue.YieldDLQ finds it loses no copy on a
// broker of major version major: a classic or quorum type, and a limit that
// means none. A value it reads as losing copies is refused: refusal says why.
// Both are zero when cur is not in words this code reads (a reply cut short,
// a field type it does not know for key, a limit that is no integer), or is
// what args hold already, which the broker says it is not: the broker is
// asked instead (probe).
func yieldTo(args map[string]any, key string, cur current, major int) (next map[string]any, refusal string) {
	if !cur.read {
		return nil, ""
	}
	var value any
	switch key {
	case "x-queue-type":
		if cur.typ != "" && cur.typ != "longstr" {
			return nil, ""
		}
		if !cur.none {
			value = cur.value
		}
	case "x-delivery-limit":
		if cur.none {
			break
		}
		if cur.typ != "" && !slices.Contains(integers, cur.typ) {
			return nil, ""
		}
		n, err := strconv.ParseInt(cur.value, 10, 64)
		if err != nil {
			return nil, ""
		}
		value = n
	default:
		return nil, ""
	}
	return queue.YieldDLQ(args, key, value, major)
}

// integers are the AMQP field types RabbitMQ compares as integers.
var integers = []string{"byte", "short", "signedint", "long", "unsignedbyte", "unsignedshort", "unsignedint"}
