package schema

import (
	"math"
	"slices"
	"time"

	"gopkg.in/yaml.v3"
)

var argumentKeys = []string{
	"single_active_consumer", "max_priority", "max_length", "max_length_bytes", "overflow", "message_ttl", "initial_group_size",
}

// Ways Lily's own arguments of a queue reach the broker.
const (
	ArgumentsDeclared = "declared"
	ArgumentsByPolicy = "policy"
)

// Overflow behaviours of a full queue.
var overflows = []string{"drop-head", "reject-publish", "reject-publish-dlx"}

// estate reads a queue's ownership, where Lily's arguments come from, the
// arguments its team sets and its bindings.
func (p *parser) estate(q *Queue, m map[string]entry, f *File) {
	q.External = p.ownership(m, false)
	q.ByPolicy = q.External
	if e, ok := m["lily_arguments"]; ok {
		if s, ok := p.str(e.v, "lily_arguments"); ok {
			switch {
			case s != ArgumentsDeclared && s != ArgumentsByPolicy:
				p.nearest(p.errorf(e.v, RuleOwnership, "unknown lily_arguments %q", shorten(s)), s, []string{ArgumentsDeclared, ArgumentsByPolicy}, "declared or policy")
			case s == ArgumentsDeclared && q.External:
				p.errorf(e.v, RuleOwnership, "queue %q is external: Lily does not declare it, so its dead-lettering must come from a policy", q.Name).
					Hint = "remove lily_arguments, or use lily_arguments: policy"
			default:
				q.ByPolicy = s == ArgumentsByPolicy
			}
		}
	}
	if e, ok := m["arguments"]; ok {
		if q.External {
			p.errorf(e.k, RuleOwnership, "queue %q is external: its arguments are its owner's, and Lily never declares them", q.Name).
				Hint = "remove arguments, or add ownership: owned"
		}
		q.Arguments = p.arguments(e.v, q)
	}
	if e, ok := m["bindings"]; ok {
		q.Bindings = p.bindings(e.v, f, q.External, nil)
	}
}

func (p *parser) arguments(n *yaml.Node, q *Queue) Arguments {
	var a Arguments
	m := p.object(n, "arguments", argumentKeys...)
	if m == nil {
		return a
	}
	quorumOnly := func(key string) {
		if e, ok := m[key]; ok && q.Type != Quorum {
			p.errorf(e.k, RuleArgument, "%s applies to quorum queues only", key).Hint = "add type: quorum, or remove " + key
		}
	}
	if e, ok := m["single_active_consumer"]; ok {
		a.SingleActiveConsumer, _ = p.boolean(e.v, "single_active_consumer")
	}
	if e, ok := m["max_priority"]; ok {
		if q.Type == Quorum {
			p.errorf(e.k, RuleArgument, "max_priority: RabbitMQ 3 quorum queues have no priorities").Hint = "use a classic queue, or remove max_priority"
		}
		// RabbitMQ allows 255; it advises at most 10.
		a.MaxPriority, _ = p.intRange(e.v, "max_priority", 1, math.MaxUint8)
	}
	p.setInt(m, "max_length", &a.MaxLength, 1, math.MaxInt32)
	p.setInt(m, "max_length_bytes", &a.MaxLengthBytes, 1, math.MaxInt64)
	if e, ok := m["overflow"]; ok {
		if s, ok := p.str(e.v, "overflow"); ok {
			a.Overflow = s
			switch {
			case !slices.Contains(overflows, s):
				p.nearest(p.errorf(e.v, RuleArgument, "unknown overflow %q", shorten(s)), s, overflows, "drop-head, reject-publish or reject-publish-dlx")
			case q.Type == Quorum && s != "reject-publish":
				p.errorf(e.v, RuleArgument, "overflow %s: a quorum queue dead-letters at least once, which needs reject-publish", s).
					Hint = "use overflow: reject-publish"
			case a.MaxLength == 0 && a.MaxLengthBytes == 0:
				p.errorf(e.v, RuleArgument, "overflow applies only with max_length or max_length_bytes")
			case q.Type != Quorum && s == "reject-publish" && len(q.Retry.Delays) > 0:
				// A classic retry bucket dead-letters at most once: a full
				// queue refuses the copy coming back, and no one is told.
				p.errorf(e.v, RuleArgument, "overflow reject-publish on a classic queue with retries: a retry copy that comes back from its bucket while the queue is full is dropped, since a classic queue dead-letters at most once and a dead-letter has no publisher to nack").
					Hint = "use drop-head or reject-publish-dlx, which send the oldest message or the copy to the DLQ, or type: quorum"
			}
		}
	}
	if e, ok := m["message_ttl"]; ok {
		if d, ok := p.duration(e.v, "message_ttl", false); ok {
			if d%time.Millisecond != 0 {
				p.errorf(e.v, RuleDuration, "message_ttl %s is not a whole number of milliseconds, as RabbitMQ's are", d)
			}
			a.MessageTTL = d
		}
	}
	quorumOnly("initial_group_size")
	p.setInt(m, "initial_group_size", &a.InitialGroupSize, 1, math.MaxUint8)
	return a
}
