package sanitize

import (
	"fmt"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
	"unsafe"
)

func TestSanitize(t *testing.T) {
	tests := []struct {
		name string
		in   string
		max  int
		want string
	}{
		{"clean", "orders.created", 64, "orders.created"},
		{"clean at the limit", "abcd", 4, "abcd"},
		{"empty", "", 0, ""},
		{"space and punctuation kept", `a b\c"d`, 64, `a b\c"d`},
		{"ANSI escape", "\x1b[31mred\x1b[0m", 64, `\x1b[31mred\x1b[0m`},
		{"control chars and DEL", "a\x00b\nc\rd\x7f", 64, `a\x00b\x0ac\x0dd\x7f`},
		{"invalid UTF-8", "\xff\xfeid", 64, `\xff\xfeid`},
		{"valid non-ASCII rune escaped per byte", "é", 64, `\xc3\xa9`},
		{"bidi override escaped", "a\u202eb", 64, `a\xe2\x80\xaeb`},
		{"clean cut", "abcdefghij", 8, "abcde..."},
		{"cut exactly before an escape", "abcd\x1bxyz", 8, "abcd..."},
		{"escape not split", "abc\x1bxyz", 8, "abc..."},
		{"escape that fits before the dots", "a\x1bxyzw", 8, `a\x1b...`},
		{"escaped whole fits exactly", "ab\x1bcd", 8, `ab\x1bcd`},
		{"escaped whole one over", "ab\x1bcde", 8, "ab..."},
		{"only dots fit", "abcdef", 3, "..."},
		{"limit below the dots", "abcdef", 2, ".."},
		{"zero limit", "abc", 0, ""},
		{"negative limit", "abc", -1, ""},
		{"long hostile input", strings.Repeat("\x1b", 100_000), 10, `\x1b...`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Text(tt.in, tt.max)
			if got != tt.want {
				t.Errorf("Text(%q, %d) = %q, want %q", tt.in, tt.max, got, tt.want)
			}
			if len(got) > max(tt.max, 0) {
				t.Errorf("Text(%q, %d) = %q: %d bytes", tt.in, tt.max, got, len(got))
			}
			if again := Text(got, tt.max); again != got {
				t.Errorf("Text(Text(%q)) = %q, want %q", tt.in, again, got)
			}
		})
	}
}

func TestSanitizeCleanReturnsInputWithoutAllocating(t *testing.T) {
	in := strings.Repeat("x-lily-version ", 4)
	if got := Text(in, len(in)); unsafe.StringData(got) != unsafe.StringData(in) {
		t.Fatalf("Text(%q) returned a copy", in)
	}
	allocs := testing.AllocsPerRun(100, func() { sinkString = Text(in, len(in)) })
	if allocs != 0 {
		t.Errorf("sanitize of clean input: %v allocations, want 0", allocs)
	}
}

var sinkString string

// escapeAll is a plain reference for sanitize without a limit.
func escapeAll(s string) []string {
	var items []string
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 0x20 && c <= 0x7e {
			items = append(items, string(c))
		} else {
			items = append(items, fmt.Sprintf(`\x%02x`, c))
		}
	}
	return items
}

func FuzzSanitize(f *testing.F) {
	f.Fuzz(func(t *testing.T, s string, limit uint8) {
		maxBytes := int(limit)
		got := Text(s, maxBytes)
		if len(got) > maxBytes {
			t.Fatalf("Text(%q, %d) = %q: %d bytes", s, maxBytes, got, len(got))
		}
		for i := 0; i < len(got); i++ {
			if got[i] < 0x20 || got[i] > 0x7e {
				t.Fatalf("Text(%q, %d) = %q: byte %#x", s, maxBytes, got, got[i])
			}
		}
		if again := Text(got, maxBytes); again != got {
			t.Fatalf("Text(Text(%q, %d)) = %q, want %q", s, maxBytes, again, got)
		}

		items := escapeAll(s)
		whole := strings.Join(items, "")
		if len(whole) <= maxBytes {
			if got != whole {
				t.Fatalf("Text(%q, %d) = %q, want %q", s, maxBytes, got, whole)
			}
			return
		}
		// Cut: the longest whole-item prefix that leaves room for the dots.
		room, prefix := maxBytes-3, ""
		for _, it := range items {
			if len(prefix)+len(it) > room {
				break
			}
			prefix += it
		}
		if want := prefix + "..."[:min(3, maxBytes)]; got != want {
			t.Fatalf("Text(%q, %d) = %q, want %q", s, maxBytes, got, want)
		}
	})
}

