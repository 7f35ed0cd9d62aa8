package review

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/lily-mq/lily/internal/queue"
	"github.com/lily-mq/lily/internal/topic"
	"github.com/lily-mq/lily/schema"
	"github.com/lily-mq/lily/schema/rules"
)

// redeclare is the migration of a change RabbitMQ refuses on a queue.
const redeclare = "drain and delete the queue before deploying, or consume a queue under a new name"

// arguments reports each queue argument its team sets that changed: RabbitMQ
// refuses a redeclare with any other value (406).
func (b *breaker) arguments(oq, nq *schema.Queue) {
	if oq.External != nq.External {
		b.ownership("queue", oq.Name, nq.External, nq.Pos)
	}
	if oq.ByPolicy != nq.ByPolicy {
		b.add(rules.LilyArgumentsMoved, oq.Name, nq.Pos,
			fmt.Sprintf("queue %q moves Lily's arguments %s: its declarations gain or lose them, which RabbitMQ refuses for the queue and its retry buckets (406)", oq.Name, moved(nq.ByPolicy)),
			"drain and delete the queue and its retry buckets before deploying, or consume a queue under a new name; with policy, apply the policies lilygen topology writes first")
	}
	if oq.External || nq.External {
		return // its own arguments are never declared, so never refused
	}
	o, n := oq.Arguments, nq.Arguments
	type arg struct {
		rule     rules.Rule
		key      string
		old, new any
	}
	for _, a := range []arg{
		{rules.SingleActiveChanged, "single_active_consumer", o.SingleActiveConsumer, n.SingleActiveConsumer},
		{rules.MaxPriorityChanged, "max_priority", o.MaxPriority, n.MaxPriority},
		{rules.MaxLengthChanged, "max_length", o.MaxLength, n.MaxLength},
		{rules.MaxLengthChanged, "max_length_bytes", o.MaxLengthBytes, n.MaxLengthBytes},
		{rules.OverflowChanged, "overflow", overflow(oq, nq), overflow(nq, oq)},
		{rules.MessageTTLChanged, "message_ttl", o.MessageTTL, n.MessageTTL},
		{rules.InitialGroupSizeChanged, "initial_group_size", o.InitialGroupSize, n.InitialGroupSize},
	} {
		if a.old != a.new {
			b.add(a.rule, oq.Name, nq.Pos,
				fmt.Sprintf("queue %q changes %s from %s to %s: RabbitMQ refuses the redeclare (406)", oq.Name, a.key, unset(a.old), unset(a.new)),
				redeclare)
		}
	}
}

// overflow is the x-overflow the runtime declares on q, "" for none: the
// team's, or on a quorum queue that dead-letters at least once,
// reject-publish, which Lily declares itself unless its arguments go by
// policy. So a team's reject-publish there changes no declaration. Across
// a change of type or of where Lily's arguments go, which their own rules
// report, it is the team's alone.
func overflow(q, other *schema.Queue) string {
	if q.Type != other.Type || q.ByPolicy != other.ByPolicy {
		return q.Arguments.Overflow
	}
	// The broker's version changes no x-overflow.
	for _, d := range queue.Declarations(queue.Topology{Name: q.Name, Queue: q.Topology(), BrokerMajor: 4}) {
		if d.Name == q.Name {
			declared, _ := d.Args["x-overflow"].(string)
			return declared
		}
	}
	return ""
}

// ownership reports a queue or exchange (what) named name that became
// external, or owned: Lily stops or starts declaring it.
func (b *breaker) ownership(what, name string, external bool, at schema.Pos) {
	does := "starts declaring it"
	if external {
		does = "stops declaring it and only checks that it exists"
	}
	b.add(rules.OwnershipChanged, subjectOf(what, name), at,
		fmt.Sprintf("%s %q becomes %s: Lily %s, and RabbitMQ refuses a declaration that differs from the %s's (406)", what, name, ownership(external), does, what),
		fmt.Sprintf("compare the %s on the broker with the schema before deploying, and apply the policies lilygen topology writes first", what))
}

func moved(byPolicy bool) string {
	if byPolicy {
		return "from its declarations to policies"
	}
	return "from policies to its declarations"
}

// unset writes an argument's value, or "unset" for its zero.
func unset(v any) string {
	switch v {
	case false, 0, "", any(int64(0)):
		return "unset"
	}
	if d, ok := v.(fmt.Stringer); ok {
		if d.String() == "0s" {
			return "unset"
		}
	}
	return fmt.Sprint(v)
}

// exchanges reports each exchange of old that new, or the file it moved
// to, declares differently.
func (b *breaker) exchanges() {
	for _, ox := range b.old.Exchanges {
		if nx := b.new.Exchange(ox.Name); nx != nil {
			b.exchange(ox, nx)
		} else if s := b.moved("exchange", ox.Name); s != nil {
			s.exchange(ox, s.new.Exchange(ox.Name))
			b.adopt(s)
		}
		// Else what it routed to a queue is reported by bindings.
	}
}

