package schema

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/lily-mq/lily/internal/queue"
)

var queueKeys = []string{
	"type", "prefetch", "concurrency", "consumes", "retry", "dlq",
	"max_body_bytes", "handler_timeout", "settlement_budget", "inbox", "delivery_limit",
	"ownership", "lily_arguments", "arguments", "bindings", "ordering", "envelope",
}

// maxDeliveryLimit bounds a delivery limit well below the 32-bit counter a
// quorum queue keeps.
const maxDeliveryLimit = 1_000_000

func (p *parser) queue(k, v *yaml.Node, f *File) *Queue {
	if first, ok := p.known.queues[k.Value]; ok {
		p.errorf(k, RuleDuplicate, "queue %q is already declared (%s)", k.Value, p.where(first.Pos))
		return nil
	}
	q := &Queue{
		Name:           k.Value,
		GoName:         GoName(k.Value),
		Pos:            p.pos(k),
		Type:           DefaultQueueType,
		Prefetch:       DefaultPrefetch,
		Concurrency:    DefaultConcurrency,
		DLQ:            k.Value + DLQSuffix,
		MaxBodyBytes:   DefaultMaxBodyBytes,
		HandlerTimeout: DefaultHandlerTimeout,
		Inbox:          DefaultInbox,
	}
	if r := []rune(q.GoName); q.Name != "" && (len(r) == 0 || !(r[0] >= 'A' && r[0] <= 'Z')) {
		p.errorf(k, RuleName, "queue name %q must start with a letter to give a Go name", q.Name)
	} else {
		p.declare(fmt.Sprintf("queue %q", q.Name), k,
			q.GoName+"Handler", "Unimplemented"+q.GoName+"Handler", q.GoName+"QueueSpec", q.GoName+"Routes", "New"+q.GoName+"Consumer")
	}
	if v.Kind != yaml.MappingNode && v.Kind != yaml.AliasNode {
		// Named as the queue it was read as: a queue's own key indented at
		// the level of the queues names a queue, and "consumes: want a
		// mapping" would send its reader to the list it rightly holds.
		p.misplacedQueueKey(p.errorf(v, RuleKind, "queue %q: want a mapping (a queue's keys), got %s", shorten(k.Value), describe(v)), k.Value)
		return nil
	}
	m := p.object(v, k.Value, queueKeys...)
	if m == nil {
		return nil
	}
	if e, ok := m["type"]; ok {
		if s, ok := p.str(e.v, "type"); ok {
			q.Type = QueueType(s)
			if q.Type != Classic && q.Type != Quorum {
				p.nearest(p.errorf(e.v, RuleUnknownType, "unknown queue type %q", shorten(s)), s, []string{string(Classic), string(Quorum)}, "classic or quorum")
			}
		}
	}
	if e, ok := m["inbox"]; ok {
		q.Inbox = p.inbox(e.v, q.Inbox)
	}
	// RabbitMQ's prefetch count is 16 bits wide.
	p.setInt(m, "prefetch", &q.Prefetch, 1, math.MaxUint16)
	p.setInt(m, "concurrency", &q.Concurrency, 1, math.MaxUint16)
	p.setInt(m, "max_body_bytes", &q.MaxBodyBytes, 1, queue.MaxBodyBytes)
	dlqAt := k
	if e, ok := m["dlq"]; ok {
		if s, ok := p.str(e.v, "dlq"); ok {
			q.DLQ, dlqAt = s, e.v
			if s == q.Name {
				p.errorf(e.v, RuleQueueName, "dlq must differ from the queue it serves")
			}
		}
	}
	if e, ok := m["handler_timeout"]; ok {
		if d, ok := p.duration(e.v, "handler_timeout", false); ok {
			q.HandlerTimeout = d
		}
	}
	if e, ok := m["settlement_budget"]; ok {
		d, ok := p.duration(e.v, "settlement_budget", true)
		if ok && d > 0 && d < q.HandlerTimeout {
			p.errorf(e.v, RuleRetry, "settlement_budget %s is shorter than handler_timeout %s", d, q.HandlerTimeout).
				Hint = "a delivery's budget must cover its handler; use 0 for the runtime's default"
		}
		q.SettlementBudget = d
	}
	p.deliveryLimit(q, m)
	// Retries first: the arguments a queue may have depend on them.
	q.Retry = p.retry(m)
	p.estate(q, m, f)
	p.queueNames(q, k, dlqAt)
	if e, ok := m["envelope"]; ok {
		if env := p.envelopeRef(e.v, f.Envelopes); env != lilyEnvelope {
			q.Envelope = env
		}
	}
	if e, ok := m["consumes"]; ok {
		q.Consumes = p.consumes(e.v, f.Messages, q)
	} else {
		p.misplacedQueueKey(p.errorf(k, RuleMissingKey, "queue %q consumes nothing: add consumes", q.Name), q.Name)
	}
	if e, ok := m["ordering"]; ok {
		q.Ordering = p.ordering(e.v, q)
		// An ordered queue retries in line: its budget carries every
		// attempt and delay, unless the schema names one.
		if _, set := m["settlement_budget"]; !set && q.Ordering != nil && q.Retry.MaxAttempts > 1 {
			q.SettlementBudget = queue.ParkBudget(q.HandlerTimeout, q.Retry.Delays, q.Retry.MaxAttempts, queue.ParkSteps, queue.DefaultStepTimeout)
			q.ParkBudget = true
			if q.SettlementBudget > MaxDuration {
				p.errorf(e.v, RuleRetry, "retrying in line up to attempt %d takes a settlement budget of %s, longer than %s", q.Retry.MaxAttempts, q.SettlementBudget, MaxDuration).
					Hint = "fewer attempts or shorter delays"
			}
		}
	}
	p.consumedEnvelopes(q)
	return q
}

