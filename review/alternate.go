package review

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/lily-mq/lily/internal/topic"
	"github.com/lily-mq/lily/schema"
	"github.com/lily-mq/lily/schema/rules"
)

// alternates reports each binding added to, or widened on, an exchange with
// an alternate exchange that takes messages the exchange's old bindings
// did not route. RabbitMQ sends the alternate exchange only what the
// exchange cannot route, so the queues behind it stop receiving them.
func (b *breaker) alternates() {
	before, after := newGraph(b.old), newGraph(b.new)
	// A binding that came with a queue or exchange from another file routed
	// what it did there.
	for _, r := range b.arrivedRoutes() {
		before.from[r.b.Source] = append(before.from[r.b.Source], r)
	}
	for _, nx := range b.new.Exchanges {
		ox := b.old.Exchange(nx.Name)
		if nx.AlternateExchange == "" || ox == nil || ox.AlternateExchange != nx.AlternateExchange || ox.Type != nx.Type {
			continue // a new exchange sent its alternate nothing; a changed one is reported as changed
		}
		routed := bindingsOf(before.from[nx.Name])
		// The old bindings, which route what they did: most bindings are
		// unchanged, and comparing each with all the others would take time
		// of the square of their number.
		unchanged := map[string]bool{}
		for _, b := range routed {
			unchanged[matchOf(b)] = true
		}
		for _, r := range after.from[nx.Name] {
			if unchanged[matchOf(r.b)] || accepts(routed, r.b, nx.Type) {
				continue
			}
			losing := after.losing(nx, r, routed)
			if len(losing) == 0 {
				continue
			}
			b.add(rules.AlternateDiverted, r.subject(), r.b.Pos,
				fmt.Sprintf("the binding of %s %q to exchange %q takes messages that exchange routed nowhere before, which went to its alternate exchange %q: those messages no longer reach %s", r.kind, r.name, nx.Name, nx.AlternateExchange, queueList(losing)),
				fmt.Sprintf("bind those queues to exchange %q alike if they still need the messages, or narrow the binding to what the exchange already routes", nx.Name))
		}
	}
}

// losing lists by name the queues that no longer get what route r takes
// from exchange x and x's old bindings routed did not, which went to x's
// alternate exchange before. The messages reach the alternate with their
// routing key and headers unchanged, so only its bindings that take some
// of them count. Past that first hop the keys are not followed: every
// queue that an exchange bound there, or the alternate's own alternate,
// may reach counts. A queue r itself brings the messages to loses nothing.
func (g *graph) losing(x *schema.Exchange, r route, routed []*schema.Binding) []string {
	still, all := g.still(r, x.AlternateExchange)
	if all {
		return nil
	}
	behind := map[string]bool{}
	add := func(queues ...string) {
		for _, q := range queues {
			behind[q] = !still[q]
		}
	}
	d, typ := newDiversion(r.b, x.Type, routed), sourceType(g.f, x.AlternateExchange)
	for _, c := range g.from[x.AlternateExchange] {
		switch {
		case !d.takenBy(c.b, typ):
		case c.kind == "queue":
			add(c.name)
		default:
			add(g.downstream(c.name)...)
		}
	}
	if ae := g.f.Exchange(x.AlternateExchange); ae != nil && ae.AlternateExchange != "" {
		add(g.downstream(ae.AlternateExchange)...)
	}
	var out []string
	for _, q := range slices.Sorted(maps.Keys(behind)) {
		if behind[q] {
			out = append(out, q)
		}
	}
	return out
}

// still lists the queues that route r brings every message it takes to:
// its queue, or through exchanges of type fanout, which route every
// message, the queues bound to them. all says it brings them to exchange
// alternate, which routes them as it did before.
func (g *graph) still(r route, alternate string) (queues map[string]bool, all bool) {
	queues = map[string]bool{}
	reached := map[string]bool{}
	for todo := []route{r}; len(todo) > 0; {
		r := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		switch {
		case r.kind == "queue":
			queues[r.name] = true
		case r.name == alternate:
			return nil, true
		case !reached[r.name] && sourceType(g.f, r.name) == schema.Fanout:
			reached[r.name] = true
			todo = append(todo, g.from[r.name]...)
		}
	}
	return queues, false
}

// diversion is what binding n takes from an exchange of type typ that the
// exchange's old bindings routed did not: what it takes from the
// alternate exchange. It is not empty.
type diversion struct {
	n        *schema.Binding
	typ      string
	routed   []*schema.Binding
	patterns [][]string // the topic patterns of routed, split once
}

