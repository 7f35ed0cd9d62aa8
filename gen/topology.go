package gen

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"time"

	"github.com/dave/jennifer/jen"
)

// fields writes v, a struct of package topology, as the keys of its
// literal: each field that is set, in declaration order, so that a queue of
// the default exchange reads as before. Every field, by reflection: what
// schema.File.QueueTopology sets is what the runtime declares, with no list
// of fields here to fall behind it.
func fields(v reflect.Value) []jen.Code {
	var out []jen.Code
	for i := range v.NumField() {
		if f := v.Field(i); !f.IsZero() {
			out = append(out, kv(v.Type().Field(i).Name, value(f)))
		}
	}
	return out
}

// value writes f, a field of a struct of package topology.
func value(f reflect.Value) jen.Code {
	switch x := f.Interface().(type) {
	case string, int, bool:
		return jen.Lit(x)
	case map[string]any:
		return table(x)
	case []time.Duration:
		delays := make([]jen.Code, len(x))
		for i, d := range x {
			delays[i] = duration(d)
		}
		return jen.Index().Qual("time", "Duration").Values(delays...)
	}
	if f.Kind() != reflect.Slice || f.Type().Elem().Kind() != reflect.Struct {
		panic(fmt.Sprintf("gen: no literal for a topology field of type %s", f.Type()))
	}
	items := make([]jen.Code, f.Len())
	for i := range items {
		items[i] = jen.Values(fields(f.Index(i))...)
	}
	return jen.Index().Qual(topo, f.Type().Elem().Name()).Values(multiline(items...)...)
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
