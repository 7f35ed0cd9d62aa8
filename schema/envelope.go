package schema

import (
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/lily-mq/lily/envelope"
)

// LilyEnvelope names Lily's own envelope profile, the default.
const LilyEnvelope = "lily"

// Envelope is a named envelope profile: where one producer's messages carry
// their type, version, id and time.
type Envelope struct {
	Name    string
	Pos     Pos
	Profile envelope.Profile
}

// lilyEnvelope is the profile a message takes when neither it nor its queue
// names one.
var lilyEnvelope = &Envelope{Name: LilyEnvelope, Profile: envelope.Profile{Kind: envelope.Lily}}

var (
	envelopeKinds  = []string{string(envelope.CloudEvents), string(envelope.Headers)}
	versionSources = []string{"header", "attribute", "content_type_parameter", "type_suffix", "fixed"}
)

// envelopes reads one file's envelopes section.
func (p *parser) envelopes(n *yaml.Node) []*Envelope {
	var out []*Envelope
	p.entries(n, "envelopes", func(k, v *yaml.Node) {
		if k.Value == LilyEnvelope {
			p.errorf(k, RuleEnvelope, "envelope %q is Lily's own profile and cannot be redefined", k.Value)
			return
		}
		if len(k.Value) > maxName {
			// A limit set after lilygen accepted such names: the
			// profile is read all the same.
			p.limitf(k, RuleName, "envelope name %q is %d bytes: at most %d", shorten(k.Value), len(k.Value), maxName)
		}
		if !validName(k.Value, "_-.") {
			p.errorf(k, RuleName, "envelope name %q: want an ASCII letter, then letters, digits, _ - or .", overLong(k.Value))
			return
		}
		if first, ok := p.known.envelopes[k.Value]; ok {
			p.errorf(k, RuleDuplicate, "envelope %q is already declared (%s)", overLong(k.Value), p.where(first.Pos))
			return
		}
		if e := p.envelope(k, v); e != nil {
			out = append(out, e)
			p.known.envelopes[e.Name] = e
		}
	})
	return out
}

// envelope reads one profile: kind, and where the type, id and version come
// from.
func (p *parser) envelope(k, v *yaml.Node) *Envelope {
	e := &Envelope{Name: k.Value, Pos: p.pos(k)}
	what := "envelope " + overLong(k.Value)
	m := p.object(v, what, "kind", "type", "id", "version", "source")
	if m == nil {
		return nil
	}
	kind, ok := m["kind"]
	if !ok {
		p.errorf(k, RuleMissingKey, "%s has no kind", what).Hint = "kind: cloudevents or kind: headers"
		return nil
	}
	s, ok := p.str(kind.v, "kind")
	if !ok {
		return nil
	}
	if !slices.Contains(envelopeKinds, s) {
		p.nearest(p.errorf(kind.v, RuleEnvelope, "unknown envelope kind %q", shorten(s)), s, envelopeKinds, "cloudevents or headers")
		return nil
	}
	e.Profile.Kind = envelope.Kind(s)
	ce := e.Profile.Kind == envelope.CloudEvents
	if t, ok := m["type"]; ok {
		if ce {
			p.errorf(t.k, RuleEnvelope, "a CloudEvent's type is its type attribute: %s takes no type", what)
		} else if h, ok := p.sourceHeader(t.v, "type"); ok {
			e.Profile.TypeHeader = h
		}
	}
	if id, ok := m["id"]; ok {
		switch {
		case ce:
			p.errorf(id.k, RuleEnvelope, "a CloudEvent is identified by its source and id attributes: %s takes no id", what)
		case id.v.Kind == yaml.ScalarNode && id.v.Value == "none":
			e.Profile.NoID = true
		default:
			if h, ok := p.sourceHeader(id.v, "id"); ok {
				e.Profile.IDHeader = h
			}
		}
	}
	if ver, ok := m["version"]; ok {
		e.Profile.Version = p.versionSource(ver.v, ce)
	}
	if src, ok := m["source"]; ok {
		if !ce {
			p.errorf(src.k, RuleEnvelope, "source is a CloudEvent's attribute: %s takes none", what)
		} else {
			e.Profile.Source = p.eventSource(src.v)
		}
	}
	// One header cannot carry two of type, id and version: a producer would
	// write one over the other, and its reader misread the rest.
	pr := e.Profile
	if h := pr.TypeHeader; h != "" && (h == pr.IDHeader || h == pr.Version.Header) || pr.IDHeader != "" && pr.IDHeader == pr.Version.Header {
		p.errorf(k, RuleEnvelope, "%s reads two of its type, id and version from one header", what).
			Hint = "name a header of its own for each"
	}
	return e
}

