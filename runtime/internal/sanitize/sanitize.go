// Package sanitize makes delivery text safe to log or forward: what a hostile
// producer put in a message id, a type or an error reaches a log line or a
// failure header only through Text.
package sanitize

import "strings"

// Text returns s made safe for a log line or an AMQP header value: at most
// maxBytes bytes, all printable ASCII (0x20..0x7e).
//
// Every other byte becomes a four-byte escape \xNN (lower-case hex): control
// characters, ESC and so ANSI sequences, DEL, invalid UTF-8, and also each byte
// of a valid non-ASCII rune, because keeping those would let bidi overrides,
// zero-width and look-alike characters into logs. A backslash in s stays as
// it is: the escapes are for reading, not for decoding.
//
// When the escaped text does not fit, it is cut before the first byte or escape
// that would overflow, never inside an escape, and "..." is appended within
// maxBytes (for maxBytes < 3 only the first dots fit). Clean input that fits is
// returned as is, without allocating. The output is clean, so sanitizing it
// again with the same or a larger limit returns it unchanged. Work is bounded by
// maxBytes, not by len(s): it may quote a 20 MiB attacker string.
func Text(s string, maxBytes int) string {
	clean := 0
	for clean < len(s) && clean <= maxBytes && Printable(s[clean]) {
		clean++
	}
	if clean == len(s) && len(s) <= maxBytes {
		return s
	}
	if maxBytes <= 0 {
		return ""
	}

	// Does the escaped whole fit? Counting stops as soon as it cannot.
	n := clean
	for i := clean; i < len(s) && n <= maxBytes; i++ {
		n += escapedLen(s[i])
	}
	const ellipsis = "..."
	fits := n <= maxBytes
	room := maxBytes
	if !fits {
		room -= len(ellipsis)
	}

	var b strings.Builder
	b.Grow(min(n, maxBytes))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if b.Len()+escapedLen(c) > room {
			break
		}
		if Printable(c) {
			b.WriteByte(c)
			continue
		}
		const hex = "0123456789abcdef"
		b.WriteString(`\x`)
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&0xf])
	}
	if !fits {
		b.WriteString(ellipsis[:min(len(ellipsis), maxBytes)])
	}
	return b.String()
}

// Printable reports whether c is a printable ASCII byte, space included.
func Printable(c byte) bool { return c >= 0x20 && c <= 0x7e }

// escapedLen is how many bytes sanitize writes for c.
func escapedLen(c byte) int {
	if Printable(c) {
		return 1
	}
	return len(`\x00`)
}
