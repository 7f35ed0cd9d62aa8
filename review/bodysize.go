package review

import (
	"encoding/json"
	"math"
	"strconv"

	"github.com/lily-mq/lily/schema"
)

// JSON widths of the values encoding/json writes, which a generated
// producer marshals with.
const (
	// A character of a string takes at most 6 bytes: \u003c for <, > and &,
	// \u00XX for a control character, \u2028 and \u2029; any other is at
	// most 4 bytes of UTF-8.
	charWidth = 6
	// The widest float64: 17 significant digits in 'f' form just above
	// 1e-6 (-0.0000012345678901234567); the 'e' form, whose exponent has
	// no leading zero, is shorter.
	numberWidth = 25
	// "false" is wider than "true".
	boolWidth = 5
	// RFC 3339 with nanoseconds and an offset, quoted,
	// "2006-01-02T15:04:05.999999999-07:00": encoding/json refuses a year
	// beyond 9999.
	timeWidth = 37
	nullWidth = 4
)

// bodySizes works out the widest JSON body of a version at the schema's
// bounds, remembering each shared type's: walking a type again at each use
// would take time exponential in how deep types nest.
type bodySizes struct {
	named map[string]size
}

// size is a width in bytes, or unbounded: a string, bytes, list or map
// without a bound, or any map, whose keys the schema cannot bound.
// Arithmetic saturates at math.MaxInt64, which no limit reaches.
type size struct {
	n       int64
	bounded bool
}

func bounded(n int64) size { return size{n, true} }

func (a size) plus(b size) size {
	if !a.bounded || !b.bounded {
		return size{}
	}
	if a.n > math.MaxInt64-b.n {
		return bounded(math.MaxInt64)
	}
	return bounded(a.n + b.n)
}

func (a size) times(k int64) size {
	if !a.bounded {
		return size{}
	}
	if k != 0 && a.n > math.MaxInt64/k {
		return bounded(math.MaxInt64)
	}
	return bounded(a.n * k)
}

// body is the widest body of version v: the object of its fields.
func (s *bodySizes) body(v *schema.Version) size { return s.object(v.Fields) }

// object is the widest object of fields fs, each present: braces, commas,
// and each member's quoted key, colon and widest value.
func (s *bodySizes) object(fs []*schema.Field) size {
	out := bounded(int64(2 + max(len(fs)-1, 0)))
	for _, f := range fs {
		out = out.plus(bounded(int64(quotedWidth(f.Name) + 1))).plus(s.field(f))
	}
	return out
}

// field is the widest value of f, null included where encoding/json may
// send one (a nil pointer, list, map or bytes).
func (s *bodySizes) field(f *schema.Field) size {
	v := s.value(f)
	if (f.Pointer() || f.Type == schema.List || f.Type == schema.Map || f.Type == schema.Bytes) && v.bounded && v.n < nullWidth {
		return bounded(nullWidth)
	}
	return v
}

// value is the widest value of f that is not null.
func (s *bodySizes) value(f *schema.Field) size {
	if f.Named != "" {
		if v, ok := s.named[f.Named]; ok {
			return v
		}
	}
	var v size
	switch f.Type {
	case schema.String:
		if f.MaxLength != nil {
			v = bounded(2).plus(bounded(charWidth).times(int64(*f.MaxLength)))
		}
	case schema.Bytes:
		// Standard base64, padded: 4 bytes for each 3 begun.
		if f.MaxLength != nil {
			v = bounded(2).plus(bounded(4).times((int64(*f.MaxLength) + 2) / 3))
		}
	case schema.Integer:
		lo, hi := schema.Int64.Range()
		if f.MinInt != nil {
			lo = *f.MinInt
		}
		if f.MaxInt != nil {
			hi = *f.MaxInt
		}
		v = bounded(int64(max(len(strconv.FormatInt(lo, 10)), len(strconv.FormatInt(hi, 10)))))
	case schema.Number:
		v = bounded(numberWidth)
	case schema.Bool:
		v = bounded(boolWidth)
	case schema.Time:
		v = bounded(timeWidth)
	case schema.Enum:
		w := 0
		for _, e := range f.Values {
			w = max(w, quotedWidth(e))
		}
		v = bounded(int64(w))
	case schema.Object:
		v = s.object(f.Fields)
	case schema.List:
		if f.MaxItems != nil {
			n := int64(*f.MaxItems)
			v = bounded(2 + max(n-1, 0)).plus(s.field(f.Items).times(n))
		}
	}
	if f.Named != "" {
		s.named[f.Named] = v
	}
	return v
}

// quotedWidth is the width of s as a JSON string, as encoding/json writes
// it.
func quotedWidth(s string) int {
	b, _ := json.Marshal(s) // a string always marshals
	return len(b)
}
