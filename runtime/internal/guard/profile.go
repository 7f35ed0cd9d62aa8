package guard

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/wire"
)

// Reader reads a queue's envelopes by the profiles of the messages it
// consumes. It tries the profiles whose marks a delivery bears (see package
// envelope), in order, and takes the first that reads it and finds one of
// its own messages' types.
type Reader struct {
	// property reads the AMQP type property: Lily's profile, or a
	// header-mapped one with no type header; nil when no profile does.
	property *reading
	// headers are the header-mapped profiles with a type header.
	headers []*reading
	// cloudEvents is the queue's CloudEvents profile, nil when none.
	cloudEvents *reading
	// owners maps each wire type to the profile of its message; nil for a
	// queue whose spec names no messages.
	owners map[string]*reading
	// eventFields are the members of a structured CloudEvent it reads.
	eventFields *wire.JSONFields
	// Identity are the headers that say whose a delivery is, by r's
	// profiles: a poison copy keeps them, sanitized.
	Identity []string
	// Marks are every header r reads a delivery's envelope from: Identity,
	// a CloudEvent's time and the version headers. A handoff copy keeps them
	// as the delivery carried them, or its next attempt would be read
	// otherwise.
	Marks []string
}

// reading is one profile and the wire types of its messages.
type reading struct {
	profile envelope.Profile
	types   map[string]bool
}

// Lily reads Lily's own profile alone: a queue whose spec names no messages.
var Lily = &Reader{property: &reading{profile: envelope.Profile{Kind: envelope.Lily}}}

// NewReader returns the reader of msgs' profiles, or an error when two of
// them could not be told apart; no messages mean Lily's profile alone.
func NewReader(msgs []envelope.Message) (*Reader, error) {
	if len(msgs) == 0 {
		return Lily, nil
	}
	r := &Reader{owners: make(map[string]*reading, len(msgs))}
	var errs []error
	for _, m := range msgs {
		p := m.Profile
		if p.Kind == "" {
			p.Kind = envelope.Lily
		}
		if err := checkProfile(p); err != nil {
			errs = append(errs, fmt.Errorf("message %q: %w", m.Type, err))
			continue
		}
		rd, err := r.add(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("message %q: %w", m.Type, err))
			continue
		}
		rd.types[m.Type] = true
		r.owners[m.Type] = rd
	}
	if r.cloudEvents != nil {
		r.eventFields = newEventFields(r.cloudEvents.profile.Version.Attribute)
		for _, a := range []string{"specversion", "id", "source", "type"} {
			r.Identity = append(r.Identity, EventPrefix+a, eventPrefixOld+a)
		}
	}
	for _, c := range r.headers {
		r.Identity = append(r.Identity, c.profile.TypeHeader)
	}
	for _, c := range append(slices.Clip(r.headers), r.property) {
		if c != nil && c.profile.IDHeader != "" && !slices.Contains(r.Identity, c.profile.IDHeader) {
			r.Identity = append(r.Identity, c.profile.IDHeader)
		}
	}
	r.Marks = slices.Clone(r.Identity)
	if r.cloudEvents != nil {
		// Read too: a time that does not parse makes the event poison.
		r.Marks = append(r.Marks, EventPrefix+"time", eventPrefixOld+"time")
	}
	for _, c := range append(slices.Clip(r.headers), r.property, r.cloudEvents) {
		switch {
		case c == nil:
		case c.profile.Version.Header != "":
			r.Marks = append(r.Marks, c.profile.Version.Header)
		case c.profile.Version.Attribute != "":
			r.Marks = append(r.Marks, EventPrefix+c.profile.Version.Attribute, eventPrefixOld+c.profile.Version.Attribute)
		}
	}
	return r, errors.Join(errs...)
}

