package schema

import (
	"slices"

	"github.com/lily-mq/lily/envelope"
	"gopkg.in/yaml.v3"
)

// Sequential is the ordering that handles every delivery one at a time.
const Sequential = "sequential"

// keyTypes are the types whose values key an ordering: those with a text
// form that tells values apart.
var keyTypes = []Type{String, Integer, Enum}

// ordering reads a queue's ordering: sequential, {header: name} or
// {field: name}. A field must be a required top-level field of every version
// the queue consumes, and a typed header must be of a key type, so that
// every message of the queue has its key.
func (p *parser) ordering(n *yaml.Node, q *Queue) *Ordering {
	o := &Ordering{Pos: p.pos(n)}
	if n.Kind == yaml.ScalarNode {
		s, ok := p.str(n, "ordering")
		if !ok {
			return nil
		}
		if s != Sequential {
			p.errorf(n, RuleOrdering, "unknown ordering %q", shorten(s)).Hint = "sequential, {header: <name>} or {field: <name>}"
			return nil
		}
		o.Sequential = true
		return o
	}
	m := p.object(n, "ordering", "header", "field")
	if m == nil {
		return nil
	}
	header, byHeader := m["header"]
	field, byField := m["field"]
	var ok bool
	switch {
	case byHeader == byField:
		p.errorf(n, RuleOrdering, "ordering names its key by header or by field, one of the two").
			Hint = "sequential, {header: <name>} or {field: <name>}"
		return nil
	case byHeader:
		if o.Header, ok = p.str(header.v, "header"); !ok {
			return nil
		}
		p.orderHeader(header.v, q, o.Header)
	default:
		if o.Field, ok = p.str(field.v, "field"); !ok {
			return nil
		}
		p.orderField(field.v, q, o.Field)
	}
	return o
}

func (p *parser) orderHeader(n *yaml.Node, q *Queue, name string) {
	if name == "" || !envelope.CarriedHeader(name) {
		p.errorf(n, RuleOrdering, "ordering header %q: name a header of the producers', %s", shorten(name), notCarried)
		return
	}
	for _, c := range q.Consumes {
		for _, v := range c.Versions {
			i := slices.IndexFunc(v.Headers, func(h *Field) bool { return h.Name == name })
			if i >= 0 && !slices.Contains(keyTypes, v.Headers[i].Type) {
				p.errorf(n, RuleOrdering, "ordering header %q is a %s in %s, which keys nothing: use a string, integer or enum header", name, v.Headers[i].Type, v.GoName)
			}
		}
	}
}

func (p *parser) orderField(n *yaml.Node, q *Queue, name string) {
	for _, c := range q.Consumes {
		for _, v := range c.Versions {
			i := slices.IndexFunc(v.Fields, func(f *Field) bool { return f.Name == name })
			switch {
			case i < 0:
				p.errorf(n, RuleOrdering, "ordering field %q is not a field of %s, which the queue consumes", shorten(name), v.GoName).
					Hint = "every consumed version needs the key as a required top-level field"
			case !v.Fields[i].Required || v.Fields[i].Nullable:
				p.errorf(n, RuleOrdering, "ordering field %q is optional or nullable in %s: messages without it would share one lane", name, v.GoName).
					Hint = "make it required, or order by a header"
			case !slices.Contains(keyTypes, v.Fields[i].Type):
				p.errorf(n, RuleOrdering, "ordering field %q is a %s in %s, which keys nothing: use a string, integer or enum field", name, v.Fields[i].TypeName(), v.GoName)
			}
		}
	}
}
