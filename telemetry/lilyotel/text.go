package lilyotel

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxIDText bounds an id as a span attribute holds it; maxNameText an
// exchange's or a routing key's name, as AMQP does.
const (
	maxIDText   = 128
	maxNameText = 255
)

// idText is an id a publish names, as a span attribute holds it: valid
// UTF-8 (an OTLP exporter refuses a span batch with invalid UTF-8 in it),
// without control or bidirectional formatting characters (a trace view
// would show something else), at most maxIDText bytes. A retry copy of
// another producer's message carries its message_id as it came, which no
// guard bounded; the common id passes unchanged and unallocated.
func idText(s string) string { return text(s, maxIDText) }

// nameText is an exchange's or a routing key's name as a span holds it, as
// idText holds an id: the telemetry hook sees a Send's names before the
// publisher checks them.
func nameText(s string) string { return text(s, maxNameText) }

// text is s as valid, printable UTF-8 of at most limit bytes.
func text(s string, limit int) string {
	if len(s) <= limit && printableASCII(s) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if r == utf8.RuneError || unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) {
			r = '?'
		}
		if b.Len()+utf8.RuneLen(r) > limit {
			break
		}
		b.WriteRune(r)
	}
	return b.String()
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
