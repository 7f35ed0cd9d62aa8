package schema

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/lily-mq/lily/internal/topic"
)

// VersionPlaceholder, in a fixed routing key, stands for the number of the
// version published, so that bindings can tell versions apart, as in
// order.placed.v{version}.
const VersionPlaceholder = "{version}"

// Publish is where a message's producers send it: an exchange, a routing
// key and, for an outbox, an order key.
type Publish struct {
	Pos Pos
	// Exchange is one of File.Exchanges, or "" for the default exchange,
	// which routes to the queue the routing key names.
	Exchange string
	// RoutingKey is fixed, or read from each message; the empty fixed key
	// for a fanout or headers exchange, which ignores it.
	RoutingKey Key
	// OrderKey, when not nil, is a field or header: an outbox sends the
	// messages of one value in the order they were written.
	OrderKey *Key
}

// Key is a routing or order key: Fixed text, or the value of a required
// top-level Field or typed Header of each message, a string or an enum. One
// of the three is set, except in the empty fixed key.
type Key struct {
	Fixed, Field, Header string
}

// For is k's fixed key in version v: Fixed with VersionPlaceholder replaced
// by v's number.
func (k Key) For(v *Version) string {
	return strings.ReplaceAll(k.Fixed, VersionPlaceholder, strconv.Itoa(v.Number))
}

// String says where k comes from as a reviewer reads it: "order.placed",
// field order_id or header x-tenant.
func (k Key) String() string {
	switch {
	case k.Field != "":
		return "field " + k.Field
	case k.Header != "":
		return "header " + k.Header
	}
	return strconv.Quote(k.Fixed)
}

// pendingPublish is a publish: whose exchange and producers are checked once
// every exchange and queue is read.
type pendingPublish struct {
	msg  *Message
	pub  *Publish
	file string
	// at is the publish key; exchange and routingKey are the values of those
	// keys, nil when absent.
	at, exchange, routingKey *yaml.Node
	// exchangeOK and keyOK: those values read without error.
	exchangeOK, keyOK bool
}

// publish reads msg's publish: and checks what its versions alone decide;
// publishRefs checks the rest.
func (p *parser) publish(msg *Message, k, n *yaml.Node) {
	m := p.object(n, "publish", "exchange", "routing_key", "order_key")
	if m == nil {
		return
	}
	pub := &Publish{Pos: p.pos(k)}
	pp := pendingPublish{msg: msg, pub: pub, file: p.name, at: k, exchangeOK: true, keyOK: true}
	if e, ok := m["exchange"]; ok {
		pp.exchange = e.v
		pub.Exchange, pp.exchangeOK = p.str(e.v, "exchange")
	}
	if e, ok := m["routing_key"]; ok {
		pp.routingKey = e.v
		if e.v.Kind == yaml.MappingNode {
			pub.RoutingKey, pp.keyOK = p.keyOf(msg, e.v, "routing_key")
		} else if pub.RoutingKey.Fixed, pp.keyOK = p.str(e.v, "routing_key"); pp.keyOK {
			pp.keyOK = p.fixedKey(msg, e.v, pub.RoutingKey.Fixed)
		}
	}
	if e, ok := m["order_key"]; ok {
		if e.v.Kind == yaml.ScalarNode {
			p.errorf(e.v, RulePublish, "order_key names a field or a header of each message, not fixed text").
				Hint = "{field: <name>} or {header: <name>}"
		} else if key, ok := p.keyOf(msg, e.v, "order_key"); ok {
			pub.OrderKey = &key
		}
	}
	var names []string
	if pub.Exchange != "" {
		names = append(names, msg.Name+"Exchange")
	}
	for _, v := range msg.Versions {
		names = append(names, "Publish"+v.GoName)
		if pub.RoutingKey.Fixed != "" {
			names = append(names, v.GoName+"RoutingKey")
		}
	}
	p.declare("the publish of message "+msg.Name, k, names...)
	msg.Publish = pub
	p.publishes = append(p.publishes, pp)
}