func newDiversion(n *schema.Binding, typ string, routed []*schema.Binding) *diversion {
	d := &diversion{n: n, typ: typ, routed: routed}
	if typ == schema.Topic {
		for _, o := range routed {
			d.patterns = append(d.patterns, topic.Words(o.RoutingKey))
		}
	}
	return d
}

// takenBy reports whether binding c, from an exchange of type cType, takes
// some of d, whose routing key and headers are unchanged.
func (d *diversion) takenBy(c *schema.Binding, cType string) bool {
	keyed := func(typ string) bool { return typ == schema.Direct || typ == schema.Topic }
	switch {
	case keyed(cType) && keyed(d.typ):
		return d.keyTakenBy(c, cType)
	case cType == schema.Headers && d.typ == schema.Headers:
		return headersOverlap(c, d.n, d.routed)
	}
	// c looks at what d does not, or at nothing: it takes some of d.
	return true
}

// keyTakenBy is takenBy for exchanges that look at the routing key alone.
func (d *diversion) keyTakenBy(c *schema.Binding, cType string) bool {
	n := topic.Words(d.n.RoutingKey)
	if d.typ == schema.Direct {
		// routed have other keys: d is every message of n's key.
		if cType == schema.Direct {
			return c.RoutingKey == d.n.RoutingKey
		}
		return topic.MatchesKey(topic.Words(c.RoutingKey), n)
	}
	if cType == schema.Direct {
		k := topic.Words(c.RoutingKey)
		return topic.MatchesKey(n, k) && !slices.ContainsFunc(d.patterns, func(p []string) bool { return topic.MatchesKey(p, k) })
	}
	return topic.Escapes(d.patterns, n, topic.Words(c.RoutingKey))
}

// headersOverlap reports whether headers bindings c and n both match some
// headers that none of routed match. A binding that matches some headers
// matches them with more too, so it is enough to look at the least headers
// that both c and n match.
func headersOverlap(c, n *schema.Binding, routed []*schema.Binding) bool {
	for _, hc := range leastHeaders(c) {
		for _, hn := range leastHeaders(n) {
			h := maps.Clone(hc)
			agree := true
			for k, v := range hn {
				if w, ok := h[k]; ok && w != v {
					agree = false
				}
				h[k] = v
			}
			if agree && !slices.ContainsFunc(routed, func(o *schema.Binding) bool { return matchesHeaders(o, h) }) {
				return true
			}
		}
	}
	return false
}

// graph is the bindings of a schema by the exchange they come from,
// gathered once: looking through all of them for each exchange would take
// time of the square of their number.
type graph struct {
	f    *schema.File
	from map[string][]route
	// below holds what downstream found, by exchange: many exchanges
	// share one alternate.
	below map[string][]string
}

func newGraph(f *schema.File) *graph {
	g := &graph{f: f, from: map[string][]route{}, below: map[string][]string{}}
	for _, r := range routes(f) {
		g.from[r.b.Source] = append(g.from[r.b.Source], r)
	}
	return g
}

// downstream lists by name the queues that a message reaching exchange x
// may go on to: bound to x, or to an exchange x feeds or falls back on,
// and so on.
func (g *graph) downstream(x string) []string {
	if queues, ok := g.below[x]; ok {
		return queues
	}
	reached := map[string]bool{x: true}
	queues := map[string]bool{}
	for todo := []string{x}; len(todo) > 0; {
		e := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		var next []string
		for _, r := range g.from[e] {
			if r.kind == "queue" {
				queues[r.name] = true
			} else {
				next = append(next, r.name)
			}
		}
		if ex := g.f.Exchange(e); ex != nil && ex.AlternateExchange != "" {
			next = append(next, ex.AlternateExchange)
		}
		for _, n := range next {
			if !reached[n] {
				reached[n] = true
				todo = append(todo, n)
			}
		}
	}
	g.below[x] = slices.Sorted(maps.Keys(queues))
	return g.below[x]
}

// queueList writes the queues names: queue "a", or queues "a" and "b".
func queueList(names []string) string {
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = fmt.Sprintf("%q", n)
	}
	if len(quoted) == 1 {
		return "queue " + quoted[0]
	}
	return "queues " + strings.Join(quoted[:len(quoted)-1], ", ") + " and " + quoted[len(quoted)-1]
}
