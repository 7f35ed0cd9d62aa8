package envelope

import (
	"slices"
	"strings"
)

// The prefixes of a CloudEvent's attribute headers in binary content mode:
// the AMQP binding's, and the one it accepts from earlier producers.
const (
	EventPrefix    = "cloudEvents_"
	EventPrefixOld = "cloudEvents:"
)

// WrittenHeaders are the headers a Lily producer writes in profile p for the
// message itself (runtime.NewPublishing): a CloudEvent's attributes in
// binary mode, or the type and id headers that p names; then the version,
// where p keeps it in a header. Lily's producers and the AsyncAPI document
// both write exactly these.
func (p Profile) WrittenHeaders() []string {
	var out []string
	if p.Kind == CloudEvents {
		for _, a := range []string{"specversion", "type", "source", "id", "time"} {
			out = append(out, EventPrefix+a)
		}
	} else {
		for _, h := range []string{p.TypeHeader, p.IDHeader} {
			if h != "" {
				out = append(out, h)
			}
		}
	}
	// In the order a reader looks for the version: exactly one is set.
	switch v := p.Version; {
	case v.Fixed != 0, v.TypeSuffix != "", v.ContentTypeParameter != "":
	case v.Attribute != "":
		out = append(out, EventPrefix+v.Attribute)
	case v.Header != "":
		out = append(out, v.Header)
	default:
		out = append(out, HeaderVersion)
	}
	return out
}

// ReservedHeader reports whether a message's producer must leave header name
// to profile p: it is one of WrittenHeaders, or, in a CloudEvent, any
// attribute's header, which a reader takes for the event's own attribute
// rather than the message's.
func (p Profile) ReservedHeader(name string) bool {
	if p.Kind == CloudEvents && (strings.HasPrefix(name, EventPrefix) || strings.HasPrefix(name, EventPrefixOld)) {
		return true
	}
	return slices.Contains(p.WrittenHeaders(), name)
}