// add returns the reading of p, new unless r reads p already; two
// different profiles with the same marks cannot be told apart.
func (r *Reader) add(p envelope.Profile) (*reading, error) {
	fresh := &reading{profile: p, types: map[string]bool{}}
	clash := func(q *reading, marks string) (*reading, error) {
		// A source is what producers write; readers take each event's own.
		a, b := q.profile, p
		a.Source, b.Source = "", ""
		if a == b {
			return q, nil
		}
		return nil, fmt.Errorf("its envelope profile and another both %s: a delivery could not be told apart", marks)
	}
	switch {
	case p.Kind == envelope.CloudEvents:
		if r.cloudEvents != nil {
			return clash(r.cloudEvents, "are CloudEvents")
		}
		r.cloudEvents = fresh
	case p.TypeHeader == "":
		if r.property != nil {
			return clash(r.property, "read the type property")
		}
		r.property = fresh
	default:
		for _, q := range r.headers {
			if q.profile.TypeHeader == p.TypeHeader {
				return clash(q, "read the type from header "+p.TypeHeader)
			}
		}
		r.headers = append(r.headers, fresh)
	}
	return fresh, nil
}

// checkProfile refuses a profile the reader could not follow.
func checkProfile(p envelope.Profile) error {
	v := p.Version
	set := 0
	for _, s := range []string{v.Header, v.Attribute, v.ContentTypeParameter, v.TypeSuffix} {
		if s != "" {
			set++
		}
	}
	if v.Fixed != 0 {
		set++
	}
	switch {
	case p.Kind != envelope.Lily && p.Kind != envelope.CloudEvents && p.Kind != envelope.Headers:
		return fmt.Errorf("unknown envelope kind %q", p.Kind)
	case p.Kind == envelope.Lily && (p != envelope.Profile{Kind: envelope.Lily}):
		return errors.New("the lily profile takes no settings")
	case set > 1:
		return errors.New("its version comes from more than one place")
	case v.Fixed < 0 || v.Fixed > maxVersion:
		return fmt.Errorf("fixed version %d out of range 1..%d", v.Fixed, maxVersion)
	case v.Attribute != "" && p.Kind != envelope.CloudEvents:
		return errors.New("a version attribute needs a CloudEvents profile")
	case slices.Contains(envelope.CloudEventMembers, v.Attribute):
		return fmt.Errorf("version attribute %q is a CloudEvent's own", v.Attribute)
	case p.Kind == envelope.CloudEvents && (p.TypeHeader != "" || p.IDHeader != "" || p.NoID || v.Header != ""):
		return errors.New("a CloudEvents profile reads its type, id and version from the event's attributes")
	case p.NoID && p.IDHeader != "":
		return errors.New("an id header and no id")
	case p.Source != "" && p.Kind != envelope.CloudEvents:
		return errors.New("a source needs a CloudEvents profile")
	case p.TypeHeader != "" && (p.TypeHeader == p.IDHeader || p.TypeHeader == v.Header) || p.IDHeader != "" && p.IDHeader == v.Header:
		return errors.New("two of its type, id and version headers are one header")
	case v.TypeSuffix != "" && checkType("type suffix", v.TypeSuffix) != "":
		return errors.New(checkType("type suffix", v.TypeSuffix))
	case v.TypeSuffix != "" && strings.Trim(v.TypeSuffix, "0123456789") == "":
		return fmt.Errorf("type suffix %q is digits alone, which a version's digits could hold", v.TypeSuffix)
	case v.ContentTypeParameter != "" && !envelope.ParameterName(v.ContentTypeParameter):
		return fmt.Errorf("content type parameter %q is not a token of at most %d bytes", v.ContentTypeParameter, envelope.MaxParameterName)
	}
	for _, h := range []string{p.TypeHeader, p.IDHeader, v.Header} {
		if !envelope.CarriedHeader(h) {
			return fmt.Errorf("header %s is not one a copy carries as it came (x-lily-…, the broker's record, CC or BCC)", h)
		}
	}
	return nil
}

