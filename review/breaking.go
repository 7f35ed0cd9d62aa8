package review

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/internal/queue"
	"github.com/lily-mq/lily/schema"
	"github.com/lily-mq/lily/schema/rules"
)

// Breaking lists every change from old to new that breaks something live:
// generated code, producers, messages already queued, or the broker's
// redeclare. Additions that break nothing are not listed. Findings are placed
// in new; what was removed is placed at what held it, or at the top of new's
// root file.
func Breaking(old, new *schema.File) []Finding {
	found, _ := BreakingAcross([]Revision{{Old: old, New: new}})
	return found
}

// compare lists the breaking changes from b.old to b.new, as Breaking.
func (b *breaker) compare() []Finding {
	old, new := b.old, b.new
	if o, n := old.Package, new.Package; o != n {
		b.add(rules.PackageChanged, n, b.top,
			fmt.Sprintf("the generated package is renamed from %s to %s", o, n),
			"update every import and qualifier of the generated package")
	}
	if o, n := old.Output, new.Output; o != n {
		b.add(rules.OutputChanged, n, b.top,
			fmt.Sprintf("the generated file moves from %s to %s, which changes its import path", o, n),
			"update the import path of the generated package")
	}
	for _, om := range old.Messages {
		nm := new.Message(om.Name)
		if nm == nil {
			// The same wire type under a Go name the old file does not have:
			// what queues dispatch is unchanged, so its versions are compared
			// as the message's own.
			nm = b.goRenamed(om)
		}
		if nm != nil {
			b.message(om, nm)
			continue
		}
		if s := b.moved("message", om.Name); s != nil {
			s.message(om, ofTypeIn(s.new, om.Type))
			b.adopt(s)
			continue
		}
		if nm := b.renamed(om); nm != nil {
			b.add(rules.MessageRenamed, om.Name, nm.Pos,
				fmt.Sprintf("message %s is renamed %s: the type producers set changes from %q to %q, and so do its generated names", om.Name, nm.Name, om.Type, nm.Type),
				fmt.Sprintf("keep %s beside %s until no producer sends %s and no queue holds one", om.Name, nm.Name, om.Name))
			continue
		}
		b.add(rules.MessageRemoved, om.Name, b.top,
			fmt.Sprintf("message %s is removed with its generated types and extractors", om.Name),
			fmt.Sprintf("remove every use of %s's types from your code first", om.Name))
	}
	for _, oq := range old.Queues {
		if nq := new.Queue(oq.Name); nq != nil {
			b.queue(oq, nq)
			continue
		}
		if s := b.moved("queue", oq.Name); s != nil {
			s.queue(oq, s.new.Queue(oq.Name))
			b.adopt(s)
			continue
		}
		b.add(rules.QueueRemoved, oq.Name, b.top,
			fmt.Sprintf("queue %q is no longer consumed: what it, its retry buckets and its DLQ %q hold stays there", oq.Name, oq.DLQ),
			"stop its producers, let it and its retry buckets drain, deal with its DLQ, then delete the queues")
	}
	b.exchanges()
	b.bindings()
	b.alternates()
	b.alongside()
	return b.out
}

// message compares om with nm, the message of new that is om's: of its Go
// name, or of its wire type.
func (b *breaker) message(om, nm *schema.Message) {
	if om.Name != nm.Name {
		b.add(rules.MessageGoRenamed, om.Name, nm.Pos,
			fmt.Sprintf("message %s is renamed %s in Go; it still travels as %q, but its generated names change", om.Name, nm.Name, nm.Type),
			fmt.Sprintf("rename every use of %s's generated names", om.Name))
	}
	if e, why, fix := b.new.ProducedIn(nm); b.old.Produced(om) && e == nil {
		b.add(rules.ProducerRemoved, om.Name, nm.Pos,
			fmt.Sprintf("the producers New%sV… of message %s are no longer generated: %s", om.Name, om.Name, why),
			fmt.Sprintf("%s, or remove the calls of its New%sV… functions", fix, om.Name))
	}
	if om.Type != nm.Type {
		b.add(rules.WireTypeChanged, om.Name, nm.Pos,
			fmt.Sprintf("message %s travels as %q instead of %q: its queues no longer dispatch what producers send today", om.Name, nm.Type, om.Type),
			fmt.Sprintf("keep a message of type %q beside it until no producer sends it and no queue holds one", om.Type))
	}
	b.produced(om, nm)
	if om.Name != nm.Name {
		// Its versions' own Go types are renamed with it, which
		// MESSAGE-GO-RENAMED says once.
		b.renaming = regexp.MustCompile(`(^|[*\]])` + regexp.QuoteMeta(om.Name) + `(V[0-9])`)
		b.renamedTo = "${1}" + nm.Name + "${2}"
	}
	b.versions(om, nm)
	b.renaming = nil
	b.publish(om, nm)
}

