package gen

import (
	"maps"
	"slices"

	"github.com/dave/jennifer/jen"

	"github.com/lily-mq/lily/schema"
)

// queueTopology writes the fields of q's topology.Queue: only those that are
// set, so that a queue of the default exchange reads as before.
func queueTopology(f *schema.File, q *schema.Queue) []jen.Code {
	out := []jen.Code{
		kv("Type", jen.Lit(string(q.Type))),
		kv("DeadLetterQueue", jen.Lit(q.DLQ)),
	}
	if len(q.Retry.Delays) > 0 {
		delays := make([]jen.Code, len(q.Retry.Delays))
		for i, d := range q.Retry.Delays {
			delays[i] = duration(d)
		}
		out = append(out, kv("RetryDelays", jen.Index().Qual("time", "Duration").Values(delays...)))
	}
	if q.DeliveryLimit != 0 {
		out = append(out, kv("DeliveryLimit", jen.Lit(q.DeliveryLimit)))
	}
	if args := q.Arguments.Table(); len(args) > 0 {
		out = append(out, kv("Arguments", table(args)))
	}
	if q.External {
		out = append(out, kv("External", jen.True()))
	}
	if q.ByPolicy {
		out = append(out, kv("ByPolicy", jen.True()))
	}
	upstream := f.Upstream(q)
	if len(upstream) == 0 {
		return out
	}
	exchanges := make([]jen.Code, len(upstream))
	var bindings []jen.Code
	for i, x := range upstream {
		exchanges[i] = jen.Values(exchange(x)...)
		for _, b := range x.Bindings {
			bindings = append(bindings, jen.Values(binding(b, x.Name)...))
		}
	}
	for _, b := range q.Bindings {
		bindings = append(bindings, jen.Values(binding(b, "")...))
	}
	return append(out,
		kv("Exchanges", jen.Index().Qual(topo, "Exchange").Values(multiline(exchanges...)...)),
		kv("Bindings", jen.Index().Qual(topo, "Binding").Values(multiline(bindings...)...)),
	)
}

func exchange(x *schema.Exchange) []jen.Code {
	out := []jen.Code{kv("Name", jen.Lit(x.Name)), kv("Type", jen.Lit(x.Type))}
	if x.External {
		return append(out, kv("External", jen.True()))
	}
	if x.Durable {
		out = append(out, kv("Durable", jen.True()))
	}
	if x.Internal {
		out = append(out, kv("Internal", jen.True()))
	}
	if x.AlternateExchange != "" {
		out = append(out, kv("AlternateExchange", jen.Lit(x.AlternateExchange)))
	}
	return out
}

// binding writes b, a binding to exchange into, or to the queue when into is "".
func binding(b *schema.Binding, into string) []jen.Code {
	out := []jen.Code{kv("Source", jen.Lit(b.Source))}
	if into != "" {
		out = append(out, kv("Exchange", jen.Lit(into)))
	}
	if b.RoutingKey != "" {
		out = append(out, kv("RoutingKey", jen.Lit(b.RoutingKey)))
	}
	if args := b.Arguments(); args != nil {
		out = append(out, kv("Arguments", table(args)))
	}
	if b.External {
		out = append(out, kv("External", jen.True()))
	}
	return out
}

// table writes an argument table, keys sorted: strings, bools, int64s
// (jen writes their type) and float64s as the schema read them.
func table(args map[string]any) jen.Code {
	var entries []jen.Code
	for _, k := range slices.Sorted(maps.Keys(args)) {
		entries = append(entries, jen.Lit(k).Op(":").Lit(args[k]))
	}
	return jen.Map(jen.String()).Any().Values(multiline(entries...)...)
}