// misplacedQueueKey hints, on e, at the indentation of a queue named
// name, when that is a key of a queue: it was written at the level of the
// queues rather than under its queue's name.
func (p *parser) misplacedQueueKey(e *Error, name string) {
	if slices.Contains(queueKeys, name) {
		e.Hint = name + " is a key of a queue: indent it under the queue's name"
	}
}

// inbox reads an inbox policy; or is the policy when it cannot be read.
func (p *parser) inbox(n *yaml.Node, or Inbox) Inbox {
	s, ok := p.str(n, "inbox")
	if !ok {
		return or
	}
	if known := []string{string(InboxNone), string(InboxOptional), string(InboxRequired)}; !slices.Contains(known, s) {
		p.nearest(p.errorf(n, RuleInbox, "unknown inbox policy %q", shorten(s)), s, known, "required, optional or none")
		return or
	}
	return Inbox(s)
}

// deliveryLimit reads a quorum queue's delivery_limit: -1 for none, or a
// count; queue.DefaultDeliveryLimit when it names none.
func (p *parser) deliveryLimit(q *Queue, m map[string]entry) {
	if q.Type == Quorum {
		q.DeliveryLimit = queue.DefaultDeliveryLimit
	}
	e, ok := m["delivery_limit"]
	if !ok {
		return
	}
	if q.Type != Quorum {
		p.errorf(e.k, RuleBoundType, "delivery_limit applies to quorum queues only: RabbitMQ keeps no delivery count for a %s queue", q.Type).
			Hint = "add type: quorum, or remove delivery_limit"
		return
	}
	n, ok := p.integer(e.v, "delivery_limit")
	switch {
	case !ok:
	case n != queue.NoDeliveryLimit && (n < 1 || n > maxDeliveryLimit):
		p.errorf(e.v, RuleRange, "delivery_limit must be -1 (none) or 1 to %d, not %d", maxDeliveryLimit, n).
			Hint = "RabbitMQ dead-letters a message returned more times than this; 0 would dead-letter it at its first return"
	default:
		q.DeliveryLimit = int(n)
	}
}

// maxQueueName is the longest queue name Lily's runtime accepts. RabbitMQ
// allows 255 bytes; the rest is room for the retry buckets' suffixes.
const maxQueueName = 200

// queueNames checks the names RabbitMQ will be asked to declare for q: the
// queue, its DLQ and its retry buckets.
func (p *parser) queueNames(q *Queue, at, dlqAt *yaml.Node) {
	check := func(n *yaml.Node, what, name string, limit int) bool {
		switch {
		case name == "":
			p.errorf(n, RuleQueueName, "%s is empty: RabbitMQ would name the queue itself", what)
		case len(name) > limit:
			why := "RabbitMQ would refuse it"
			if limit < 255 {
				why = fmt.Sprintf("longer than %d, which leaves room for retry bucket names within RabbitMQ's 255", limit)
			}
			p.errorf(n, RuleQueueName, "%s %q is %d bytes: %s", what, shorten(name), len(name), why).
				Hint = fmt.Sprintf("use 1 to %d bytes", limit)
		case strings.HasPrefix(name, "amq."):
			p.errorf(n, RuleQueueName, "%s %q starts with amq., which RabbitMQ reserves for itself (403 ACCESS_REFUSED)", what, name)
		case strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f }):
			p.errorf(n, RuleQueueName, "%s %q holds control characters", what, name)
		default:
			return true
		}
		return false
	}
	// Names made from a refused one would only repeat its error.
	if !check(at, "queue name", q.Name, maxQueueName) {
		if dlqAt != at {
			check(dlqAt, "dlq", q.DLQ, 255)
		}
		return
	}
	check(dlqAt, "dlq", q.DLQ, 255)
	for _, d := range q.Retry.Delays {
		check(at, "retry bucket", q.Name+".retry."+d.String(), 255)
	}
}