// read reads d's envelope by r's profiles: those whose marks d bears, in
// order (a CloudEvent's content type or specversion header, a type header,
// then the type property). The first that reads d and finds a type of its
// own messages wins. One that finds another profile's type has misread d;
// one that finds a type of no message is kept in case no other fits, and
// dispatch then calls it unsupported. With none, the first reason stands,
// unless d bears no CloudEvents or type header mark and its type property
// names a message whose type header it lacks (see misplaced).
func (r *Reader) read(d *amqp.Delivery, lim Limits) (*Envelope, string) {
	if r.cloudEvents == nil && len(r.headers) == 0 {
		// Only the type property: no marks to weigh.
		return r.readWith(d, r.property, false, lim)
	}
	var first string
	var unknown *Envelope
	marked := false // a CloudEvents or header-mapped profile was tried
	try := func(c *reading, structured bool) *Envelope {
		marked = marked || c != r.property
		env, reason := r.readWith(d, c, structured, lim)
		switch {
		case reason != "":
			first = cmp.Or(first, reason)
		case c.types[env.Type]:
			return env
		case r.owners[env.Type] != nil:
			first = cmp.Or(first, "type "+quote(env.Type)+" read by a profile that does not carry it")
		case unknown == nil:
			unknown = env
		}
		return nil
	}
	if c := r.cloudEvents; c != nil {
		switch media := strings.ToLower(strings.TrimSpace(mediaOf(d.ContentType))); {
		case media == batchMedia:
			return nil, "CloudEvents batch mode (" + batchMedia + ") is not supported: publish each event alone"
		case media == structuredMedia:
			if env := try(c, true); env != nil {
				return env, ""
			}
		default:
			if _, ok := eventHeader(d.Headers, "specversion"); ok {
				if env := try(c, false); env != nil {
					return env, ""
				}
			}
		}
	}
	for _, c := range r.headers {
		if _, ok := d.Headers[c.profile.TypeHeader]; ok {
			if env := try(c, false); env != nil {
				return env, ""
			}
		}
	}
	if c := r.property; c != nil {
		if env := try(c, false); env != nil {
			return env, ""
		}
	}
	switch misplaced := r.misplaced(d); {
	case unknown != nil:
		return unknown, ""
	case !marked && misplaced != "":
		return nil, misplaced
	case first != "":
		return nil, first
	}
	return nil, r.expected()
}

// misplaced is the reason for a delivery whose type property names a
// message of a profile that reads the type from a header, for read to give
// when d bore no such header (that profile was not tried): the producer put
// the type where its profile does not read it, which says more than what
// the type property's profile missed.
func (r *Reader) misplaced(d *amqp.Delivery) string {
	c := r.owners[d.Type]
	if c == nil || c.profile.TypeHeader == "" {
		return ""
	}
	return "header " + c.profile.TypeHeader + " missing: the type property names " + quote(d.Type) + ", a message read from that header"
}

// readWith reads d by one profile.
func (r *Reader) readWith(d *amqp.Delivery, c *reading, structured bool, lim Limits) (*Envelope, string) {
	if c.profile.Kind == envelope.CloudEvents {
		return r.readEvent(d, &c.profile, structured, lim)
	}
	return readProperties(d, &c.profile, lim)
}

// expected names the marks r looks for, for a delivery that has none.
func (r *Reader) expected() string {
	var marks []string
	if r.cloudEvents != nil {
		marks = append(marks, "a CloudEvents specversion header or content type "+structuredMedia)
	}
	for _, c := range r.headers {
		marks = append(marks, "header "+c.profile.TypeHeader)
	}
	return "no envelope profile of the queue fits: want " + strings.Join(marks, " or ")
}

// mediaOf is a content type's media type, as written.
func mediaOf(ct string) string {
	media, _, _ := strings.Cut(ct, ";")
	return media
}