// maxSourceBytes is the longest source the guard reads: an id's bound.
const maxSourceBytes = 128

// eventSource reads the source attribute of the events Lily's producers
// write: a URI-reference the guard accepts, printable ASCII without spaces.
func (p *parser) eventSource(n *yaml.Node) string {
	s, ok := p.str(n, "source")
	if !ok {
		return ""
	}
	switch {
	case s == "":
		p.errorf(n, RuleEmpty, "source: want a URI-reference, such as https://payments.acme.example/api")
	case len(s) > maxSourceBytes:
		p.errorf(n, RuleEnvelope, "source %q is %d bytes: the guard reads at most %d", shorten(s), len(s), maxSourceBytes)
	case strings.ContainsFunc(s, func(r rune) bool { return !uriChar(r) }):
		p.errorf(n, RuleEnvelope, "source %q holds a character a URI-reference cannot", shorten(s)).
			Hint = "percent-encode it, such as %20 for a space"
	default:
		var err *url.Error
		if _, e := url.Parse(s); errors.As(e, &err) {
			p.errorf(n, RuleEnvelope, "source %q is not a URI-reference: %v", shorten(s), err.Err)
			return ""
		}
		return s
	}
	return ""
}

// uriChar reports whether r may appear in a URI-reference (RFC 3986):
// unreserved, reserved or '%'.
func uriChar(r rune) bool {
	return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || strings.ContainsRune("-._~:/?#[]@!$&'()*+,;=%", r)
}

// sourceHeader reads {header: name}, or the word naming the AMQP property
// that is the default ("" then).
func (p *parser) sourceHeader(n *yaml.Node, what string) (string, bool) {
	property := map[string]string{"type": "type", "id": "message_id"}[what]
	if n.Kind == yaml.ScalarNode && n.Value == property {
		return "", true
	}
	m := p.object(n, what, "header")
	if m == nil {
		return "", false
	}
	h, ok := m["header"]
	if !ok {
		p.errorf(n, RuleMissingKey, "%s: want {header: <name>}", what)
		return "", false
	}
	s, ok := p.str(h.v, "header")
	if ok && (s == "" || !envelope.CarriedHeader(s)) {
		p.errorf(h.v, RuleEnvelope, "%s header %q: name a header of the producer's, %s", what, shorten(s), notCarried)
		return "", false
	}
	if ok && !p.headerKey(h.v, what+" header", s) {
		return "", false
	}
	if ok {
		p.printableHeader(h.v, what+" header", s)
	}
	return s, ok
}

// printableHeader reports whether the header an envelope keeps something in
// has a printable name (printableText), and says so when it has not. A limit
// set after lilygen accepted such names: the profile is read all the same.
func (p *parser) printableHeader(n *yaml.Node, what, name string) bool {
	if printableText(name) {
		return true
	}
	p.limitf(n, RuleEnvelope, "%s %q holds a character that is not printable: %s", what, shorten(name), unprintableHeader)
	return false
}