// queueRoles checks that the queues' names keep their roles apart: a DLQ
// may serve several queues, but may not be a queue of the schema nor a
// retry bucket, and no queue may be another's retry bucket. Each would
// hand one queue's messages to another's consumer.
func (p *parser) queueRoles(queues []*Queue) {
	main := map[string]*Queue{}
	bucketOf := map[string]*Queue{}
	for _, q := range queues {
		main[q.Name] = q
		for _, d := range q.Retry.Delays {
			bucketOf[queue.RetryBucket(q.Name, d)] = q
		}
	}
	for _, q := range queues {
		p.name = q.Pos.File
		if other, ok := main[q.DLQ]; ok && other != q {
			p.errorAt(q.Pos, RuleQueueName, "queue %q has dlq %q, which is queue %s (%s): its dead letters would reach that queue's consumer", q.Name, q.DLQ, other.Name, p.where(other.Pos)).
				Hint = "name a DLQ of its own"
		}
		if owner, ok := bucketOf[q.DLQ]; ok {
			p.errorAt(q.Pos, RuleQueueName, "queue %q has dlq %q, which is a retry bucket of queue %s (%s): its dead letters would come back into that queue", q.Name, q.DLQ, owner.Name, p.where(owner.Pos)).
				Hint = "name a DLQ of its own"
		}
		if owner, ok := bucketOf[q.Name]; ok {
			p.errorAt(q.Pos, RuleQueueName, "queue %q is a retry bucket of queue %s (%s): that queue's retries would reach this queue's consumer", q.Name, owner.Name, p.where(owner.Pos)).
				Hint = "rename one of them"
		}
	}
}

func (p *parser) setInt(m map[string]entry, key string, dst *int, lo, hi int) {
	if e, ok := m[key]; ok {
		if v, ok := p.intRange(e.v, key, lo, hi); ok {
			*dst = v
		}
	}
}

// maxAttempts stays within the runtime's default bound on x-lily-attempt,
// beyond which it treats the header as forged.
const maxAttempts = 1000

func (p *parser) retry(q map[string]entry) Retry {
	r := Retry{MaxAttempts: 1}
	e, ok := q["retry"]
	if !ok {
		return r
	}
	m := p.object(e.v, "retry", "delays", "max_attempts")
	if d, ok := m["delays"]; ok {
		items, _ := p.seq(d.v, "delays")
		for i, item := range items {
			v, ok := p.duration(item, "a retry delay", false)
			if !ok {
				continue
			}
			if v%time.Millisecond != 0 {
				p.errorf(item, RuleDuration, "retry delay %s is not a whole number of milliseconds, as RabbitMQ message TTLs are", v)
			}
			if i > 0 && len(r.Delays) == i && v <= r.Delays[i-1] {
				p.errorf(item, RuleRetryOrder, "retry delay %s does not increase on the one before it (%s)", v, r.Delays[i-1]).
					Hint = "list each delay once, shortest first: the last one repeats until max_attempts"
			}
			r.Delays = append(r.Delays, v)
		}
	}
	r.MaxAttempts = 1 + len(r.Delays)
	if a, ok := m["max_attempts"]; ok {
		if v, ok := p.intRange(a.v, "max_attempts", 1, maxAttempts); ok {
			r.MaxAttempts = v
			if v > 1 && len(r.Delays) == 0 {
				p.errorf(a.v, RuleRetry, "max_attempts %d needs at least one retry delay", v).Hint = "add delays: [5s]"
			}
		}
	}
	return r
}