type breaker struct {
	old, new *schema.File
	top      schema.Pos
	out      []Finding
	// run is the run of schemas b.old and b.new are of, and at the index
	// of b.new's revision in it. note, when set, is added to each finding:
	// b compares what moved to b.new from b.old, another schema's.
	run  *run
	at   int
	note string
	// added are the messages of new whose Go name old does not have, but
	// for those that moved there from another schema of the run, and
	// types new's shared types by name: each gathered once, not searched
	// for each message or field.
	added []*schema.Message
	types map[string]*schema.Field
	// shared are the shared object types whose fields were compared, by
	// name: each once, however many paths reach it.
	shared map[string]bool
	// renaming, while a message renamed in Go is compared, finds its old
	// name where it begins a Go type of its versions; renamedTo replaces it.
	renaming  *regexp.Regexp
	renamedTo string
}

func (b *breaker) add(r rules.Rule, subject string, at schema.Pos, msg, migration string) {
	b.out = append(b.out, Finding{
		Rule: r.ID, Category: r.Category, File: at.File, Line: at.Line, Column: at.Column,
		Subject: subject, Message: msg, Migration: migration, Note: b.note,
	})
}

func findVersion(m *schema.Message, n int) *schema.Version {
	i := slices.IndexFunc(m.Versions, func(v *schema.Version) bool { return v.Number == n })
	if i < 0 {
		return nil
	}
	return m.Versions[i]
}

func findField(fs []*schema.Field, name string) *schema.Field {
	i := slices.IndexFunc(fs, func(f *schema.Field) bool { return f.Name == name })
	if i < 0 {
		return nil
	}
	return fs[i]
}

// goRenamed finds the message of the new file, absent from the old by its
// Go name, that travels as om's wire type.
func (b *breaker) goRenamed(om *schema.Message) *schema.Message {
	for _, nm := range b.added {
		if nm.Type == om.Type {
			return nm
		}
	}
	return nil
}

// produced reports a message whose producers write it in another envelope
// profile: consumers on the old schema read it where it is not, and the
// generated New… functions lose or gain their message id parameter when the
// profile stops or starts carrying ids.
func (b *breaker) produced(om, nm *schema.Message) {
	oe, _, _ := b.old.ProducedIn(om)
	ne, _, _ := b.new.ProducedIn(nm)
	if oe == nil || ne == nil || sameReading(oe.Profile, ne.Profile) {
		return
	}
	msg := fmt.Sprintf("producers of %s write envelope %s (%s) instead of %s (%s): consumers on the old schema read what they send where it is not", om.Name, ne.Name, ne, oe.Name, oe)
	if oe.Profile.NoID != ne.Profile.NoID {
		msg += fmt.Sprintf(", and the generated New%sV… functions change their message id parameter", nm.Name)
	}
	b.add(rules.EnvelopeChanged, om.Name, nm.Pos, msg,
		"move the consumers to the new envelope first (a queue can read both), then the producers")
}

// renamed finds the message of the new file, absent from the old, whose
// versions are those of om under another name.
func (b *breaker) renamed(om *schema.Message) *schema.Message {
	for _, nm := range b.added {
		if slices.EqualFunc(om.Versions, nm.Versions, sameVersion) {
			return nm
		}
	}
	return nil
}

// sameVersion reports whether two versions, each of its own message, are
// alike in all but what follows the message's name or place: Go names,
// positions and examples.
func sameVersion(a, b *schema.Version) bool {
	l := likeness{}
	return a.Number == b.Number && slices.Equal(a.ContentTypes, b.ContentTypes) &&
		a.DeprecatedSince == b.DeprecatedSince && a.RemoveAfter == b.RemoveAfter &&
		slices.EqualFunc(a.Fields, b.Fields, l.field) && slices.EqualFunc(a.Headers, b.Headers, l.field)
}

// sameField reports whether two fields (or elements, or headers) are alike
// in all but their GoPath and position, which follow the message.
func sameField(a, b *schema.Field) bool { return likeness{}.field(a, b) }

// likeness compares fields, each pair of shared types of one name once:
// compared along each path, shared types nested in one another would take
// time exponential in their depth.
type likeness map[string]bool