// unprintableHeader says why an envelope's header must have a printable name.
const unprintableHeader = "a control character, a bidi or other format character such as a byte order mark, a space other than U+0020 or a byte that is not UTF-8 would hide in review, in logs and in the generated code, and no producer's header needs one"

// maxAttributeName is the longest CloudEvents attribute name: the
// specification asks for at most 20 characters, of a-z and 0-9.
const maxAttributeName = 20

// attributeName reports whether s is a CloudEvents attribute name as the
// specification has it: 1 to maxAttributeName lower-case ASCII letters and
// digits.
func attributeName(s string) bool {
	return s != "" && len(s) <= maxAttributeName && strings.Trim(s, "abcdefghijklmnopqrstuvwxyz0123456789") == ""
}

// headerKey reports whether a header an envelope keeps something in has a
// name a consumer's guard takes, and says so when it has not: every message
// in the profile would be poison.
// notCarried says which headers cannot carry a message's identity, version
// or ordering key (envelope.CarriedHeader), in an error naming one.
const notCarried = "not empty, x-lily-…, the broker's x-death and counts, or CC/BCC, which a retry copy does not carry as they came"

func (p *parser) headerKey(n *yaml.Node, what, name string) bool {
	if len(name) <= envelope.MaxHeaderKeyBytes {
		return true
	}
	p.errorf(n, RuleEnvelope, "%s %q is %d bytes: at most %d, the longest key a consumer's guard accepts", what, shorten(name), len(name), envelope.MaxHeaderKeyBytes)
	return false
}

// versionSource reads where a profile's version comes from: one of
// versionSources.
func (p *parser) versionSource(n *yaml.Node, ce bool) envelope.Version {
	var v envelope.Version
	m := p.object(n, "version", versionSources...)
	if m == nil {
		return v
	}
	if len(m) != 1 {
		p.errorf(n, RuleEnvelope, "version comes from one place: want one of %s", strings.Join(versionSources, ", "))
		return v
	}
	for key, e := range m {
		if key == "fixed" {
			v.Fixed, _ = p.intRange(e.v, "fixed", 1, envelope.MaxVersion)
			continue
		}
		s, ok := p.str(e.v, key)
		if !ok {
			continue
		}
		if s == "" {
			p.errorf(e.v, RuleEmpty, "version %s: want a name", key)
			continue
		}
		switch key {
		case "header":
			if ce {
				p.errorf(e.k, RuleEnvelope, "a CloudEvent carries its version in an attribute: use attribute, not header")
			}
			if s == "" || !envelope.CarriedHeader(s) {
				p.errorf(e.v, RuleEnvelope, "version header %q: name a header of the producer's, %s", shorten(s), notCarried)
			}
			if p.headerKey(e.v, "version header", s) {
				p.printableHeader(e.v, "version header", s)
			}
			v.Header = s
		case "attribute":
			if !ce {
				p.errorf(e.k, RuleEnvelope, "attribute names a CloudEvents extension attribute: use header in a headers profile")
			}
			switch {
			case !attributeName(s):
				// Carried in binary mode as the header
				// cloudEvents_<attribute>, which within 20 characters stays
				// within the key a consumer's guard accepts. A limit set
				// after lilygen accepted such names: the profile is read
				// all the same.
				p.limitf(e.v, RuleEnvelope, "version attribute %q is not a CloudEvents attribute name: 1 to %d lower-case ASCII letters and digits, such as dataversion", shorten(s), maxAttributeName)
			case slices.Contains(envelope.CloudEventMembers, s):
				p.errorf(e.v, RuleEnvelope, "version attribute %q is one of a CloudEvent's own: name an extension attribute, such as dataversion", shorten(s))
			}
			v.Attribute = s
		case "content_type_parameter":
			// A consumer's guard finds it by cutting the content type at
			// ; and =, and trims the spaces around it.
			if !envelope.ParameterName(s) {
				p.errorf(e.v, RuleEnvelope, "content_type_parameter %q is not an RFC 9110 token of at most %d bytes: it is longer, or holds a space, a character other than printable ASCII, or one of %s, and a consumer would never find it in the content type", shorten(s), envelope.MaxParameterName, envelope.ParameterSeparators)
			}
			v.ContentTypeParameter = s
		case "type_suffix":
			switch {
			case !envelope.TypeText(s):
				// It travels in the type, which a consumer's guard takes as
				// printable ASCII only.
				p.errorf(e.v, RuleEnvelope, "type_suffix %q is not printable ASCII, as a type must be", shorten(s))
			case strings.Trim(s, "0123456789") == "":
				// The version's number follows it: found again inside the
				// number, it would split the type in the wrong place.
				p.errorf(e.v, RuleEnvelope, "type_suffix %q is digits alone, which the version's number could hold too: give it a character other than a digit, such as .v", shorten(s))
			}
			v.TypeSuffix = s
		}
	}
	return v
}