// consumes reads what q consumes: each message, its versions, and its inbox
// policy; each takes its envelope from the message, else from q.
func (p *parser) consumes(n *yaml.Node, msgs []*Message, q *Queue) []Consume {
	items, ok := p.seq(n, "consumes")
	if !ok {
		return nil
	}
	if len(items) == 0 {
		p.errorf(n, RuleEmpty, "consumes: want at least one message")
	}
	var out []Consume
	first := map[*Version]*yaml.Node{}
	consumed := map[*Message]*yaml.Node{} // the first entry that took versions of each
	var names []string                    // the messages' names, for a hint, once one is needed
	for _, item := range items {
		m := p.object(item, "consumes", "message", "versions", "inbox")
		if m == nil {
			continue
		}
		e, ok := m["message"]
		if !ok {
			p.errorf(item, RuleMissingKey, "missing message")
			continue
		}
		name, ok := p.str(e.v, "message")
		if !ok {
			continue
		}
		msg, ok := p.known.messages[name]
		if _, broken := p.known.brokenMessages[name]; !ok && broken {
			continue // its declaration's error says why
		}
		if !ok {
			// The names only for a problem listed: past maxErrors,
			// gathering them for each would take time of the product of
			// queues and messages.
			if bad := p.errorf(e.v, RuleUnknownRef, "unknown message %q", shorten(name)); bad.listed() {
				if names == nil {
					names = make([]string, len(msgs))
					for j, m := range msgs {
						names[j] = m.Name
					}
				}
				p.nearest(bad, name, names, "messages: "+listed(names))
			}
			continue
		}
		c := Consume{Message: msg, Versions: msg.Versions, Envelope: cmp.Or(msg.Envelope, q.Envelope, lilyEnvelope), Inbox: q.Inbox, Pos: p.pos(e.v)}
		if e, ok := m["inbox"]; ok {
			c.Inbox = p.inbox(e.v, c.Inbox)
		}
		if v, ok := m["versions"]; ok {
			c.Versions = p.consumedVersions(v.v, msg)
		} else if prev, dup := consumed[msg]; dup {
			// Once, not for each version: each entry repeated would walk
			// every version of the message, and report each taken.
			p.errorf(e.v, RuleDuplicate, "%s is consumed twice (first at line %d): an entry without versions: takes every version of it", name, prev.Line).
				Hint = "merge the entries, or give each the versions: it takes"
			continue
		}
		if _, ok := consumed[msg]; !ok && len(c.Versions) > 0 {
			consumed[msg] = e.v
		}
		for _, ver := range c.Versions {
			if prev, dup := first[ver]; dup {
				p.errorf(e.v, RuleDuplicate, "%s version %d is consumed twice (first at line %d)", name, ver.Number, prev.Line)
			}
			first[ver] = e.v
			p.bodyRoom(e.v, q, msg, ver)
		}
		out = append(out, c)
	}
	return out
}

func (p *parser) consumedVersions(n *yaml.Node, msg *Message) []*Version {
	items, ok := p.seq(n, "versions")
	if !ok {
		return nil
	}
	if len(items) == 0 {
		p.errorf(n, RuleEmpty, "versions: want at least one version, or leave versions out to consume them all")
	}
	var out []*Version
	var hint string // the versions msg has, once a problem needs them
	taken := map[*Version]bool{}
	for _, item := range items {
		num, ok := p.integer(item, "a version")
		if !ok {
			continue
		}
		// A search of the ascending versions, and a set of those taken:
		// scans of them for each version listed would take time of the
		// product of a message's versions and the list's length.
		i, found := slices.BinarySearchFunc(msg.Versions, num, func(v *Version, num int64) int { return cmp.Compare(int64(v.Number), num) })
		switch {
		case !found:
			// The versions for a problem listed only, gathered once, and
			// at most maxListed of them named: for each of many unknown
			// versions of a message of many, they would cost time and
			// output of their product.
			if bad := p.errorf(item, RuleUnknownRef, "message %s has no version %d", msg.Name, num); bad.listed() {
				if hint == "" {
					have := make([]string, len(msg.Versions))
					for j, v := range msg.Versions {
						have[j] = strconv.Itoa(v.Number)
					}
					hint = "it has " + listed(have)
				}
				bad.Hint = hint
			}
		case taken[msg.Versions[i]]:
			p.errorf(item, RuleDuplicate, "duplicate version %d", num)
		default:
			taken[msg.Versions[i]] = true
			out = append(out, msg.Versions[i])
		}
	}
	slices.SortFunc(out, func(a, b *Version) int { return a.Number - b.Number })
	return out
}
