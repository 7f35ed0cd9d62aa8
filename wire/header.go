package wire

import (
	"math"
	"time"
)

// HeaderInt reads a header value of any integer type an AMQP table holds.
// Generated extractors of typed headers call it.
func HeaderInt(v any) (int64, bool) { return asInt64(v) }

// HeaderNumber reads a float or integer header value. Generated extractors of
// typed headers call it. A NaN or an infinity is not a number here: either
// would pass any bound (NaN compares false), and RabbitMQ closes a
// publisher's connection on one.
func HeaderNumber(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, !math.IsNaN(n) && !math.IsInf(n, 0)
	case float32:
		return HeaderNumber(float64(n))
	}
	i, ok := asInt64(v)
	return float64(i), ok
}

// HeaderTime reads an AMQP timestamp, or an RFC 3339 string from producers
// that cannot set one. Generated extractors of typed headers call it.
func HeaderTime(v any) (time.Time, bool) {
	switch t := v.(type) {
	case time.Time:
		return t, true
	case string:
		return ParseTime(t)
	}
	return time.Time{}, false
}

// ParseTime parses an RFC 3339 date-time strictly. time.Parse with
// time.RFC3339 alone also takes one-digit hours, a comma before the fraction
// and offsets past 23:59, which other systems reading the same field refuse.
// Like time.Parse it takes the upper-case T and Z only, and no leap second
// (:60), though RFC 3339 allows both. Generated extractors call it.
func ParseTime(s string) (time.Time, bool) {
	if !rfc3339(s) {
		return time.Time{}, false
	}
	if len(s) == len("2006-01-02T15:04:05Z") {
		return utcSeconds(s)
	}
	t, err := time.Parse(time.RFC3339, s)
	return t, err == nil
}

// utcSeconds is time.Parse of the commonest form, to the second in UTC, whose
// syntax rfc3339 has checked: it reads the digits and checks the ranges as
// time.Parse does, without its general layout machinery.
func utcSeconds(s string) (time.Time, bool) {
	num := func(i, n int) int {
		v := 0
		for _, c := range s[i : i+n] {
			v = v*10 + int(c-'0')
		}
		return v
	}
	year, month, day := num(0, 4), num(5, 2), num(8, 2)
	hour, minute, second := num(11, 2), num(14, 2), num(17, 2)
	if month < 1 || month > 12 || day < 1 || day > daysIn(month, year) || hour > 23 || minute > 59 || second > 59 {
		return time.Time{}, false
	}
	return time.Date(year, time.Month(month), day, hour, minute, second, 0, time.UTC), true
}

// daysIn is the number of days in month (1 to 12) of year.
func daysIn(month, year int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// rfc3339 checks the syntax: YYYY-MM-DDTHH:MM:SS, an optional fraction, then
// Z or an offset of at most ±23:59.
func rfc3339(s string) bool {
	if len(s) < 20 {
		return false
	}
	for i := range 19 {
		c, want := s[i], byte(0)
		switch i {
		case 4, 7:
			want = '-'
		case 10:
			want = 'T'
		case 13, 16:
			want = ':'
		}
		if want != 0 && c != want || want == 0 && !isDigit(c) {
			return false
		}
	}
	rest := s[19:]
	if rest[0] == '.' {
		n := 1
		for n < len(rest) && isDigit(rest[n]) {
			n++
		}
		if n == 1 {
			return false
		}
		rest = rest[n:]
	}
	if rest == "Z" {
		return true
	}
	if len(rest) != 6 || rest[0] != '+' && rest[0] != '-' || rest[3] != ':' {
		return false
	}
	for _, i := range []int{1, 2, 4, 5} {
		if !isDigit(rest[i]) {
			return false
		}
	}
	return (rest[1]-'0')*10+rest[2]-'0' <= 23 && rest[4] <= '5'
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// asInt64 accepts every integer type a field table can hold: amqp091 decodes
// b/B/s/u/I/i/l to int8, uint8, int16, uint16, int32, uint32 and int64, and
// tables built in process may hold int, uint or uint64. One of those above
// math.MaxInt64 is refused, not clamped: clamped, an unbounded header would
// read another value than was sent.
func asInt64(v any) (int64, bool) {
	switch n := v.(type) {
	case int8:
		return int64(n), true
	case uint8:
		return int64(n), true
	case int16:
		return int64(n), true
	case uint16:
		return int64(n), true
	case int32:
		return int64(n), true
	case uint32:
		return int64(n), true
	case int64:
		return n, true
	case int:
		return int64(n), true
	case uint:
		return asInt64(uint64(n))
	case uint64:
		if n > math.MaxInt64 {
			return 0, false
		}
		return int64(n), true
	}
	return 0, false
}