func (l likeness) field(a, b *schema.Field) bool {
	if a == nil || b == nil {
		return a == b
	}
	alike := a.Name == b.Name && a.GoName == b.GoName && a.Type == b.Type && a.Int == b.Int &&
		a.Required == b.Required && a.Nullable == b.Nullable && a.Default == b.Default &&
		samePointee(a.MinLength, b.MinLength) && samePointee(a.MaxLength, b.MaxLength) &&
		samePointee(a.MinInt, b.MinInt) && samePointee(a.MaxInt, b.MaxInt) &&
		samePointee(a.MinNum, b.MinNum) && samePointee(a.MaxNum, b.MaxNum) &&
		samePointee(a.MinItems, b.MinItems) && samePointee(a.MaxItems, b.MaxItems) &&
		a.Pattern == b.Pattern && slices.Equal(a.Values, b.Values) && a.Named == b.Named
	if !alike {
		return false
	}
	if a.Named != "" {
		if same, ok := l[a.Named]; ok {
			return same
		}
		l[a.Named] = true // a type within itself is alike so far
	}
	same := slices.EqualFunc(a.Fields, b.Fields, l.field) && l.field(a.Items, b.Items)
	if a.Named != "" {
		l[a.Named] = same
	}
	return same
}

// samePointee reports whether a and b are both nil or point to equal values.
func samePointee[T comparable](a, b *T) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// versions compares the versions of om with those of nm, its revision.
func (b *breaker) versions(om, nm *schema.Message) {
	for _, ov := range om.Versions {
		nv := findVersion(nm, ov.Number)
		subject := fmt.Sprintf("%s.v%d", om.Name, ov.Number)
		if nv == nil {
			notice := fmt.Sprintf("deprecated since %s", ov.DeprecatedSince)
			if ov.DeprecatedSince == "" {
				notice = "never deprecated"
			}
			b.add(rules.VersionRemoved, subject, nm.Pos,
				fmt.Sprintf("%s version %d (%s) is removed with %s and Extract%s", om.Name, ov.Number, notice, ov.GoName, ov.GoName),
				fmt.Sprintf("deprecate it first (deprecated_since, remove_after), then remove every use of %s from your code", ov.GoName))
			continue
		}
		for _, ct := range ov.ContentTypes {
			if !slices.Contains(nv.ContentTypes, ct) {
				b.add(rules.ContentTypeRemoved, subject, nv.Pos,
					fmt.Sprintf("%s version %d is no longer accepted as %s", om.Name, ov.Number, ct),
					"keep the content type until no producer sends it and no queue holds such a message")
			}
		}
		b.fields(ov.Fields, nv.Fields, nv.Pos, subject+".")
		b.fields(ov.Headers, nv.Headers, nv.Pos, subject+".headers.")
		b.replay(ov, nv, subject)
	}
}

// publish compares where the two revisions of a message publish it: a
// publish removed takes its generated functions away; one that moves takes
// the messages of new producers away from the queues bound to the old place.
// A fixed key is compared version by version, as sent, so that writing
// {version} for a version's number changes nothing.
func (b *breaker) publish(om, nm *schema.Message) {
	op, np := om.Publish, nm.Publish
	switch {
	case op == nil:
		return
	case np == nil:
		b.add(rules.PublishRemoved, om.Name, nm.Pos,
			fmt.Sprintf("message %s no longer says where it is published: Publish%sV… are no longer generated", om.Name, om.Name),
			fmt.Sprintf("send what New%sV… build through a runtime.Sender yourself, and remove the calls of Publish%sV…", om.Name, om.Name))
		return
	}
	moved := op.Exchange != np.Exchange
	for _, ov := range om.Versions {
		if nv := findVersion(nm, ov.Number); nv != nil && !moved {
			o, n := op.RoutingKey, np.RoutingKey
			moved = o.For(ov) != n.For(nv) || o.Field != n.Field || o.Header != n.Header
		}
	}
	if moved {
		b.add(rules.PublishChanged, om.Name, np.Pos,
			fmt.Sprintf("message %s is published to %s instead of %s: queues bound to the old one stop receiving it from producers on the new schema", om.Name, destination(np), destination(op)),
			"bind the queues that consume it to the new exchange and key before any producer publishes there, and keep the old bindings until none publishes the old way")
	}
}

// destination says where pub publishes, as a reviewer reads it.
func destination(pub *schema.Publish) string {
	k := pub.RoutingKey
	if pub.Exchange == "" {
		return fmt.Sprintf("queue %s by the default exchange", k)
	}
	switch {
	case k.Field != "" || k.Header != "":
		return fmt.Sprintf("exchange %q with the routing key from its %s", pub.Exchange, k)
	case k.Fixed != "":
		return fmt.Sprintf("exchange %q with routing key %s", pub.Exchange, k)
	}
	return fmt.Sprintf("exchange %q", pub.Exchange)
}

