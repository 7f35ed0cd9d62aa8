package schema

import (
	"fmt"

	"gopkg.in/yaml.v3"

	"github.com/lily-mq/lily/envelope"
)

// What the envelope profiles write beside a version's typed headers, at
// most: a CloudEvent in binary mode its five attributes and a version one,
// each key and value within their own bounds.
const (
	envelopeHeaders     = 6
	envelopeHeaderBytes = 1024
)

// headerRoom reports a version whose typed headers could not all travel: a
// consumer's guard refuses a message of more headers, or of more bytes of
// keys and values, than envelope's bounds, whatever the schema allows. k is
// the headers key. A limit set after lilygen accepted schemas beyond it:
// the version is read whole all the same.
func (p *parser) headerRoom(k *yaml.Node, ver *Version) {
	if n, most := len(ver.Headers), envelope.MaxHeaders-envelopeHeaders; n > most {
		p.limitf(k, RuleRange, "%s has %d typed headers: at most %d, beside the envelope's own, within the %d a consumer's guard accepts",
			ver.GoName, n, most, envelope.MaxHeaders)
		return
	}
	bytes := 0
	for _, f := range ver.Headers {
		bytes += len(f.Name) + headerValueBytes(f)
	}
	if most := envelope.MaxHeaderBytes - envelopeHeaderBytes; bytes > most {
		p.limitf(k, RuleRange, "%s's typed headers at their bounds take %d bytes of keys and values: at most %d, beside the envelope's own, within the %d a consumer's guard accepts",
			ver.GoName, bytes, most, envelope.MaxHeaderBytes).Hint = "bound the string headers by max_length: a character may take 4 bytes"
	}
}

// headerMinLength reports string header f whose min_length asks for more
// than a consumer's guard takes in one header value: min_length counts
// characters and the guard bytes, and a character takes one byte or more,
// so no value of f could travel, and every message of its version would
// be poison. key names the header; m holds its keys. (A string header is
// written where it is used, never as a shared type.) A limit set after
// lilygen accepted schemas beyond it.
func (p *parser) headerMinLength(key *yaml.Node, m map[string]entry, f *Field) {
	if f.MinLength == nil || *f.MinLength <= envelope.MaxHeaderValueBytes {
		return
	}
	p.limitf(m["min_length"].v, RuleRange, "min_length %d of header %s asks for at least %d bytes (a character takes one or more): at most %d, the longest header value a consumer's guard accepts",
		*f.MinLength, key.Value, *f.MinLength, envelope.MaxHeaderValueBytes).Hint = fmt.Sprintf("lower min_length to %d or less, or carry the value in the body", envelope.MaxHeaderValueBytes)
}

// headerValueBytes is the most bytes a value of header f may take as the
// guard counts them: a string's within the guard's own bound for one value.
func headerValueBytes(f *Field) int {
	switch f.Type {
	case String:
		if f.MaxLength == nil {
			return envelope.MaxHeaderValueBytes
		}
		return min(4**f.MaxLength, envelope.MaxHeaderValueBytes)
	case Enum:
		n := 0
		for _, v := range f.Values {
			n = max(n, len(v))
		}
		return n
	}
	return 8
}
