package wire

import (
	"math"
	"testing"
	"time"
)

// A NaN or an infinity would pass any bound: it is no number header.
func TestHeaderNumberIsFinite(t *testing.T) {
	for _, c := range []struct {
		v    any
		want bool
	}{
		{1.5, true}, {float32(-2), true}, {int16(3), true}, {math.MaxFloat64, true},
		{math.NaN(), false}, {math.Inf(1), false}, {math.Inf(-1), false},
		{float32(math.NaN()), false}, {float32(math.Inf(1)), false}, {"1", false},
	} {
		if _, ok := HeaderNumber(c.v); ok != c.want {
			t.Errorf("HeaderNumber(%T %v) ok = %v, want %v", c.v, c.v, ok, c.want)
		}
	}
}

// A table built in process may hold a uint or uint64 beyond int64: it is
// refused, not read as math.MaxInt64, which an unbounded header would take.
func TestHeaderIntBeyondInt64(t *testing.T) {
	for _, c := range []struct {
		v    any
		want int64
		ok   bool
	}{
		{uint64(math.MaxInt64), math.MaxInt64, true},
		{uint(math.MaxInt64), math.MaxInt64, true},
		{uint64(math.MaxInt64 + 1), 0, false},
		{uint64(math.MaxUint64), 0, false},
		{uint(math.MaxUint64), 0, false},
	} {
		if n, ok := HeaderInt(c.v); n != c.want || ok != c.ok {
			t.Errorf("HeaderInt(%T %v) = %d, %v, want %d, %v", c.v, c.v, n, ok, c.want, c.ok)
		}
		if _, ok := HeaderNumber(c.v); ok != c.ok {
			t.Errorf("HeaderNumber(%T %v) ok = %v, want %v", c.v, c.v, ok, c.ok)
		}
	}
}

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

// ParseTime's own reading of the second-precision UTC form agrees with
// time.Parse on every day of four years (a leap one among them) and on
// every out-of-range field.
func TestParseTimeUTCSeconds(t *testing.T) {
	check := func(s string) {
		t.Helper()
		want, err := time.Parse(time.RFC3339, s)
		got, ok := ParseTime(s)
		if ok != (err == nil) || ok && (got != want || got.Location() != want.Location()) {
			t.Fatalf("ParseTime(%q) = %v, %v; time.Parse: %v, %v", s, got, ok, want, err)
		}
	}
	for day := time.Date(1999, 12, 30, 0, 0, 0, 0, time.UTC); day.Year() < 2004; day = day.AddDate(0, 0, 1) {
		check(day.Add(23*time.Hour + 59*time.Minute + 59*time.Second).Format("2006-01-02T15:04:05Z"))
	}
	for _, s := range []string{
		"2024-02-29T00:00:00Z", "2023-02-29T00:00:00Z", "1900-02-29T00:00:00Z", "2000-02-29T00:00:00Z",
		"2026-00-01T00:00:00Z", "2026-13-01T00:00:00Z", "2026-04-31T00:00:00Z", "2026-01-00T00:00:00Z", "2026-01-32T00:00:00Z",
		"2026-01-01T24:00:00Z", "2026-01-01T00:60:00Z", "2026-01-01T00:00:60Z", "0000-01-01T00:00:00Z", "9999-12-31T23:59:59Z",
	} {
		check(s)
	}
}