// fixedKey checks fixed routing key s of msg: printable ASCII, braces only
// in the placeholder, and at most 255 bytes in every version.
func (p *parser) fixedKey(msg *Message, n *yaml.Node, s string) bool {
	longest, in := s, ""
	if len(msg.Versions) > 0 && strings.Contains(s, VersionPlaceholder) {
		last := msg.Versions[len(msg.Versions)-1] // the highest number, the longest key
		longest, in = Key{Fixed: s}.For(last), " in "+last.GoName
	}
	switch {
	case strings.ContainsAny(strings.ReplaceAll(s, VersionPlaceholder, ""), "{}"):
		p.errorf(n, RulePublish, "routing key %q holds a brace outside %s, the one placeholder", shorten(s), VersionPlaceholder).
			Hint = "write {version} where the version number goes"
	case strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r > 0x7e }):
		p.errorf(n, RulePublish, "routing key %q is not printable ASCII", shorten(s))
	case len(longest) > maxRoutingKeyLength:
		p.errorf(n, RulePublish, "routing key %q is %d bytes%s: RabbitMQ allows %d", shorten(longest), len(longest), in, maxRoutingKeyLength)
	default:
		return true
	}
	return false
}

// keyOf reads {field: name} or {header: name}, the routing_key or order_key
// what: a required, non-nullable string or enum of every version of msg,
// and a routing key's no longer than 255 bytes.
func (p *parser) keyOf(msg *Message, n *yaml.Node, what string) (Key, bool) {
	m := p.object(n, what, "field", "header")
	if m == nil {
		return Key{}, false
	}
	field, byField := m["field"]
	header, byHeader := m["header"]
	if byField == byHeader {
		p.errorf(n, RulePublish, "%s names a field or a header, one of the two", what).Hint = "{field: <name>} or {header: <name>}"
		return Key{}, false
	}
	e, kind := field, "field"
	if byHeader {
		e, kind = header, "header"
	}
	name, ok := p.str(e.v, kind)
	if !ok {
		return Key{}, false
	}
	key := Key{Field: name}
	if byHeader {
		key = Key{Header: name}
	}
	before := p.problems()
	for _, v := range msg.Versions {
		fields := v.Fields
		if byHeader {
			fields = v.Headers
		}
		i := slices.IndexFunc(fields, func(f *Field) bool { return f.Name == name })
		if i < 0 {
			where := "a top-level field"
			if byHeader {
				where = "a typed header"
			}
			p.errorf(e.v, RulePublish, "%s %s %q is not %s of %s", what, kind, shorten(name), where, v.GoName).
				Hint = fmt.Sprintf("every version needs it as a required string or enum %s", kind)
			continue
		}
		f := fields[i]
		switch {
		case !f.Required || f.Nullable:
			p.errorf(e.v, RulePublish, "%s %s %q is optional or nullable in %s: a message without it would have no key", what, kind, name, v.GoName).
				Hint = "make it required"
		case f.Type != String && f.Type != Enum:
			article := "a"
			if strings.ContainsAny(f.TypeName()[:1], "aeiou") {
				article = "an"
			}
			p.errorf(e.v, RulePublish, "%s %s %q is %s %s in %s: a key is a string or an enum", what, kind, name, article, f.TypeName(), v.GoName)
		case what != "routing_key":
		case f.Type == String && (f.MaxLength == nil || *f.MaxLength > maxRoutingKeyLength):
			p.errorf(e.v, RulePublish, "routing_key %s %q of %s may be longer than the %d bytes a routing key holds", kind, name, v.GoName, maxRoutingKeyLength).
				Hint = fmt.Sprintf("give it max_length: %d or less", maxRoutingKeyLength)
		case f.Type == Enum && slices.ContainsFunc(f.Values, func(s string) bool { return len(s) > maxRoutingKeyLength }):
			p.errorf(e.v, RulePublish, "routing_key %s %q of %s has a value longer than the %d bytes a routing key holds", kind, name, v.GoName, maxRoutingKeyLength)
		}
	}
	return key, p.problems() == before
}