// A name keeps its valid, printable UTF-8, and Text's escapes for the rest.
func TestName(t *testing.T) {
	tests := []struct {
		name string
		in   string
		max  int
		want string
	}{
		{"ASCII", "orders.created", 255, "orders.created"},
		{"UTF-8 kept", "orders-zamówienia", 255, "orders-zamówienia"},
		{"CJK kept", "注文.作成", 255, "注文.作成"},
		{"empty", "", 0, ""},
		{"ANSI escape", "\x1b[31mred", 255, `\x1b[31mred`},
		{"C1 control escaped", "a\u0085b", 255, `a\xc2\x85b`},
		{"bidi override escaped", "a\u202eb", 255, `a\xe2\x80\xaeb`},
		{"invalid UTF-8 escaped", "é\xff\xfe", 255, `é\xff\xfe`},
		{"U+FFFD escaped", "a\ufffd", 255, `a\xef\xbf\xbd`},
		{"zero-width space escaped", "a\u200bb", 255, `a\xe2\x80\x8bb`},
		{"byte order mark escaped", "\ufeffa", 255, `\xef\xbb\xbfa`},
		{"soft hyphen escaped", "a\u00adb", 255, `a\xc2\xadb`},
		{"interlinear annotation escaped", "a\ufff9b", 255, `a\xef\xbf\xb9b`},
		{"tag character escaped", "a\U000e0041", 255, `a\xf3\xa0\x81\x81`},
		{"line separator escaped", "a\u2028b", 255, `a\xe2\x80\xa8b`},
		{"paragraph separator escaped", "a\u2029b", 255, `a\xe2\x80\xa9b`},
		{"no-break space escaped", "a\u00a0b", 255, `a\xc2\xa0b`},
		{"private use escaped", "a\ue000b", 255, `a\xee\x80\x80b`},
		{"symbols kept", "orders-€-✓", 255, "orders-€-✓"},
		{"cut before a rune that does not fit", "abcdéfgh", 8, "abcd..."},
		{"rune that fits before the dots", "aébcdefgh", 8, "aébc..."},
		{"escape not split", "abc\x1bxyz", 8, "abc..."},
		{"escaped rune not split", "a\u202ebcdefgh", 8, "a..."},
		{"zero limit", "é", 0, ""},
		{"long hostile input", strings.Repeat("\u202e", 100_000), 16, `\xe2\x80\xae...`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Name(tt.in, tt.max)
			if got != tt.want {
				t.Errorf("Name(%.40q, %d) = %q, want %q", tt.in, tt.max, got, tt.want)
			}
			if again := Name(got, tt.max); again != got {
				t.Errorf("Name(Name(%.40q)) = %q, want %q", tt.in, again, got)
			}
		})
	}
	in := "orders-zamówienia"
	if got := Name(in, 255); unsafe.StringData(got) != unsafe.StringData(in) {
		t.Fatalf("Name(%q) returned a copy", in)
	}
}

func FuzzName(f *testing.F) {
	f.Add("orders-zamówienia", uint8(255))
	f.Add("a\u202e\xffb", uint8(6))
	f.Add("a\u200b\u2028\U000e0041b", uint8(16))
	f.Fuzz(func(t *testing.T, s string, limit uint8) {
		maxBytes := int(limit)
		got := Name(s, maxBytes)
		if len(got) > maxBytes || !utf8.ValidString(got) {
			t.Fatalf("Name(%q, %d) = %q: %d bytes", s, maxBytes, got, len(got))
		}
		for _, r := range got {
			if r == utf8.RuneError || !unicode.IsPrint(r) {
				t.Fatalf("Name(%q, %d) = %q: rune %U", s, maxBytes, got, r)
			}
		}
		if again := Name(got, maxBytes); again != got {
			t.Fatalf("Name(Name(%q, %d)) = %q, want %q", s, maxBytes, again, got)
		}
		if utf8.ValidString(s) && len(s) <= maxBytes && !strings.ContainsFunc(s, func(r rune) bool {
			return r == utf8.RuneError || !unicode.IsPrint(r)
		}) && got != s {
			t.Fatalf("Name(%q, %d) = %q, want it as is", s, maxBytes, got)
		}
	})
}
