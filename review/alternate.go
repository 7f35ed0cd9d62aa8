package review

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/lily-mq/lily/schema"
	"github.com/lily-mq/lily/schema/rules"
)

// alternates reports each binding added to, or widened on, an exchange with
// an alternate exchange that takes messages the exchange's old bindings
// did not route. RabbitMQ sends the alternate exchange only what the
// exchange cannot route, so the queues behind it stop receiving them.
func (b *breaker) alternates() {
	before, after := newGraph(b.old), newGraph(b.new)
	for _, nx := range b.new.Exchanges {
		ox := b.old.Exchange(nx.Name)
		if nx.AlternateExchange == "" || ox == nil || ox.AlternateExchange != nx.AlternateExchange || ox.Type != nx.Type {
			continue // a new exchange sent its alternate nothing; a changed one is reported as changed
		}
		var routed []*schema.Binding
		// The keys of the old bindings, which route what they did: most
		// bindings are unchanged, and comparing each with all the others
		// would take time of the square of their number.
		keys := map[string]bool{}
		for _, r := range before.from[nx.Name] {
			routed = append(routed, r.b)
			if r.b.Match == "" {
				keys[r.b.RoutingKey] = true
			}
		}
		for _, r := range after.from[nx.Name] {
			if r.b.Match == "" && keys[r.b.RoutingKey] || accepts(routed, r.b, nx.Type) {
				continue
			}
			// A queue behind the alternate exchange that the binding
			// itself reaches still gets the messages.
			losing := slices.DeleteFunc(slices.Clone(after.downstream(nx.AlternateExchange)), func(q string) bool { return r.kind == "queue" && r.name == q })
			if len(losing) == 0 {
				continue
			}
			b.add(rules.AlternateDiverted, r.subject(), r.b.Pos,
				fmt.Sprintf("the binding of %s %q to exchange %q takes messages that exchange routed nowhere before, which went to its alternate exchange %q: those messages no longer reach %s", r.kind, r.name, nx.Name, nx.AlternateExchange, queueList(losing)),
				fmt.Sprintf("bind those queues to exchange %q alike if they still need the messages, or narrow the binding to what the exchange already routes", nx.Name))
		}
	}
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