// publishRefs checks each publish: once every exchange and queue is read:
// that lilygen writes the message's producers, and that its exchange exists,
// takes publishes and gets the routing key it routes by.
func (p *parser) publishRefs(f *File) {
	r := newRouter(f)
	for _, pp := range p.publishes {
		p.name = pp.file
		msg, pub := pp.msg, pp.pub
		if e, why, fix := f.ProducedIn(msg); e == nil {
			p.errorf(pp.at, RulePublish, "lilygen writes no producers of %s to publish it with: %s", msg.Name, why).
				Hint = fix + ", or remove publish:"
			continue
		}
		if !pp.exchangeOK {
			continue
		}
		var x *Exchange
		if pub.Exchange != "" {
			if x = p.known.exchanges[pub.Exchange]; x == nil {
				p.unknownExchange(pp.exchange, pub.Exchange, f)
				continue
			}
		}
		switch {
		case x != nil && x.Internal:
			p.errorf(pp.exchange, RulePublish, "exchange %q is internal: RabbitMQ refuses publishes to it (403 ACCESS_REFUSED)", x.Name).
				Hint = "publish to an exchange bound to it"
		case x != nil && (x.Type == Fanout || x.Type == Headers):
			if pp.routingKey != nil {
				p.errorf(pp.routingKey, RulePublish, "a %s exchange ignores routing keys: remove routing_key", x.Type)
			} else {
				p.exchangeRoutes(pp, x, r)
			}
		case pp.routingKey == nil && x == nil:
			p.errorf(pp.at, RuleMissingKey, "a publish to the default exchange needs a routing_key: the name of the queue it routes to").
				Hint = "routing_key: <queue>, or name an exchange"
		case pp.routingKey == nil:
			p.errorf(pp.at, RuleMissingKey, "a publish to %s exchange %q needs a routing_key", x.Type, x.Name).
				Hint = "a fixed key, {field: <name>} or {header: <name>}"
		case !pp.keyOK:
		case x == nil:
			p.defaultExchangeKey(pp)
		case x.Type == Topic && strings.ContainsAny(pub.RoutingKey.Fixed, "*#"):
			p.errorf(pp.routingKey, RulePublish, "routing key %q holds * or #: a published key is matched by the bindings' patterns, not a pattern itself", pub.RoutingKey.Fixed).
				Hint = "name the words of this message, such as order.placed.eu"
		default:
			p.exchangeRoutes(pp, x, r)
		}
	}
}

// defaultExchangeKey checks the routing key of a publish to the default
// exchange: a fixed queue name, which, when it is a queue of the schema,
// consumes the version published.
func (p *parser) defaultExchangeKey(pp pendingPublish) {
	k := pp.pub.RoutingKey
	switch {
	case k.Field != "" || k.Header != "":
		p.errorf(pp.routingKey, RulePublish, "the default exchange routes by queue name: a routing key read from each message would let the message pick its queue").
			Hint = "name the queue as a fixed routing_key, or publish to an exchange that routes by this key"
		return
	case k.Fixed == "":
		p.errorf(pp.routingKey, RulePublish, "the default exchange routes by queue name, and the routing key is empty").
			Hint = "routing_key: <queue>"
		return
	}
	for _, v := range pp.msg.Versions {
		name := k.For(v)
		if q := p.known.queues[name]; q != nil && !slices.ContainsFunc(q.Consumes, func(c Consume) bool { return slices.Contains(c.Versions, v) }) {
			p.errorf(pp.routingKey, RulePublish, "routing key %q names queue %q, which does not consume %s: it would fail at dispatch, to the DLQ", name, name, v.GoName).
				Hint = "publish to a queue that consumes it, or add it to the queue's consumes"
		}
	}
}

// maxRouteSteps bounds the work of following publishes to the queues
// their keys reach, over a whole schema: each binding tried, and each
// version checked against a queue reached, is a step. Past it the rest go
// unchecked: a message of many versions, published with a key of each, to
// an exchange of many bindings would cost their product.
const maxRouteSteps = 1 << 20

// router follows publishes to the queues of the schema their keys reach.
type router struct {
	// from lists the bindings of queues and exchanges by the exchange each
	// routes from, in file order.
	from map[string][]link
	left int // the steps left of maxRouteSteps
}

// link is a binding to a queue or, when queue is nil, to exchange to;
// words are its key's, split once.
type link struct {
	b     *Binding
	words []string
	queue *Queue
	to    *Exchange
}

func newRouter(f *File) *router {
	r := &router{from: map[string][]link{}, left: maxRouteSteps}
	for _, q := range f.Queues {
		for _, b := range q.Bindings {
			r.from[b.Source] = append(r.from[b.Source], link{b: b, words: topic.Words(b.RoutingKey), queue: q})
		}
	}
	for _, x := range f.Exchanges {
		for _, b := range x.Bindings {
			r.from[b.Source] = append(r.from[b.Source], link{b: b, words: topic.Words(b.RoutingKey), to: x})
		}
	}
	return r
}

