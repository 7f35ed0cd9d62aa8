package wire

import "testing"

func TestParseTimeIsStrictRFC3339(t *testing.T) {
	for s, want := range map[string]bool{
		"2026-12-02T10:00:00Z":         true,
		"2026-12-02T10:00:00.123456Z":  true,
		"2026-12-02T10:00:00+05:30":    true,
		"2026-12-02T10:00:00-23:59":    true,
		"2026-12-02T1:00:00Z":          false, // time.Parse alone takes it
		"2026-12-02T10:00:00,5Z":       false, // and this
		"2026-12-02T10:00:00+24:00":    false, // and this
		"2026-12-02T10:00:00.Z":        false,
		"2026-12-02 10:00:00Z":         false,
		"2026-12-02T10:00:00":          false,
		"2026-13-02T10:00:00Z":         false, // syntax holds, the date does not
		"2026-12-02T10:00:00+05:60":    false,
		"":                             false,
		"2026-12-02T10:00:00Z trailer": false,
	} {
		if _, ok := ParseTime(s); ok != want {
			t.Errorf("ParseTime(%q) ok = %v, want %v", s, ok, want)
		}
	}
}
