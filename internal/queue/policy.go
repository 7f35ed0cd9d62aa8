package queue

import (
	"regexp"
	"strings"
)

// DefaultPolicyPriority is the priority of the policies Lily writes unless
// told another. RabbitMQ applies one policy to a queue, the matching one of
// highest priority, however exactly another matches: Lily's must be above
// every estate policy matching its queues, or its queues lose their
// dead-lettering, and whatever those set for the queue must be added to
// Lily's by hand.
const DefaultPolicyPriority = 10

// Policy is one RabbitMQ policy: Definition applies to the queues whose name
// matches Pattern.
type Policy struct {
	Name, Pattern string
	// Queue is the queue whose arguments it carries.
	Queue      string
	Definition map[string]any
}

// Policies lists the policies that carry Lily's arguments of t's queues
// when its declarations do not (t.ByPolicy or t.External), in declaration
// order; nil otherwise. Each matches one queue by its exact name.
func Policies(t Topology) []Policy {
	if !t.ByPolicy && !t.External {
		return nil
	}
	var out []Policy
	for _, q := range t.queues() {
		if len(q.lilys) == 0 {
			continue
		}
		def := make(map[string]any, len(q.lilys))
		for k, v := range q.lilys {
			// A policy key is the queue argument's name without its x-.
			def[strings.TrimPrefix(k, "x-")] = v
		}
		out = append(out, Policy{Name: "lily " + q.name, Queue: q.name, Pattern: "^" + regexp.QuoteMeta(q.name) + "$", Definition: def})
	}
	return out
}
