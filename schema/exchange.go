package schema

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Ownership says who declares an exchange, queue or binding.
const (
	Owned    = "owned"
	External = "external"
)

var (
	exchangeKeys        = []string{"type", "ownership", "durable", "internal", "alternate_exchange", "bindings"}
	ownedOnlyExchange   = []string{"durable", "internal", "alternate_exchange"}
	bindingKeys         = []string{"exchange", "routing_key", "routing_keys", "match", "headers", "ownership"}
	exchangeTypes       = []string{Direct, Topic, Fanout, Headers}
	maxRoutingKeyLength = 255
)

// pendingExchange is an exchange whose references to other exchanges are
// checked once every file's exchanges are read.
type pendingExchange struct {
	x                   *Exchange
	file                string
	bindings, alternate *yaml.Node
}

func (p *parser) exchange(k, v *yaml.Node) *pendingExchange {
	if first, ok := p.known.exchanges[k.Value]; ok {
		p.errorf(k, RuleDuplicate, "exchange %q is already declared (%s)", k.Value, p.where(first.Pos))
		return nil
	}
	x := &Exchange{Name: k.Value, Pos: p.pos(k), External: true, Durable: true}
	m := p.object(v, k.Value, exchangeKeys...)
	if m == nil {
		return nil
	}
	pe := &pendingExchange{x: x, file: p.name, bindings: m["bindings"].v, alternate: m["alternate_exchange"].v}
	x.External = p.ownership(m, true)
	p.exchangeName(k, x)
	if e, ok := m["type"]; !ok {
		p.errorf(k, RuleMissingKey, "exchange %q has no type", x.Name).Hint = "add type: direct, topic, fanout or headers"
	} else if s, ok := p.str(e.v, "type"); ok {
		x.Type = s
		if !slices.Contains(exchangeTypes, s) {
			p.nearest(p.errorf(e.v, RuleUnknownType, "unknown exchange type %q", shorten(s)), s, exchangeTypes, "direct, topic, fanout or headers")
		}
	}
	for _, key := range ownedOnlyExchange {
		if e, ok := m[key]; ok && x.External {
			p.errorf(e.k, RuleOwnership, "%s describes how Lily declares exchange %q, but it is external: Lily only checks that it exists", key, x.Name).
				Hint = "add ownership: owned, or remove " + key
		}
	}
	if e, ok := m["durable"]; ok {
		x.Durable, _ = p.boolean(e.v, "durable")
	}
	if e, ok := m["internal"]; ok {
		x.Internal, _ = p.boolean(e.v, "internal")
	}
	if e, ok := m["alternate_exchange"]; ok {
		if s, ok := p.str(e.v, "alternate_exchange"); ok {
			x.AlternateExchange = s
			if s == "" || s == x.Name {
				p.errorf(e.v, RuleExchange, "alternate_exchange must name another exchange")
				pe.alternate = nil
			}
		}
	}
	return pe
}

// exchangeName checks a name RabbitMQ will be asked to declare or check.
func (p *parser) exchangeName(k *yaml.Node, x *Exchange) {
	switch name := x.Name; {
	case name == "":
		p.errorf(k, RuleExchange, "the default exchange cannot be declared or bound: it routes by queue name alone")
	case len(name) > 255:
		p.errorf(k, RuleExchange, "exchange name %q is %d bytes: RabbitMQ allows 255", shorten(name), len(name))
	case strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		p.errorf(k, RuleExchange, "exchange name %q holds control characters", name)
	case strings.HasPrefix(name, "amq.") && !x.External:
		p.errorf(k, RuleExchange, "exchange %q starts with amq., which RabbitMQ reserves (403 ACCESS_REFUSED)", name).
			Hint = "the broker's own amq.* exchanges are external"
	}
}

// ownership reads an ownership key and reports whether it says external;
// external is the default when the key is absent.
func (p *parser) ownership(m map[string]entry, external bool) bool {
	e, ok := m["ownership"]
	if !ok {
		return external
	}
	s, ok := p.str(e.v, "ownership")
	if !ok {
		return external
	}
	if s != Owned && s != External {
		p.nearest(p.errorf(e.v, RuleOwnership, "unknown ownership %q", shorten(s)), s, []string{Owned, External}, "owned or external")
		return external
	}
	return s == External
}