// envelopeRef reads a message's or queue's envelope: the name of a profile.
func (p *parser) envelopeRef(n *yaml.Node, all []*Envelope) *Envelope {
	s, ok := p.str(n, "envelope")
	if !ok {
		return nil
	}
	if s == LilyEnvelope {
		return lilyEnvelope
	}
	e, ok := p.known.envelopes[s]
	if !ok {
		// The names only for a problem listed: past maxErrors, gathering
		// them for each would take time of the square of their number.
		if bad := p.errorf(n, RuleUnknownRef, "unknown envelope %q", shorten(s)); bad.listed() {
			names := []string{LilyEnvelope}
			for _, e := range all {
				names = append(names, e.Name)
			}
			p.nearest(bad, s, names, "envelopes: "+listed(names))
		}
		return nil
	}
	return e
}

// wireType reads a message's type as it travels.
func (p *parser) wireType(n *yaml.Node) (string, bool) {
	s, ok := p.str(n, "type")
	if !ok {
		return "", false
	}
	if !isWireType(s) {
		p.errorf(n, RuleName, "type %q is not 1 to %d characters of printable ASCII", shorten(s), envelope.MaxTypeBytes)
		return "", false
	}
	return s, true
}

// isWireType reports whether s may travel as a message's type.
func isWireType(s string) bool {
	return s != "" && len(s) <= envelope.MaxTypeBytes && envelope.TypeText(s)
}

// ownHeaders reports the typed headers of m's versions that are where
// envelope e keeps the message's type, id or version, or a CloudEvent's
// attributes: the producer sets those, as the envelope says.
func (p *parser) ownHeaders(e *Envelope, m *Message) {
	pr := e.Profile
	if suffix := pr.Version.TypeSuffix; suffix != "" && len(m.Versions) > 0 {
		// The type travels with the suffix and the version's number.
		last := m.Versions[len(m.Versions)-1].Number
		if n := len(m.Type) + len(suffix) + len(strconv.Itoa(last)); n > envelope.MaxTypeBytes {
			p.errorAt(m.Pos, RuleEnvelope, "%s travels in envelope %s as type %s%s%d, %d bytes: at most %d, the longest type a consumer's guard accepts",
				m.Name, e.Name, shorten(m.Type), suffix, last, n, envelope.MaxTypeBytes)
		}
	}
	if n := pr.Version.Fixed; n != 0 && len(m.Versions) > 0 && !slices.ContainsFunc(m.Versions, func(v *Version) bool { return v.Number == n }) {
		p.errorAt(m.Pos, RuleEnvelope, "%s is read in envelope %s, whose messages are all version %d, and it has no version %d: every delivery would be dead-lettered as unsupported",
			m.Name, e.Name, n, n)
	}
	for _, v := range m.Versions {
		for _, h := range v.Headers {
			if pr.ReservedHeader(h.Name) {
				p.errorAt(h.Pos, RuleEnvelope, "typed header %q of %s is one envelope %s keeps for the message itself", h.Name, v.GoName, e.Name).
					Hint = "read it from the delivery (d.MessageID(), d.Type(), d.Version(), d.Header), not as a typed header"
			}
		}
	}
}

