package gen

import (
	"strconv"

	"github.com/dave/jennifer/jen"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/schema"
)

// envelopeNames names the package-level value of each envelope profile the
// file writes or reads other than Lily's: one value per profile, which the
// producers and the queues' specs share, so that the two cannot drift apart.
type envelopeNames map[*schema.Envelope]string

// envelopesOf names, in schema order, the profiles f's producers write and
// its queues read, Lily's left out.
func envelopesOf(f *schema.File) envelopeNames {
	used := map[*schema.Envelope]bool{}
	for _, m := range f.Messages {
		if e, _, _ := f.ProducedIn(m); e != nil {
			used[e] = true
		}
	}
	for _, q := range f.Queues {
		for _, c := range q.Consumes {
			used[c.Envelope] = true
		}
	}
	names := envelopeNames{}
	taken := map[string]bool{}
	for _, e := range f.Envelopes {
		if !used[e] || e.Profile.Kind == envelope.Lily {
			continue
		}
		// Two names may differ only in punctuation (a-b, a_b): the second
		// gets a number.
		base := "envelope" + schema.GoName(e.Name)
		name := base
		for i := 2; taken[name]; i++ {
			name = base + strconv.Itoa(i)
		}
		taken[name] = true
		names[e] = name
	}
	return names
}

// declare writes the profiles' values, in schema order.
func (n envelopeNames) declare(j *jen.File, f *schema.File) {
	for _, e := range f.Envelopes {
		name, ok := n[e]
		if !ok {
			continue
		}
		commentf(j, "%s is envelope %s: %s.", name, commentText(e.Name), commentText(e.String()))
		j.Var().Id(name).Op("=").Add(profile(e.Profile))
	}
}

// message is the fields of an envelope.Message of m in envelope e: its wire
// type, and its profile by name (left out for Lily's).
func (n envelopeNames) message(m *schema.Message, e *schema.Envelope) []jen.Code {
	fields := []jen.Code{kv("Type", jen.Id(m.Name+"Type"))}
	if name, ok := n[e]; ok {
		fields = append(fields, kv("Profile", jen.Id(name)))
	}
	return fields
}