// replay checks each example of one revision of a version against the other:
// an old example the new schema rejects stands for messages already queued,
// a new example the old schema rejects for what new producers will send.
func (b *breaker) replay(ov, nv *schema.Version, subject string) {
	for i, ex := range ov.Examples {
		if err := nv.CheckExample(ex.Body, ex.Headers); err != nil {
			b.add(rules.ExampleRejected, fmt.Sprintf("%s.examples.%d", subject, i+1), nv.Pos,
				fmt.Sprintf("example %d of the old %s (line %d there) fails the new schema: %v", i+1, subject, ex.Pos.Line, err),
				"accept what the example holds, or change it in a new version of the message")
		}
	}
	for i, ex := range nv.Examples {
		if err := ov.CheckExample(ex.Body, ex.Headers); err != nil {
			b.add(rules.ExampleRejectedByOld, fmt.Sprintf("%s.examples.%d", subject, i+1), ex.Pos,
				fmt.Sprintf("example %d of %s fails the old schema: %v", i+1, subject, err),
				"deploy every consumer of the new schema before any producer sends such a message")
		}
	}
}

// fields compares the fields of two objects (or two sets of headers); parent
// is where the new object is, prefix the subjects' prefix.
func (b *breaker) fields(old, new []*schema.Field, parent schema.Pos, prefix string) {
	for _, of := range old {
		subject := prefix + of.Name
		if nf := findField(new, of.Name); nf != nil {
			b.field(of, nf, subject)
			continue
		}
		if nf := renamedOnTheWire(old, new, of); nf != nil {
			b.add(rules.FieldWireRenamed, subject, nf.Pos,
				fmt.Sprintf("%s travels as %s now, its Go field %s kept: messages already queued, and producers on the old schema, send %s, which the new extractor ignores, and consumers on the old schema ignore %s", subject, nf.Name, of.GoName, of.Name, nf.Name),
				"keep the name it travels as; a new name is a new field, beside the old one or in a new version of the message")
			b.field(of, nf, subject)
			continue
		}
		b.add(rules.FieldRemoved, subject, parent,
			fmt.Sprintf("%s is removed with its Go field %s", subject, of.GoName),
			"remove every use of the Go field first")
		if of.Required {
			b.add(rules.FieldRequiredRemoved, subject, parent,
				fmt.Sprintf("required %s is removed: consumers on the old schema reject messages without it", subject),
				"deploy every consumer of the new schema before any producer stops sending it")
		}
	}
	for _, nf := range new {
		if nf.Required && findField(old, nf.Name) == nil {
			b.add(rules.FieldRequiredAdded, prefix+nf.Name, nf.Pos,
				fmt.Sprintf("new required %s: messages already queued, and producers on the old schema, lack it", prefix+nf.Name),
				"add it as optional, or in a new version of the message")
		}
	}
}

// renamedOnTheWire is the field of new, absent from old, that has of's Go
// name under another name as it travels: of renamed on the wire alone.
func renamedOnTheWire(old, new []*schema.Field, of *schema.Field) *schema.Field {
	i := slices.IndexFunc(new, func(nf *schema.Field) bool { return nf.GoName == of.GoName && findField(old, nf.Name) == nil })
	if i < 0 {
		return nil
	}
	return new[i]
}

