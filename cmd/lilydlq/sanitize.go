package main

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/lily-mq/lily/internal/sanitize"
)

// The bounds of what lilydlq prints of a copy's text.
const (
	maxID     = 128 // a message id, a type, a version
	maxReason = 200 // a failure reason, as the runtime bounds it
	maxQueue  = 255 // a queue name, as AMQP bounds it
	maxValue  = 512 // a header value in show
)

// escape is s as sanitize.Text writes it, uncut: what list prints of a
// value when it is short enough to be printed whole. lilydlq prints every
// other string of a copy through sanitize.Text, the runtime's own
// sanitizer, so that it reads as the runtime logs it.
func escape(s string) string { return sanitize.Text(s, math.MaxInt) }

// body renders a message body for a terminal, at most max bytes of it: as
// text when it is valid UTF-8 of printable characters (newlines and tabs
// too), else as a hex dump, which is plain ASCII whatever the bytes.
func body(b []byte, max int) (rendered string, cut bool) {
	if len(b) > max {
		b, cut = b[:max], true
		// A rune cut at the end is not a reason to call the body binary.
		for i := 0; i < utf8.UTFMax && len(b) > 0 && !utf8.Valid(b); i++ {
			b = b[:len(b)-1]
		}
	}
	if printableText(b) {
		return string(b), cut
	}
	return hex.Dump(b), cut
}

// printableText reports whether b is valid UTF-8 whose every rune a terminal
// shows as itself: no control, format (bidi overrides, zero-width) or
// private characters.
func printableText(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		if !unicode.IsPrint(r) && r != '\n' && r != '\t' {
			return false
		}
	}
	return true
}

// jsonEncoder writes JSON that a terminal shows as it is. encoding/json
// escapes only the controls below U+0020 (and U+2028, U+2029), and lets C1
// controls (U+009B is CSI to many terminals), DEL, bidi overrides and other
// format characters through raw; these are written as \uXXXX escapes too,
// which JSON reads back as the same string.
func jsonEncoder(w io.Writer) *json.Encoder { return json.NewEncoder(jsonEscaper{w}) }

// jsonEscaper escapes, in what a json.Encoder writes, every rune from DEL up
// that a terminal does not show as itself. Outside strings JSON is ASCII, so
// every such rune is within a string. An Encoder writes each value whole, in
// one Write, so no rune is split between two.
type jsonEscaper struct{ w io.Writer }

func (e jsonEscaper) Write(p []byte) (int, error) {
	var out []byte // nil until a rune needs its escape
	done := 0      // p[:done] is in out
	for i := 0; i < len(p); {
		if p[i] < 0x7f {
			i++
			continue
		}
		r, n := utf8.DecodeRune(p[i:])
		if !unicode.IsPrint(r) {
			out = append(out, p[done:i]...)
			for _, u := range utf16.AppendRune(nil, r) {
				out = fmt.Appendf(out, `\u%04x`, u)
			}
			done = i + n
		}
		i += n
	}
	if out == nil {
		out = p
	} else {
		out = append(out, p[done:]...)
	}
	if _, err := e.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}