// exchangeRefs reads each exchange's bindings from other exchanges, once
// every exchange is known (each binding is owned when its exchange is), and
// checks that its alternate exchange is declared.
func (p *parser) exchangeRefs(f *File, pending []*pendingExchange) {
	for _, pe := range pending {
		p.name = pe.file
		if pe.bindings != nil {
			pe.x.Bindings = p.bindings(pe.bindings, f, pe.x.External, pe.x)
		}
		if pe.alternate != nil && p.known.exchanges[pe.x.AlternateExchange] == nil {
			p.errorf(pe.alternate, RuleUnknownRef, "alternate exchange %q is not declared", pe.x.AlternateExchange).
				Hint = fmt.Sprintf("declare %q under exchanges:", pe.x.AlternateExchange)
		}
	}
}

// bindings reads a list of bindings to a queue (into nil) or to an exchange;
// external is the default ownership.
func (p *parser) bindings(n *yaml.Node, f *File, external bool, into *Exchange) []*Binding {
	items, ok := p.seq(n, "bindings")
	if !ok {
		return nil
	}
	var out []*Binding
	for _, item := range items {
		m := p.object(item, "a binding", bindingKeys...)
		if m == nil {
			continue
		}
		e, ok := m["exchange"]
		if !ok {
			p.errorf(item, RuleMissingKey, "a binding names no exchange").Hint = "add exchange: <name>"
			continue
		}
		name, ok := p.str(e.v, "exchange")
		if !ok {
			continue
		}
		src := p.known.exchanges[name]
		switch {
		case src == nil:
			p.unknownExchange(e.v, name, f)
			continue
		case src == into:
			p.errorf(e.v, RuleExchange, "exchange %q is bound to itself", name)
			continue
		}
		b := Binding{Pos: p.pos(item), Source: name, External: p.ownership(m, external)}
		if into != nil && into.External && !b.External {
			// Lily would declare a binding into another team's exchange, which
			// it otherwise only checks: what it routes there is theirs to say.
			p.errorf(m["ownership"].v, RuleOwnership, "a binding into exchange %q cannot be owned: the exchange is external, and Lily never declares into another team's exchange", into.Name).
				Hint = "remove ownership: the binding is its owner's, or make the exchange owned"
		}
		for _, key := range p.routingKeys(m, src) {
			c := b
			c.RoutingKey = key
			out = append(out, &c)
		}
		if src.Type == Headers {
			p.headersMatch(item, m, out[len(out)-1])
		} else if e, ok := m["match"]; ok {
			p.errorf(e.k, RuleExchange, "match applies to headers exchanges; %q is a %s exchange", name, src.Type)
		} else if e, ok := m["headers"]; ok {
			p.errorf(e.k, RuleExchange, "headers applies to headers exchanges; %q is a %s exchange", name, src.Type)
		}
	}
	return out
}

// routingKeys reads routing_key or routing_keys for a binding from src: one
// binding per key; a fanout or headers exchange takes none, and gets one
// binding with the empty key.
func (p *parser) routingKeys(m map[string]entry, src *Exchange) []string {
	one, hasOne := m["routing_key"]
	many, hasMany := m["routing_keys"]
	if src.Type == Fanout || src.Type == Headers {
		for _, e := range []entry{one, many} {
			if e.k != nil {
				p.errorf(e.k, RuleExchange, "a %s exchange ignores routing keys: remove %s", src.Type, e.k.Value)
			}
		}
		return []string{""}
	}
	var keys []string
	switch {
	case hasOne && hasMany:
		p.errorf(many.k, RuleExchange, "name routing_key or routing_keys, not both")
	case hasOne:
		if s, ok := p.routingKey(one.v, src); ok {
			keys = append(keys, s)
		}
	case hasMany:
		items, _ := p.seq(many.v, "routing_keys")
		if len(items) == 0 && many.v.Kind == yaml.SequenceNode {
			p.errorf(many.v, RuleEmpty, "routing_keys: want at least one key")
		}
		for _, item := range items {
			if s, ok := p.routingKey(item, src); ok {
				if slices.Contains(keys, s) {
					p.errorf(item, RuleDuplicate, "routing key %q is listed twice", s)
					continue
				}
				keys = append(keys, s)
			}
		}
	default:
		p.errorf(m["exchange"].k, RuleMissingKey, "a binding to %s exchange %q needs routing_key or routing_keys", src.Type, src.Name)
	}
	if len(keys) == 0 {
		return []string{""}
	}
	return keys
}