// field compares one field present in both revisions, then its elements or
// fields.
func (b *breaker) field(of, nf *schema.Field, subject string) {
	if of.Type != nf.Type {
		b.add(rules.FieldTypeChanged, subject, nf.Pos,
			fmt.Sprintf("%s changes type from %s to %s", subject, of.TypeName(), nf.TypeName()),
			"add a field with a new name, or a new version of the message, and retire the old one")
		b.goType(of, nf, subject)
		return
	}
	b.goType(of, nf, subject)
	switch {
	case !of.Required && nf.Required:
		b.add(rules.FieldMadeRequired, subject, nf.Pos,
			fmt.Sprintf("%s becomes required: messages already queued, and producers on the old schema, may lack it", subject),
			"keep it optional, or require it in a new version of the message")
	case of.Required && !nf.Required:
		b.add(rules.FieldMadeOptional, subject, nf.Pos,
			fmt.Sprintf("%s becomes optional: consumers on the old schema reject messages without it", subject),
			"deploy every consumer of the new schema before any producer leaves it out")
	}
	// An optional field reads null as absent, nullable or not: only a
	// required one tells them apart (and a change of required says more).
	switch {
	case of.Required && nf.Required && of.Nullable && !nf.Nullable:
		b.add(rules.FieldNullRefused, subject, nf.Pos,
			fmt.Sprintf("%s no longer accepts null: messages already queued, and producers on the old schema, may send it", subject),
			"keep it nullable, or change it in a new version of the message")
	case of.Required && nf.Required && !of.Nullable && nf.Nullable:
		b.add(rules.FieldNullAllowed, subject, nf.Pos,
			fmt.Sprintf("%s accepts null: consumers on the old schema reject it", subject),
			"deploy every consumer of the new schema before any producer sends null")
	}
	// A default added or removed changes what an absent field reads as too:
	// no default is a value of its own. A field required in either revision
	// is present in the messages it matters for, or FIELD-MADE-REQUIRED says.
	if !of.Required && !nf.Required && of.Default != nf.Default {
		b.add(rules.DefaultChanged, subject, nf.Pos,
			fmt.Sprintf("%s changes its default from %s to %s: messages already queued without it read differently", subject, defaultName(of.Default), defaultName(nf.Default)),
			"keep the default, or change it in a new version of the message")
	}
	for _, r := range ranges(of, nf) {
		if r.narrower {
			b.add(rules.BoundNarrowed, subject, nf.Pos,
				fmt.Sprintf("%s narrows its %s from %s to %s: messages already queued, and producers on the old schema, may break it", subject, r.what, r.from, r.to),
				"keep the old bound, or narrow it in a new version of the message")
		}
		if r.wider {
			b.add(rules.BoundWidened, subject, nf.Pos,
				fmt.Sprintf("%s widens its %s from %s to %s: consumers on the old schema reject the values it newly allows", subject, r.what, r.from, r.to),
				"deploy every consumer of the new schema before any producer sends such values")
		}
	}
	if of.Type == schema.Enum && nf.Type == schema.Enum {
		b.enumConstants(of, nf, subject)
	}
	switch of.Type {
	case schema.Object:
		if of.Named != "" && nf.Named != "" {
			// Its fields are the type's, one Go struct for every use: they
			// are compared once, named by the type (the new one's, when it
			// was renamed). Along each path, the comparison would take time
			// exponential in how deeply shared types nest, and report each
			// change once per path.
			if pair := of.Named + " " + nf.Named; !b.shared[pair] {
				if b.shared == nil {
					b.shared = map[string]bool{}
				}
				b.shared[pair] = true
				b.fields(of.Fields, nf.Fields, b.typeAt(nf), nf.Named+".")
			}
			return
		}
		b.fields(of.Fields, nf.Fields, nf.Pos, subject+".")
	case schema.List, schema.Map:
		if of.Items != nil && nf.Items != nil {
			b.field(of.Items, nf.Items, subject+"[]")
		}
	}
}

// enumConstants reports the generated constants of of's values that nf
// drops: code naming them stops compiling. A shared enum's are reported
// once, however many fields use it.
func (b *breaker) enumConstants(of, nf *schema.Field, subject string) {
	if of.GoPath != nf.GoPath {
		return // the type itself is renamed: FIELD-GO-TYPE-CHANGED says so
	}
	if of.Named != "" {
		if b.shared[of.Named] {
			return
		}
		if b.shared == nil {
			b.shared = map[string]bool{}
		}
		b.shared[of.Named] = true
		subject = of.Named
	}
	// A value renamed as it travels may keep its constant (in_progress →
	// in-progress, both InProgress): BOUND-NARROWED tells of the wire. So a
	// constant is kept when some new value has its Go name.
	kept := make(map[string]bool, len(nf.Values))
	for _, w := range nf.Values {
		kept[schema.GoName(w)] = true
	}
	var gone []string
	for _, v := range of.Values {
		if name := schema.GoName(v); !kept[name] {
			gone = append(gone, of.GoPath+name)
		}
	}
	if len(gone) > 0 {
		// A constant's name stays whole: it is the Go name to find the uses
		// of, and is bounded with its enum value.
		b.add(rules.EnumConstantRemoved, subject, b.typeAt(nf),
			fmt.Sprintf("the generated constants %s of %s are removed with their values", listed(gone, 0), of.GoPath),
			"remove every use of them first")
	}
}

// maxListed bounds the names a finding lists, as schema's hints are bounded:
// an enum may hold, or drop, a thousand values at once.
const maxListed = 20

// maxQuoted is how long a value a finding quotes (in a list, or a pattern
// or a default) may be before it is shortened, as a hint shortens a name: an
// enum value may be 256 bytes, a pattern any length.
const maxQuoted = 40