// exchange compares ox with nx, its revision.
func (b *breaker) exchange(ox, nx *schema.Exchange) {
	if ox.External != nx.External {
		b.ownership("exchange", ox.Name, nx.External, nx.Pos)
	}
	if ox.Type != nx.Type {
		b.add(rules.ExchangeTypeChanged, ox.Name, nx.Pos,
			fmt.Sprintf("exchange %q changes type from %s to %s: RabbitMQ refuses the redeclare (406), and its bindings match differently", ox.Name, ox.Type, nx.Type),
			"declare an exchange under a new name, bind to it, and move producers to it")
		return
	}
	if ox.External || nx.External {
		return
	}
	if ox.Durable != nx.Durable || ox.Internal != nx.Internal || ox.AlternateExchange != nx.AlternateExchange {
		b.add(rules.ExchangeChanged, ox.Name, nx.Pos,
			fmt.Sprintf("exchange %q changes durable, internal or alternate_exchange: RabbitMQ refuses the redeclare (406)", ox.Name),
			"declare an exchange under a new name, bind to it, and move producers to it")
	}
}

// route is one binding, by where it goes: the queue or exchange (kind)
// named name. Names may hold any printable character, spaces too, so the
// two stay apart.
type route struct {
	kind, name string
	b          *schema.Binding
}

// subjectOf is how a subject names the queue or exchange (kind) name, where a
// rule may find either: an exchange as exchange:NAME, so that a queue and
// an exchange of one name are not accepted by one acknowledgement, and a
// queue by its name, but for one whose name starts so, as queue:NAME.
func subjectOf(kind, name string) string {
	switch {
	case kind == "exchange":
		return "exchange:" + name
	case strings.HasPrefix(name, "exchange:"), strings.HasPrefix(name, "queue:"):
		return "queue:" + name
	}
	return name
}

// subject names r in a finding.
func (r route) subject() string {
	subject := subjectOf(r.kind, r.name) + "<-" + r.b.Source
	switch {
	case r.b.Match != "":
		// Several may bind the same exchange to the same queue.
		subject += "/" + headerMatch(r.b)
	case r.b.RoutingKey != "":
		subject += "/" + r.b.RoutingKey
	}
	return subject
}

// routes lists every binding of f by its destination.
func routes(f *schema.File) []route {
	var out []route
	for _, x := range f.Exchanges {
		for _, b := range x.Bindings {
			out = append(out, route{"exchange", x.Name, b})
		}
	}
	for _, q := range f.Queues {
		for _, b := range q.Bindings {
			out = append(out, route{"queue", q.Name, b})
		}
	}
	return out
}

// from names where r goes and the exchange it comes from.
func (r route) from() [3]string { return [3]string{r.kind, r.name, r.b.Source} }

// bindingsOf is the bindings of rs.
func bindingsOf(rs []route) []*schema.Binding {
	out := make([]*schema.Binding, len(rs))
	for i, r := range rs {
		out[i] = r.b
	}
	return out
}

// matchOf spells what b matches, its routing key or its header match, so
// that two bindings of one exchange that match alike spell it alike.
func matchOf(b *schema.Binding) string {
	if b.Match != "" {
		return "headers " + headerMatch(b)
	}
	return "key " + b.RoutingKey
}

// bySource groups rs by where they go and the exchange they come from, in
// their order: comparing each binding with every other would take time of
// the square of their number.
func bySource(rs []route) map[[3]string][]route {
	out := map[[3]string][]route{}
	for _, r := range rs {
		out[r.from()] = append(out[r.from()], r)
	}
	return out
}

// bindings reports each binding of old that new no longer has: removed, or
// with a key, pattern or header match that accepts less.
func (b *breaker) bindings() {
	oldRoutes := routes(b.old)
	oldFrom := bySource(oldRoutes)
	for _, or := range oldRoutes {
		// Compared where the queue or exchange bound is now: in b.new, or
		// in the file it moved to.
		s := b
		if !holds(b.new, or.kind, or.name) {
			if m := b.moved(or.kind, or.name); m != nil {
				s = m
			}
		}
		s.binding(or, oldFrom)
		if s != b {
			b.adopt(s)
		}
	}
}

// holds reports whether f holds the queue or exchange (kind) of name.
func holds(f *schema.File, kind, name string) bool {
	if kind == "queue" {
		return f.Queue(name) != nil
	}
	return f.Exchange(name) != nil
}