func (p *parser) routingKey(n *yaml.Node, src *Exchange) (string, bool) {
	s, ok := p.str(n, "a routing key")
	if !ok {
		return "", false
	}
	switch {
	case len(s) > maxRoutingKeyLength:
		p.errorf(n, RuleExchange, "routing key %q is %d bytes: RabbitMQ allows %d", shorten(s), len(s), maxRoutingKeyLength)
	case strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		// As in an exchange's name; and the runtime refuses it so.
		p.errorf(n, RuleExchange, "routing key %q holds control characters", s)
	case src.Type == Topic && !validPattern(s):
		p.errorf(n, RuleExchange, "topic pattern %q has a word mixing * or # with other characters", s).
			Hint = "words are separated by dots; * matches one word and # zero or more, each as a whole word"
	default:
		return s, true
	}
	return "", false
}

// validPattern reports whether each dot-separated word of a topic pattern
// is *, # or free of both.
func validPattern(s string) bool {
	for w := range strings.SplitSeq(s, ".") {
		if w != "*" && w != "#" && strings.ContainsAny(w, "*#") {
			return false
		}
	}
	return true
}

// headersMatch reads a headers binding's match and header values into b.
func (p *parser) headersMatch(item *yaml.Node, m map[string]entry, b *Binding) {
	b.Match = "all"
	if e, ok := m["match"]; ok {
		if s, ok := p.str(e.v, "match"); ok {
			b.Match = s
			if s != "all" && s != "any" {
				p.errorf(e.v, RuleExchange, "match %q: want all or any", shorten(s))
			}
		}
	}
	e, ok := m["headers"]
	if !ok {
		p.errorf(item, RuleMissingKey, "a binding to headers exchange %q needs headers to match", b.Source)
		return
	}
	if h, ok := p.headerValues(e.v); ok {
		if len(h) == 0 {
			p.errorf(e.v, RuleEmpty, "headers: want at least one header to match")
		}
		for _, k := range slices.Sorted(maps.Keys(h)) { // the errors share a position: one order
			v := h[k]
			if strings.HasPrefix(k, "x-") {
				p.errorf(e.v, RuleExchange, "header %q: RabbitMQ does not match headers that start with x-", shorten(k))
			}
			if len(k) > maxRoutingKeyLength {
				// A binding's argument names are AMQP short strings, as routing keys are.
				p.errorf(e.v, RuleExchange, "header %q is %d bytes: RabbitMQ allows %d", shorten(k), len(k), maxRoutingKeyLength)
			}
			if _, ok := v.(time.Time); ok {
				p.errorf(e.v, RuleExchange, "header %q: match a string, number or bool, not a timestamp", shorten(k))
			}
		}
		b.Headers = h
	}
}

// unknownExchange reports n, which names an exchange not declared, with the
// nearest that is. The names are gathered only for a problem that is
// listed: for every one past maxErrors, that would take time for nothing.
func (p *parser) unknownExchange(n *yaml.Node, name string, f *File) {
	bad := p.errorf(n, RuleUnknownRef, "unknown exchange %q", shorten(name))
	if !bad.listed() {
		return
	}
	names := make([]string, len(f.Exchanges))
	for i, x := range f.Exchanges {
		names[i] = x.Name
	}
	p.nearest(bad, name, names, "declare it under exchanges:, with ownership: external if another team owns it")
}

// Upstream lists the exchanges messages reach q through, in file order: the
// exchanges its bindings name, those bound to these, and so on, and the
// alternate exchanges of each.
func (f *File) Upstream(q *Queue) []*Exchange {
	var out []*Exchange
	seen := map[string]bool{}
	var visit func(name string)
	visit = func(name string) {
		x := f.Exchange(name)
		if x == nil || seen[name] {
			return
		}
		seen[name] = true
		out = append(out, x)
		for _, b := range x.Bindings {
			visit(b.Source)
		}
		if x.AlternateExchange != "" {
			visit(x.AlternateExchange)
		}
	}
	for _, b := range q.Bindings {
		visit(b.Source)
	}
	// In file order, sorting only those it reaches: going through every
	// exchange for each queue would take time of the product of their
	// numbers.
	slices.SortFunc(out, func(a, b *Exchange) int { return cmp.Compare(f.exchangeAt[a], f.exchangeAt[b]) })
	return out
}