// exampleHeaders reports the headers of examples that their message's
// envelope keeps for itself, by the rule ownHeaders holds typed headers to:
// the producer writes them, or a reader would take them for the envelope's,
// and the AsyncAPI document shows each example with the envelope's headers,
// where a second one would be a duplicate key.
func (p *parser) exampleHeaders(f *File) {
	for _, m := range f.Messages {
		for _, e := range f.EnvelopesOf(m) {
			for _, v := range m.Versions {
				for i := range v.Examples {
					p.exampleHeadersIn(e, v, &v.Examples[i])
				}
			}
		}
	}
}

// exampleHeadersIn reports the headers of example ex of v that envelope e
// keeps, in name order.
func (p *parser) exampleHeadersIn(e *Envelope, v *Version, ex *Example) {
	for _, h := range slices.Sorted(maps.Keys(ex.Headers)) {
		if e.Profile.ReservedHeader(h) {
			p.errorAt(ex.Pos, RuleExample, "an example of %s sets header %q, which envelope %s keeps for the message itself", v.GoName, h, e.Name).
				Hint = "leave it out: it is the envelope's, and the AsyncAPI document shows the envelope's headers with each example"
		}
	}
}

// consumedEnvelopes checks the profiles of what q consumes: the runtime must
// tell each delivery's profile by its marks, and an inbox needs an id.
func (p *parser) consumedEnvelopes(q *Queue) {
	var cloudEvents, property *Envelope
	byHeader := map[string]*Envelope{}
	clash := func(c Consume, first *Envelope, marks string) {
		p.errorAt(c.Pos, RuleEnvelope, "queue %q consumes %s in envelope %s and another message in envelope %s; both %s, so a delivery could not be told apart",
			q.Name, c.Message.Name, c.Envelope.Name, first.Name, marks).Hint = "consume them from different queues, or use one profile for both"
	}
	for i := range q.Consumes {
		c := &q.Consumes[i]
		e, pr := c.Envelope, c.Envelope.Profile
		if e != c.Message.Envelope {
			p.ownHeaders(e, c.Message) // a message's own profile is checked with it
		}
		switch {
		case pr.Kind == envelope.CloudEvents:
			if cloudEvents != nil && cloudEvents != e {
				clash(*c, cloudEvents, "are CloudEvents")
			}
			cloudEvents = e
		case pr.TypeHeader == "":
			if property != nil && property != e {
				clash(*c, property, "read the AMQP type property")
			}
			property = e
		default:
			if first, ok := byHeader[pr.TypeHeader]; ok && first != e {
				clash(*c, first, "read the type from header "+pr.TypeHeader)
			}
			byHeader[pr.TypeHeader] = e
		}
		if !pr.NoID {
			continue
		}
		if c.Inbox == InboxRequired {
			p.errorAt(c.Pos, RuleInbox, "queue %q requires the inbox for %s, but envelope %s has no message id (id: none) to claim it by", q.Name, c.Message.Name, e.Name).
				Hint = "take the id from message_id or a header the producer sets (Spring AMQP sets message_id once its message converter has setCreateMessageIds(true)), or set inbox: none"
		}
		// Optional: a message without an id is never claimed.
		c.Inbox = InboxNone
	}
	p.foreignMarks(q)
	if q.Ordering != nil && q.Ordering.Field != "" && cloudEvents != nil {
		p.errorAt(q.Consumes[0].Pos, RuleOrdering, "queue %q orders by field %q, but a structured CloudEvent's body is the event, not the payload", q.Name, q.Ordering.Field).
			Hint = "order by a header a binary-mode event carries, such as cloudEvents_subject; structured events carry no headers, and share one lane"
	}
}