// binding reports old binding or that b.new no longer has; oldFrom holds
// the old file's bindings by where they go and the exchange they come from.
func (b *breaker) binding(or route, oldFrom map[[3]string][]route) {
	same := b.newRoutes()[or.from()]
	// Together: an old binding split into several is covered by them.
	covered := accepts(bindingsOf(same), or.b, sourceType(b.new, or.b.Source))
	// At the binding that changed: one from the same source that the
	// old file does not have; with none left, at the queue or exchange
	// that held the binding, when new still has it.
	at := b.top
	switch {
	case len(same) > 0:
		at = same[0].b.Pos
	case or.kind == "queue" && b.new.Queue(or.name) != nil:
		at = b.new.Queue(or.name).Pos
	case or.kind == "exchange" && b.new.Exchange(or.name) != nil:
		at = b.new.Exchange(or.name).Pos
	}
	if i := slices.IndexFunc(same, func(nr route) bool {
		return !slices.ContainsFunc(oldFrom[nr.from()], func(r route) bool { return sameBinding(r.b, nr.b) })
	}); i >= 0 {
		at = same[i].b.Pos
	}
	subject := or.subject()
	switch {
	case covered:
	case len(same) == 0:
		b.add(rules.BindingRemoved, subject, at,
			fmt.Sprintf("%s %q is no longer bound to exchange %q: what it routed there stops arriving (bindings declared before stay on the broker until deleted)", or.kind, or.name, or.b.Source),
			"keep the binding until its producers have moved, then delete it from the broker by hand")
	default:
		b.add(rules.RoutingKeyNarrowed, subject, at,
			fmt.Sprintf("the binding of %s %q to exchange %q no longer accepts %s: those messages stop arriving (the old binding stays on the broker until deleted)", or.kind, or.name, or.b.Source, describeMatch(or.b)),
			"keep the old key beside the new one until its producers have moved")
	}
}

// sameBinding reports whether a and b bind alike.
func sameBinding(a, b *schema.Binding) bool {
	return a.Source == b.Source && a.RoutingKey == b.RoutingKey && a.Match == b.Match && maps.Equal(a.Headers, b.Headers)
}

func describeMatch(b *schema.Binding) string {
	if b.Match != "" {
		return "the header match " + headerMatch(b)
	}
	return fmt.Sprintf("routing key %q", b.RoutingKey)
}

// headerMatch writes a headers binding's match: x-match, then the headers
// in the order of their names, so that each match has one spelling, such
// as all{"region":"eu","tier":1}.
func headerMatch(b *schema.Binding) string {
	pairs := make([]string, 0, len(b.Headers))
	for _, k := range slices.Sorted(maps.Keys(b.Headers)) {
		pairs = append(pairs, strconv.Quote(k)+":"+headerValue(b.Headers[k]))
	}
	return b.Match + "{" + strings.Join(pairs, ",") + "}"
}

// headerValue writes a header's value in a match: a string quoted, a
// decimal with its point or exponent, since RabbitMQ matches the integer 1
// and the decimal 1.0 apart.
func headerValue(v any) string {
	switch v := v.(type) {
	case string:
		return strconv.Quote(v)
	case float64:
		s := strconv.FormatFloat(v, 'g', -1, 64)
		if !strings.ContainsAny(s, ".e") {
			s += ".0"
		}
		return s
	}
	return fmt.Sprint(v)
}

// accepts reports whether bindings ns together route every message that o
// does, all from an exchange of type typ.
func accepts(ns []*schema.Binding, o *schema.Binding, typ string) bool {
	switch typ {
	case schema.Fanout:
		return len(ns) > 0
	case schema.Headers:
		return headersCover(ns, o)
	case schema.Topic:
		patterns := make([][]string, len(ns))
		for i, n := range ns {
			patterns[i] = topic.Words(n.RoutingKey)
		}
		return topic.Covers(patterns, topic.Words(o.RoutingKey))
	}
	return slices.ContainsFunc(ns, func(n *schema.Binding) bool { return n.RoutingKey == o.RoutingKey })
}

// headersCover reports whether headers bindings ns together match every
// message o does. A binding that matches a message matches it with more
// headers too, so it is enough that they match the least messages o does.
func headersCover(ns []*schema.Binding, o *schema.Binding) bool {
	for _, m := range leastHeaders(o) {
		if !slices.ContainsFunc(ns, func(n *schema.Binding) bool { return matchesHeaders(n, m) }) {
			return false
		}
	}
	return true
}

// leastHeaders lists the least headers of a message that headers binding b
// matches: for x-match all, its pairs; for any, each pair alone.
func leastHeaders(b *schema.Binding) []map[string]any {
	if b.Match != "any" {
		return []map[string]any{b.Headers}
	}
	var least []map[string]any
	for k, v := range b.Headers {
		least = append(least, map[string]any{k: v})
	}
	return least
}

// matchesHeaders reports whether headers binding b matches a message with
// headers h: x-match all needs every pair of the binding, any at least one.
func matchesHeaders(b *schema.Binding, h map[string]any) bool {
	held := 0
	for k, v := range b.Headers {
		if w, ok := h[k]; ok && w == v {
			held++
		}
	}
	if b.Match == "any" {
		return held > 0
	}
	return held == len(b.Headers)
}

func sourceType(f *schema.File, name string) string {
	if x := f.Exchange(name); x != nil {
		return x.Type
	}
	return ""
}