// listed is names joined for a finding: at most maxListed of them, then how
// many more; each longer than width bytes is shortened to that, unless width
// is 0.
func listed(names []string, width int) string {
	some := make([]string, min(len(names), maxListed))
	for i := range some {
		some[i] = names[i]
		if width > 0 && len(some[i]) > width {
			some[i] = cut(some[i], width-len("...")) + "..."
		}
	}
	if len(names) <= maxListed {
		return strings.Join(some, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(some, ", "), len(names)-maxListed)
}

// quoted is s quoted for a finding, as a pattern or a string default is:
// when longer than maxQuoted bytes, shortened as listed shortens a value,
// the marker after the quotes, which hold what the schema wrote. A pattern
// may be 200,000 characters long.
func quoted(s string) string {
	if len(s) <= maxQuoted {
		return strconv.Quote(s)
	}
	return strconv.Quote(cut(s, maxQuoted-len("..."))) + "..."
}

// cut is the longest start of s, which is longer than n bytes, of at most n
// bytes that ends between two characters.
func cut(s string, n int) string {
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// typeAt is where f's type is written in the new schema: its definition
// under types for a shared one, which a change to it is about, else f itself.
func (b *breaker) typeAt(f *schema.Field) schema.Pos {
	if t := b.types[f.Named]; t != nil {
		return t.Pos
	}
	return f.Pos
}

// goType reports a change of the Go type of a field of the generated struct.
// An element has no Go field: the list or map that holds it reports the
// change of its own type.
func (b *breaker) goType(of, nf *schema.Field, subject string) {
	o, n := goType(of), goType(nf)
	if b.renaming != nil && b.renaming.ReplaceAllString(o, b.renamedTo) == n {
		return
	}
	if o != n && of.GoName != "" {
		b.add(rules.FieldGoTypeChanged, subject, nf.Pos,
			fmt.Sprintf("Go field %s changes type from %s to %s", of.GoName, o, n),
			"update the code that reads or sets it")
	}
}

// goType is the Go type of a field as the generator writes it, to tell when
// a change reaches the generated struct.
func goType(f *schema.Field) string {
	t := map[schema.Type]string{
		schema.String: "string", schema.Integer: string(f.Int), schema.Number: "float64",
		schema.Bool: "bool", schema.Time: "time.Time", schema.Bytes: "[]byte",
	}[f.Type]
	switch f.Type {
	case schema.Object, schema.Enum:
		t = f.GoPath
	case schema.List:
		t = "[]" + goType(f.Items)
	case schema.Map:
		t = "map[string]" + goType(f.Items)
	}
	if f.Pointer() {
		return "*" + t
	}
	return t
}

// defaultName shows a field's default, or none: a string (an enum's and a
// time's too) quoted, as a pattern is, so that none reads as part of the
// finding's own text.
func defaultName(v any) string {
	switch v := v.(type) {
	case nil:
		return "none"
	case string:
		return quoted(v)
	}
	return fmt.Sprint(v)
}

// change is how the values a field accepts moved under one of its limits.
type change struct {
	what            string
	narrower, wider bool
	// from and to show the limits, such as 1..64 characters and 1..32 characters.
	from, to string
}

// ranges compares the limits of two fields of one type: bounds, pattern and
// enum values.
func ranges(of, nf *schema.Field) []change {
	var out []change
	// A limit left out is the least or most the type holds: one written as
	// that (min_items: 0, max: 9223372036854775807 on an int64) changes
	// nothing.
	none := 0
	switch of.Type {
	case schema.String, schema.Bytes:
		out = append(out, compareRange(of, nf, cmp.Or(of.MinLength, &none), of.MaxLength, cmp.Or(nf.MinLength, &none), nf.MaxLength))
	case schema.Integer:
		olo, ohi := of.Int.Range()
		nlo, nhi := nf.Int.Range()
		out = append(out, compareRange(of, nf, cmp.Or(of.MinInt, &olo), cmp.Or(of.MaxInt, &ohi), cmp.Or(nf.MinInt, &nlo), cmp.Or(nf.MaxInt, &nhi)))
	case schema.Number:
		out = append(out, compareRange(of, nf, of.MinNum, of.MaxNum, nf.MinNum, nf.MaxNum))
	case schema.List, schema.Map:
		out = append(out, compareRange(of, nf, cmp.Or(of.MinItems, &none), of.MaxItems, cmp.Or(nf.MinItems, &none), nf.MaxItems))
	case schema.Enum:
		// Each revision's values are looked up in a set of the other's, not
		// scanned for each: an enum may hold 1,000 values.
		olds, news := valueSet(of.Values), valueSet(nf.Values)
		out = append(out, change{
			what:     "values",
			narrower: slices.ContainsFunc(of.Values, func(v string) bool { return !news[v] }),
			wider:    slices.ContainsFunc(nf.Values, func(v string) bool { return !olds[v] }),
			from:     listed(of.Values, maxQuoted),
			to:       listed(nf.Values, maxQuoted),
		})
	}
	// One pattern is not compared with another: any change may narrow.
	if of.Pattern != nf.Pattern {
		out = append(out, change{what: "pattern", narrower: nf.Pattern != "", wider: of.Pattern != "", from: quoted(of.Pattern), to: quoted(nf.Pattern)})
	}
	return out
}

// valueSet is the set of an enum's values.
func valueSet(values []string) map[string]bool {
	set := make(map[string]bool, len(values))
	for _, v := range values {
		set[v] = true
	}
	return set
}

// compareRange compares the inclusive ranges of fields of and nf; a nil
// limit is unbounded.
func compareRange[T int | int64 | float64](of, nf *schema.Field, oldMin, oldMax, newMin, newMax *T) change {
	// raised reports whether limit b cuts off more below it than a does;
	// lowered, more above it.
	raised := func(a, b *T) bool { return b != nil && (a == nil || *b > *a) }
	lowered := func(a, b *T) bool { return b != nil && (a == nil || *b < *a) }
	return change{
		what:     "bounds",
		narrower: raised(oldMin, newMin) || lowered(oldMax, newMax),
		wider:    raised(newMin, oldMin) || lowered(newMax, oldMax),
		from:     cmp.Or(bounds(of), "none"),
		to:       cmp.Or(bounds(nf), "none"),
	}
}

// bounds shows a field's length, range or item count as lo..hi and its
// unit, such as 1..64 characters or ..100; "" when it has none.
func bounds(f *schema.Field) string {
	l := f.Limits()
	if l.Lo == "" && l.Hi == "" {
		return ""
	}
	return l.Lo + ".." + l.Hi + l.Unit
}

// limitWord says a delivery limit: a count, or none.
func limitWord(n int) string {
	if n < 0 {
		return "none"
	}
	return strconv.Itoa(n)
}

func (b *breaker) queue(oq, nq *schema.Queue) {
	if oq.Type != nq.Type {
		migration := "consume a queue under a new name, or drain the queue, its retry buckets and DLQ and delete them before deploying"
		if oq.External && nq.External {
			migration = "the queue is its owner's: drain its retry buckets and DLQ, which Lily declares, and delete them before deploying"
		}
		b.add(rules.QueueTypeChanged, oq.Name, nq.Pos,
			fmt.Sprintf("queue %q changes type from %s to %s: RabbitMQ cannot change the type of it, its retry buckets or its DLQ %q", oq.Name, oq.Type, nq.Type, nq.DLQ), migration)
	}
	// A queue whose Lily arguments come from policies (its own, or another
	// team's) takes its DLQ and delivery limit from them: no redeclare is
	// refused, and another team's queue is never to be deleted.
	byPolicy := oq.ByPolicy && nq.ByPolicy
	if oq.DLQ != nq.DLQ {
		migration := "drain and delete the queue before deploying, or consume a queue under a new name; then deal with what the old DLQ holds"
		if byPolicy {
			migration = "apply the policies lilygen topology writes again as you deploy; then deal with what the old DLQ holds"
		}
		b.add(rules.DLQChanged, oq.Name, nq.Pos,
			fmt.Sprintf("queue %q dead-letters to %q instead of %q: its x-dead-letter-routing-key changes", oq.Name, nq.DLQ, oq.DLQ), migration)
	}
	if added := newBuckets(oq, nq); byPolicy && len(added) > 0 {
		// Lily declares a bucket of such a queue with its type alone: no
		// redeclare is refused, but the bucket is inert until its policy is.
		b.add(rules.RetryBucketAdded, oq.Name, nq.Pos,
			fmt.Sprintf("queue %q retries through %s, which it did not: declared with its type alone, each takes its TTL and its dead-lettering back to the queue from its policy, and until that is applied keeps what it gets", oq.Name, listed(added, 0)),
			"apply the policies lilygen topology writes before deploying")
	}
	if oq.Type == nq.Type && oq.DeliveryLimit != nq.DeliveryLimit {
		migration := "drain and delete the queue before deploying, or consume a queue under a new name"
		if byPolicy {
			migration = "apply the policies lilygen topology writes again as you deploy"
		}
		b.add(rules.DeliveryLimitChanged, oq.Name, nq.Pos,
			fmt.Sprintf("queue %q changes its delivery limit from %s to %s: its x-delivery-limit changes", oq.Name, limitWord(oq.DeliveryLimit), limitWord(nq.DeliveryLimit)), migration)
	}
	b.arguments(oq, nq)
	if oq.RequiresInbox() != nq.RequiresInbox() {
		b.add(rules.InboxRequirementChanged, oq.Name, nq.Pos,
			map[bool]string{
				true:  fmt.Sprintf("queue %q now requires the inbox: New%sConsumer gains an inbox parameter", oq.Name, nq.GoName),
				false: fmt.Sprintf("queue %q no longer requires the inbox: New%sConsumer loses its inbox parameter", oq.Name, nq.GoName),
			}[nq.RequiresInbox()],
			fmt.Sprintf("update the calls of New%sConsumer (and, when the inbox becomes required, apply the inbox's schema to the database first)", nq.GoName))
	}
	if nq.MaxBodyBytes < oq.MaxBodyBytes {
		b.add(rules.BodyLimitNarrowed, oq.Name, nq.Pos,
			fmt.Sprintf("queue %q lowers max_body_bytes from %d to %d: queued messages between the two go to the DLQ unread", oq.Name, oq.MaxBodyBytes, nq.MaxBodyBytes),
			"lower it only once no producer sends, and no queue holds, bodies above the new limit")
	}
	for _, oc := range oq.Consumes {
		i := slices.IndexFunc(nq.Consumes, func(nc schema.Consume) bool { return nc.Message.Type == oc.Message.Type })
		if i >= 0 && !sameReading(nq.Consumes[i].Envelope.Profile, oc.Envelope.Profile) {
			nc := nq.Consumes[i]
			b.add(rules.EnvelopeChanged, oq.Name+"/"+oc.Message.Name, nc.Pos,
				fmt.Sprintf("queue %q reads %s by envelope %s (%s) instead of %s (%s): what producers send today and what the queue holds is read where it is not", oq.Name, oc.Message.Name, nc.Envelope.Name, nc.Envelope, oc.Envelope.Name, oc.Envelope),
				"change the producers and the consumers' profile together only once the queue and its retry buckets are empty, or consume the new envelope from a new queue")
		}
	}
	for _, c := range oq.Consumes {
		for _, v := range c.Versions {
			// By wire type: what the queue dispatches, a Go rename aside.
			if !consumes(nq, ofType(c.Message.Type), v.Number) {
				b.add(rules.VersionUnconsumed, fmt.Sprintf("%s/%s.v%d", oq.Name, c.Message.Name, v.Number), nq.Pos,
					fmt.Sprintf("queue %q no longer accepts %s version %d: those in it and its retry buckets fail at dispatch and go to the DLQ", oq.Name, c.Message.Name, v.Number),
					fmt.Sprintf("stop producing %s version %d and let the queue and its retry buckets drain before deploying", c.Message.Name, v.Number))
			}
		}
	}
	for _, c := range nq.Consumes {
		for _, v := range c.Versions {
			// By wire type, as VERSION-UNCONSUMED: what consumers on the old
			// schema dispatch.
			if !consumes(oq, ofType(c.Message.Type), v.Number) {
				b.add(rules.VersionAdded, fmt.Sprintf("%s/%s.v%d", nq.Name, c.Message.Name, v.Number), c.Pos,
					fmt.Sprintf("queue %q accepts %s version %d, which consumers on the old schema fail at dispatch and send to the DLQ: a producer deployed before them loses what it sends", nq.Name, c.Message.Name, v.Number),
					fmt.Sprintf("deploy every consumer of queue %q before any producer sends %s version %d, then acknowledge", nq.Name, c.Message.Name, v.Number))
			}
			// By Go name: what the handler interface's methods are named.
			if !consumes(oq, named(c.Message.Name), v.Number) {
				b.add(rules.HandlerMethodAdded, fmt.Sprintf("%s/%s.v%d", nq.Name, c.Message.Name, v.Number), nq.Pos,
					fmt.Sprintf("%sHandler gains Handle%s: types implementing it stop compiling unless they embed Unimplemented%sHandler", nq.GoName, v.GoName, nq.GoName),
					fmt.Sprintf("implement Handle%s on the handler of queue %q (until then an embedded Unimplemented%sHandler sends such messages to the DLQ)", v.GoName, nq.Name, nq.GoName))
			}
		}
	}
}

// newBuckets lists the retry buckets of nq that oq, its older revision,
// did not have: a bucket is named after its delay.
func newBuckets(oq, nq *schema.Queue) []string {
	var out []string
	for _, d := range nq.Retry.Delays {
		if !slices.Contains(oq.Retry.Delays, d) {
			out = append(out, queue.RetryBucket(nq.Name, d))
		}
	}
	return out
}

// sameReading reports whether a queue reads messages of profiles a and b
// alike: a source is what Lily's producers write, and a reader takes each
// event's own.
func sameReading(a, b envelope.Profile) bool {
	a.Source, b.Source = "", ""
	return a == b
}

// consumes reports whether q accepts version n of a message that is.
func consumes(q *schema.Queue, is func(*schema.Message) bool, n int) bool {
	return slices.ContainsFunc(q.Consumes, func(c schema.Consume) bool {
		return is(c.Message) && slices.ContainsFunc(c.Versions, func(v *schema.Version) bool { return v.Number == n })
	})
}

// named is the message of Go name name, for consumes.
func named(name string) func(*schema.Message) bool {
	return func(m *schema.Message) bool { return m.Name == name }
}

// ofType is the message of wire type t, for consumes.
func ofType(t string) func(*schema.Message) bool {
	return func(m *schema.Message) bool { return m.Type == t }
}