// version reads the version the way p keeps it; typ is the type as read,
// and comes back without the version's suffix when p reads it from there.
// contentType is the full content type the payload travels with.
func version(p *envelope.Profile, typ, contentType string, attribute func() (any, bool), h amqp.Table) (n int, base, reason string) {
	v := p.Version
	switch {
	case v.Fixed != 0:
		return v.Fixed, typ, ""
	case v.TypeSuffix != "":
		i := strings.LastIndex(typ, v.TypeSuffix)
		if i < 1 {
			return 0, "", "type " + quote(typ) + " does not end in " + quote(v.TypeSuffix) + " and a version"
		}
		n, ok := digits(typ[i+len(v.TypeSuffix):])
		if !ok {
			return 0, "", "type " + quote(typ) + " does not end in " + quote(v.TypeSuffix) + " and a version"
		}
		return n, typ[:i], rangeReason(n, "version in the type")
	case v.ContentTypeParameter != "":
		s, ok, repeated := parameter(contentType, v.ContentTypeParameter)
		switch {
		case !ok:
			return 0, "", "content type parameter " + v.ContentTypeParameter + " missing"
		case repeated:
			return 0, "", "content type parameter " + v.ContentTypeParameter + " given twice"
		}
		n, ok := digits(s)
		if !ok {
			return 0, "", "content type parameter " + v.ContentTypeParameter + " " + quote(s) + " not a version"
		}
		return n, typ, rangeReason(n, "content type parameter "+v.ContentTypeParameter)
	case v.Attribute != "":
		x, ok := attribute()
		return looseVersion(x, ok, "attribute "+v.Attribute, typ)
	case v.Header != "":
		x, ok := h[v.Header]
		return looseVersion(x, ok, "header "+v.Header, typ)
	}
	n, present, reason := intHeader(h, HeaderVersion, maxVersion)
	if reason == "" && !present {
		reason = "header " + HeaderVersion + " missing"
	}
	return n, typ, reason
}

// looseVersion reads a foreign producer's version: an integer, or a string
// of decimal digits.
func looseVersion(x any, ok bool, what, typ string) (int, string, string) {
	if !ok {
		return 0, "", what + " missing"
	}
	if s, isText := x.(string); isText {
		n, ok := digits(s)
		if !ok {
			return 0, "", what + " " + quote(s) + " not a version"
		}
		return n, typ, rangeReason(n, what)
	}
	i, isInt := wire.HeaderInt(x)
	if !isInt {
		return 0, "", what + " not an integer"
	}
	if i < 1 || i > maxVersion {
		return 0, "", what + " " + strconv.FormatInt(i, 10) + " out of range 1.." + strconv.Itoa(maxVersion)
	}
	return int(i), typ, ""
}

func rangeReason(n int, what string) string {
	if n < 1 || n > maxVersion {
		return what + " " + strconv.Itoa(n) + " out of range 1.." + strconv.Itoa(maxVersion)
	}
	return ""
}

// digits reads 1..7 decimal digits: more would be out of range anyway.
func digits(s string) (int, bool) {
	if s == "" || len(s) > 7 {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return 0, false
		}
		n = n*10 + int(s[i]-'0')
	}
	return n, true
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// parameter returns the value of the content type parameter name (matched
// without regard to case), unquoted; repeated is set when it is given
// twice, and the value is then no one's. A quoted value may hold ';' and
// '=' (RFC 9110's quoted-string, its backslash escapes kept as sent).
func parameter(ct, name string) (value string, found, repeated bool) {
	_, params, _ := strings.Cut(ct, ";")
	for params != "" {
		var p string
		p, params = nextParameter(params)
		k, v, ok := strings.Cut(p, "=")
		if !ok || !strings.EqualFold(strings.TrimSpace(k), name) {
			continue
		}
		if found {
			return "", true, true
		}
		v = strings.TrimSpace(v)
		if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
			v = v[1 : len(v)-1]
		}
		value, found = v, true
	}
	return value, found, false
}

// nextParameter splits params at the first ';' outside a quoted string.
func nextParameter(params string) (p, rest string) {
	quoted := false
	for i := 0; i < len(params); i++ {
		switch c := params[i]; {
		case c == '\\' && quoted:
			i++
		case c == '"':
			quoted = !quoted
		case c == ';' && !quoted:
			return params[:i], params[i+1:]
		}
	}
	return params, ""
}
