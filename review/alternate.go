package review

import (
	"fmt"
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
	oldRoutes, newRoutes := routes(b.old), routes(b.new)
	for _, nx := range b.new.Exchanges {
		ox := b.old.Exchange(nx.Name)
		if nx.AlternateExchange == "" || ox == nil || ox.AlternateExchange != nx.AlternateExchange || ox.Type != nx.Type {
			continue // a new exchange sent its alternate nothing; a changed one is reported as changed
		}
		var routed []*schema.Binding
		for _, r := range oldRoutes {
			if r.b.Source == nx.Name {
				routed = append(routed, r.b)
			}
		}
		behind := downstream(b.new, nx.AlternateExchange)
		for _, r := range newRoutes {
			if r.b.Source != nx.Name || accepts(routed, r.b, nx.Type) {
				continue
			}
			// A queue behind the alternate exchange that the binding
			// itself reaches still gets the messages.
			losing := slices.DeleteFunc(slices.Clone(behind), func(q string) bool { return r.kind == "queue" && r.name == q })
			if len(losing) == 0 {
				continue
			}
			b.add(rules.AlternateDiverted, r.subject(), r.b.Pos,
				fmt.Sprintf("the binding of %s %q to exchange %q takes messages that exchange routed nowhere before, which went to its alternate exchange %q: those messages no longer reach %s", r.kind, r.name, nx.Name, nx.AlternateExchange, queueList(losing)),
				fmt.Sprintf("bind those queues to exchange %q alike if they still need the messages, or narrow the binding to what the exchange already routes", nx.Name))
		}
	}
}

// downstream lists the queues of f that a message reaching exchange x may
// go on to: bound to x, or to an exchange x feeds or falls back on, and so
// on.
func downstream(f *schema.File, x string) []string {
	reached := []string{x}
	for i := 0; i < len(reached); i++ {
		var next []string
		for _, r := range routes(f) {
			if r.kind == "exchange" && r.b.Source == reached[i] {
				next = append(next, r.name)
			}
		}
		if e := f.Exchange(reached[i]); e != nil && e.AlternateExchange != "" {
			next = append(next, e.AlternateExchange)
		}
		for _, n := range next {
			if !slices.Contains(reached, n) {
				reached = append(reached, n)
			}
		}
	}
	var queues []string
	for _, q := range f.Queues {
		if slices.ContainsFunc(q.Bindings, func(b *schema.Binding) bool { return slices.Contains(reached, b.Source) }) {
			queues = append(queues, q.Name)
		}
	}
	return queues
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
