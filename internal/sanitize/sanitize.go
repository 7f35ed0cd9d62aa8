// Package sanitize makes delivery text safe to log or forward: what a hostile
// producer put in a message id, a type or an error reaches a log line or a
// failure header only through Text, and the exchange and routing key it
// published with reach a handler or the telemetry hook only through Name.
// The runtime, the outbox (whose rows hold any UTF-8 a caller wrote) and
// lilydlq share it, so a message's text reads the same in each. Schema text,
// which its own author wrote, is internal/printable's: quoted whole, in Go's
// escapes, for lilygen's errors.
package sanitize

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

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
	return escaped(s, maxBytes, clean, textLen)
}

// Name returns s, an exchange's or a routing key's name, made safe as Text
// makes text, but keeping each valid UTF-8 rune beyond ASCII that Go calls
// printable (unicode.IsPrint: a letter, mark, number, punctuation or
// symbol): a queue may be named orders-zamówienia, and its name must read
// as the queue's, and as the publisher's telemetry names it. So it refuses,
// for Text's reasons, controls (C1's too), format characters (bidi
// overrides such as U+202E, zero-width ones such as U+200B and U+FEFF, the
// soft hyphen, tag characters), line and paragraph separators (U+2028,
// U+2029, which some viewers break a line on), spaces other than U+0020,
// and private-use and unassigned code points, which no reader can tell
// apart or even see; internal/printable and lilydlq's body keep the same
// runes. Each byte of a refused rune, of invalid UTF-8, and of U+FFFD
// (which stands for invalid UTF-8 elsewhere) is escaped as Text escapes it:
// \xNN.
//
// The limit, the cut (never inside a rune or an escape, "..." appended
// within maxBytes), the clean input returned as is, and the idempotence are
// Text's; so is the work, bounded by maxBytes, not by len(s).
func Name(s string, maxBytes int) string {
	clean := 0
	for clean < len(s) && clean <= maxBytes {
		r, size := utf8.DecodeRuneInString(s[clean:])
		if !kept(r) {
			break
		}
		clean += size
	}
	if clean == len(s) && len(s) <= maxBytes {
		return s
	}
	return escaped(s, maxBytes, clean, nameLen)
}

// escaped is s, whose first clean bytes need no escape, written within
// maxBytes, each piece of it as unit says: kept as it is when unit writes
// as many bytes as it stands for, else each of its bytes escaped. When the
// whole does not fit, it is cut before the first piece that would overflow,
// never inside a rune or an escape, and "..." is appended within maxBytes
// (for maxBytes < 3 only the first dots fit).
func escaped(s string, maxBytes, clean int, unit func(string) (written, size int)) string {
	if maxBytes <= 0 {
		return ""
	}
	// Does the escaped whole fit? Counting stops as soon as it cannot.
	n := clean
	for i := clean; i < len(s) && n <= maxBytes; {
		written, size := unit(s[i:])
		n += written
		i += size
	}
	const ellipsis = "..."
	fits := n <= maxBytes
	room := maxBytes
	if !fits {
		room -= len(ellipsis)
	}

	var b strings.Builder
	b.Grow(min(n, maxBytes))
	for i := 0; i < len(s); {
		written, size := unit(s[i:])
		if b.Len()+written > room {
			break
		}
		if written == size {
			b.WriteString(s[i : i+size])
		} else {
			for _, c := range []byte(s[i : i+size]) {
				escape(&b, c)
			}
		}
		i += size
	}
	if !fits {
		b.WriteString(ellipsis[:min(len(ellipsis), maxBytes)])
	}
	return b.String()
}

// kept reports whether Name keeps r as it is: printable ASCII, or a rune
// beyond it that is printable (unicode.IsPrint), but for U+FFFD (which
// invalid UTF-8 decodes to).
func kept(r rune) bool {
	if r < utf8.RuneSelf {
		return Printable(byte(r))
	}
	return r != utf8.RuneError && unicode.IsPrint(r)
}

// nameLen is how many bytes Name writes for the rune (or the invalid byte)
// at the start of s, and how many of s it stands for.
func nameLen(s string) (written, size int) {
	r, size := utf8.DecodeRuneInString(s)
	if kept(r) {
		return size, size
	}
	return size * len(`\x00`), size
}

// Printable reports whether c is a printable ASCII byte, space included.
func Printable(c byte) bool { return c >= 0x20 && c <= 0x7e }

// escape writes c's escape, \xNN.
func escape(b *strings.Builder, c byte) {
	const hex = "0123456789abcdef"
	b.WriteString(`\x`)
	b.WriteByte(hex[c>>4])
	b.WriteByte(hex[c&0xf])
}

// textLen is how many bytes Text writes for the byte at the start of s,
// and that it stands for one.
func textLen(s string) (written, size int) {
	if Printable(s[0]) {
		return 1, 1
	}
	return len(`\x00`), 1
}
