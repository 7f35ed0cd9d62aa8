package schema

import (
	"math"
	"strconv"
	"strings"
	"time"
)

// Limits are a field's bounds as Go literals ("" when unset), with the problem
// each names when broken. The generator writes its checks from them and the
// schema's own checker reports the same problems, so the two agree.
type Limits struct {
	Lo, Hi               string
	LoProblem, HiProblem string
	// Unit is what the bounds count, for comments: " characters", " bytes",
	// " items" or "".
	Unit string
}

// Limits returns f's length, range or item-count bounds.
func (f *Field) Limits() Limits {
	var l Limits
	switch f.Type {
	case String:
		l = lengths(f.MinLength, f.MaxLength, "character")
		l.LoProblem, l.HiProblem = "shorter than "+l.LoProblem, "longer than "+l.HiProblem
	case Bytes:
		l = lengths(f.MinLength, f.MaxLength, "byte")
		l.LoProblem, l.HiProblem = "shorter than "+l.LoProblem, "longer than "+l.HiProblem
	case List, Map:
		l = lengths(f.MinItems, f.MaxItems, "item")
		l.LoProblem, l.HiProblem = "fewer than "+l.LoProblem, "more than "+l.HiProblem
	case Integer:
		// A bound at int64's own end is left out, as a minimum length of 0
		// is: every value read meets it, and its check would never fail.
		// A narrower type's range stays: values are read as int64s.
		lo, hi := f.MinInt, f.MaxInt
		if lo != nil && *lo == math.MinInt64 {
			lo = nil
		}
		if hi != nil && *hi == math.MaxInt64 {
			hi = nil
		}
		l.Lo, l.Hi = format(lo, formatInt), format(hi, formatInt)
		l.LoProblem, l.HiProblem = "less than "+l.Lo, "more than "+l.Hi
	case Number:
		l.Lo, l.Hi = format(f.MinNum, FormatFloat), format(f.MaxNum, FormatFloat)
		l.LoProblem, l.HiProblem = "less than "+l.Lo, "more than "+l.Hi
	}
	if l.Lo == "1" && l.Unit != "" {
		l.LoProblem = "empty"
	}
	return l
}

// PatternProblem is the problem of a string that does not match f's pattern.
func (f *Field) PatternProblem() string { return "does not match " + f.Pattern }

// EnumProblem is the problem of a value that is not one of an enum's values.
func (f *Field) EnumProblem() string { return "not one of " + strings.Join(f.Values, ", ") }

// lengths are length bounds; a minimum of 0 is left out since every length
// meets it. The problems hold the counted unit, still to be prefixed.
func lengths(lo, hi *int, unit string) Limits {
	l := Limits{Hi: format(hi, strconv.Itoa), Unit: " " + unit + "s"}
	if lo != nil && *lo > 0 {
		l.Lo = strconv.Itoa(*lo)
	}
	l.LoProblem, l.HiProblem = count(l.Lo, unit), count(l.Hi, unit)
	return l
}

func count(n, unit string) string {
	if n == "1" {
		return n + " " + unit
	}
	return n + " " + unit + "s"
}

func format[T any](v *T, f func(T) string) string {
	if v == nil {
		return ""
	}
	return f(*v)
}

func formatInt(v int64) string { return strconv.FormatInt(v, 10) }

// FormatFloat writes v as the shortest Go literal that reads back as v.
func FormatFloat(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// parseDate reads a YYYY-MM-DD date.
func parseDate(s string) (time.Time, error) { return time.Parse(time.DateOnly, s) }