// foreignMarks reports the typed headers of each message q consumes that
// another profile q consumes keeps for the message itself. The runtime
// tells a delivery's profile by its marks, a CloudEvent's attribute headers
// and a header-mapped profile's type header before the type property, so a
// message bearing such a header could pass the guard as a message of the
// other profile, and reach its handler: a Lily message whose typed header
// TypeId says com.acme.A, read as A by a profile with type: {header:
// TypeId}. Every version counts, not the queue's alone: the guard reads a
// delivery before its version picks a handler. The id and version headers
// count too: a producer of the message sets them as the other profile's
// producers do.
func (p *parser) foreignMarks(q *Queue) {
	first := map[*Envelope]*Message{} // the first message q reads in each profile
	var profiles []*Envelope
	for _, c := range q.Consumes {
		if _, ok := first[c.Envelope]; !ok {
			first[c.Envelope] = c.Message
			profiles = append(profiles, c.Envelope)
		}
	}
	if len(profiles) < 2 {
		return
	}
	for _, c := range q.Consumes {
		for _, e := range profiles {
			if e == c.Envelope {
				continue
			}
			for _, v := range c.Message.Versions {
				for _, h := range v.Headers {
					// One its own profile keeps is refused already (ownHeaders).
					role := markOf(e.Profile, h.Name)
					if role == "" || c.Envelope.Profile.ReservedHeader(h.Name) {
						continue
					}
					p.errorAt(h.Pos, RuleEnvelope, "typed header %q of %s (envelope %s) is what envelope %s reads as %s, and queue %q reads %s in envelope %s: a delivery of %s bearing it could be read as a message of envelope %s",
						h.Name, v.GoName, c.Envelope.Name, e.Name, role, q.Name, first[e].Name, e.Name, c.Message.Name, e.Name).
						Hint = "rename the header, or consume the two from different queues"
				}
			}
		}
	}
}

// markOf says which of profile pr's own headers name is, as a reader
// tells a delivery's profile by them ("" for none): a CloudEvent's attribute
// header, or the type, id or version header of a header-mapped profile.
func markOf(pr envelope.Profile, name string) string {
	switch {
	case pr.Kind == envelope.CloudEvents && (strings.HasPrefix(name, envelope.EventPrefix) || strings.HasPrefix(name, envelope.EventPrefixOld)):
		return "a CloudEvents attribute"
	case pr.Kind == envelope.CloudEvents:
		return ""
	case name == pr.TypeHeader:
		return "its type header"
	case name == pr.IDHeader:
		return "its id header"
	case name == pr.Version.Header:
		return "its version header"
	}
	return ""
}

// String names a profile as a reviewer reads it.
func (e *Envelope) String() string {
	pr := e.Profile
	if pr.Kind == envelope.Lily {
		return LilyEnvelope
	}
	parts := []string{string(pr.Kind)}
	if pr.TypeHeader != "" {
		parts = append(parts, "type from header "+pr.TypeHeader)
	}
	switch {
	case pr.NoID:
		parts = append(parts, "no id")
	case pr.IDHeader != "":
		parts = append(parts, "id from header "+pr.IDHeader)
	}
	v := pr.Version
	switch {
	case v.Header != "":
		parts = append(parts, "version from header "+v.Header)
	case v.Attribute != "":
		parts = append(parts, "version from attribute "+v.Attribute)
	case v.ContentTypeParameter != "":
		parts = append(parts, "version from content type parameter "+v.ContentTypeParameter)
	case v.TypeSuffix != "":
		parts = append(parts, fmt.Sprintf("version after %q in the type", v.TypeSuffix))
	case v.Fixed != 0:
		parts = append(parts, fmt.Sprintf("version %d always", v.Fixed))
	default:
		parts = append(parts, "version from header x-lily-version")
	}
	if pr.Source != "" {
		parts = append(parts, "source "+pr.Source)
	}
	return strings.Join(parts, ", ")
}