// exchangeRoutes checks a publish to exchange x of the schema, owned or
// external, with a fixed routing key: that each queue of the schema its
// key reaches, by the bindings the schema declares, consumes the version
// published. A key read from each message is not known until it is sent,
// and a headers exchange matches the headers each message carries: those
// go unchecked, as do alternate exchanges, which take what no binding
// matches, and other teams' bindings, which the schema cannot know of.
func (p *parser) exchangeRoutes(pp pendingPublish, x *Exchange, r *router) {
	k := pp.pub.RoutingKey
	if k.Field != "" || k.Header != "" {
		return
	}
	at := pp.routingKey
	if at == nil {
		at = pp.exchange // a fanout exchange's publish, which has no key
	}
	routes := map[string][]reached{} // by key: versions often share one
	for _, v := range pp.msg.Versions {
		key := k.For(v)
		rs, ok := routes[key]
		if !ok {
			rs = r.reach(x, key)
			routes[key] = rs
		}
		for _, to := range rs {
			if r.left == 0 {
				return
			}
			r.left--
			if slices.ContainsFunc(to.queue.Consumes, func(c Consume) bool { return slices.Contains(c.Versions, v) }) {
				continue
			}
			what, hint := fmt.Sprintf("routing key %q", key), "unbind the queue"
			if x.Type == Fanout {
				what = "every message"
			}
			if p.known.exchanges[to.route[len(to.route)-1].Source].Type == Topic {
				hint = "narrow the binding"
			}
			p.errorf(at, RulePublish, "%s reaches queue %q, which does not consume %s, %s: it would fail at dispatch, to the DLQ",
				what, to.queue.Name, v.GoName, p.routeText(to.route)).
				Hint = fmt.Sprintf("add %s to the queue's consumes, %s, or stop publishing it there", v.GoName, hint)
		}
	}
}

// reached is a queue a publish reaches, and the bindings it takes there,
// from the exchange published to, the queue's own last.
type reached struct {
	queue *Queue
	route []*Binding
}

// reach lists the queues of the schema that a message published to x with
// key reaches by the schema's bindings, each once, by the first route
// found: through exchanges bound to x too, which pass the key on as it is.
// Once no step is left it lists those found so far.
func (r *router) reach(x *Exchange, key string) []reached {
	type stop struct {
		x     *Exchange
		route []*Binding
	}
	var out []reached
	words := topic.Words(key)
	queues := map[*Queue]bool{}
	seen := map[*Exchange]bool{x: true}
	for next := []stop{{x: x}}; len(next) > 0; next = next[1:] {
		s := next[0]
		for _, l := range r.from[s.x.Name] {
			if r.left == 0 {
				return out
			}
			r.left--
			if !routes(s.x.Type, l, key, words) {
				continue
			}
			route := append(slices.Clip(s.route), l.b)
			switch {
			case l.queue != nil && !queues[l.queue]:
				queues[l.queue] = true
				out = append(out, reached{l.queue, route})
			case l.to != nil && !seen[l.to]:
				seen[l.to] = true
				next = append(next, stop{l.to, route})
			}
		}
	}
	return out
}

// routes reports whether an exchange of type typ routes key, of words, by
// binding l; never for a headers exchange, whose match is on the headers
// of each message.
func routes(typ string, l link, key string, words []string) bool {
	switch typ {
	case Direct:
		return l.b.RoutingKey == key
	case Topic:
		return topic.MatchesKey(l.words, words)
	}
	return typ == Fanout
}

// routeText says how a publish reaches a queue by route, from the queue's
// binding back to the exchange published to: by its binding "m.*" to
// exchange "orders", bound to exchange "all" by "m.#".
func (p *parser) routeText(route []*Binding) string {
	var b strings.Builder
	for i := len(route) - 1; i >= 0; i-- {
		r := route[i]
		fanout := p.known.exchanges[r.Source].Type == Fanout
		switch {
		case i == len(route)-1 && fanout:
			fmt.Fprintf(&b, "by its binding to fanout exchange %q", r.Source)
		case i == len(route)-1:
			fmt.Fprintf(&b, "by its binding %q to exchange %q", r.RoutingKey, r.Source)
		case fanout:
			fmt.Fprintf(&b, ", bound to fanout exchange %q", r.Source)
		default:
			fmt.Fprintf(&b, ", bound to exchange %q by %q", r.Source, r.RoutingKey)
		}
	}
	return b.String()
}
