package schema

import (
	"fmt"
	"math"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/lily-mq/lily/internal/queue"
)

// JSON widths of the narrowest values an extractor reads: whatever wrote
// the body (a generated producer, another client), it is no narrower.
const (
	minBoolWidth = len("true")
	minNullWidth = len("null")
	// Quoted RFC 3339 to the second in UTC, "2006-01-02T15:04:05Z", the
	// shortest time wire.ParseTime reads.
	minTimeWidth = len(`"2006-01-02T15:04:05Z"`)
)

// minBodies works out the narrowest JSON body of a version that its
// extractor reads, each required field at its min_length and min_items,
// remembering each version's, for every queue that consumes it, and each
// shared type's: walking a type again at each use would take time
// exponential in how deep types nest. Widths saturate at math.MaxInt64.
type minBodies struct {
	versions map[*Version]minBody
	named    map[string]int64
}

// minBody is a version's narrowest body, n bytes, and the required field
// of its payload that takes the most of it, nil for none.
type minBody struct {
	n      int64
	widest *Field
}

func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

func satMul(a, k int64) int64 {
	if k != 0 && a > math.MaxInt64/k {
		return math.MaxInt64
	}
	return a * k
}

// body is the narrowest body of v.
func (s *minBodies) body(v *Version) minBody {
	if b, ok := s.versions[v]; ok {
		return b
	}
	if s.versions == nil {
		s.versions, s.named = map[*Version]minBody{}, map[string]int64{}
	}
	b := minBody{n: 2} // {}
	most := int64(-1)
	members := 0
	for _, f := range v.Fields {
		if !f.Required {
			continue
		}
		w := s.member(f)
		b.n = satAdd(b.n, w)
		members++
		if w > most {
			b.widest, most = f, w
		}
	}
	b.n = satAdd(b.n, int64(max(members-1, 0))) // commas
	s.versions[v] = b
	return b
}

// member is the narrowest member of an object for required field f: its
// quoted name (a field name is ASCII that needs no escape), a colon and its
// narrowest value.
func (s *minBodies) member(f *Field) int64 {
	return satAdd(int64(len(f.Name)+3), s.field(f))
}

// field is the narrowest value of required field f: null if it is
// nullable and that is narrower.
func (s *minBodies) field(f *Field) int64 {
	v := s.value(f)
	if f.Nullable {
		v = min(v, int64(minNullWidth))
	}
	return v
}

// value is the narrowest value of f that is not null. A string's
// characters take a byte or more each; bytes are standard base64, padded.
func (s *minBodies) value(f *Field) int64 {
	if f.Named != "" {
		if v, ok := s.named[f.Named]; ok {
			return v
		}
	}
	atLeast := func(n *int) int64 {
		if n == nil {
			return 0
		}
		return int64(*n)
	}
	var v int64 = 1 // a digit: an integer or a number
	switch f.Type {
	case String:
		v = satAdd(2, atLeast(f.MinLength))
	case Bytes:
		v = satAdd(2, satMul(4, (atLeast(f.MinLength)+2)/3))
	case Bool:
		v = int64(minBoolWidth)
	case Time:
		v = int64(minTimeWidth)
	case Enum:
		v = math.MaxInt64
		for _, e := range f.Values {
			v = min(v, int64(len(e)+2))
		}
		if len(f.Values) == 0 {
			v = 2
		}
	case Object:
		v = 2
		members := 0
		for _, c := range f.Fields {
			if c.Required {
				v = satAdd(v, s.member(c))
				members++
			}
		}
		v = satAdd(v, int64(max(members-1, 0)))
	case List, Map:
		// An element of a list, or a map's entry: a quoted key (two maps'
		// keys differ, but one may be empty) and a colon before its value.
		// Elements are never null.
		n := atLeast(f.MinItems)
		each := int64(0)
		if f.Items != nil {
			each = s.value(f.Items)
		}
		if f.Type == Map {
			each = satAdd(each, 3)
		}
		v = satAdd(satAdd(2, max(n-1, 0)), satMul(each, n))
	}
	if f.Named != "" {
		s.named[f.Named] = v
	}
	return v
}

// bodyRoom reports a version queue q consumes whose narrowest body is
// wider than q's max_body_bytes: its guard dead-letters every message of
// it unread. at names the version's message where q consumes it. A limit
// set after lilygen accepted schemas beyond it.
func (p *parser) bodyRoom(at *yaml.Node, q *Queue, msg *Message, v *Version) {
	b := p.minBodies.body(v)
	if b.n <= int64(q.MaxBodyBytes) {
		return
	}
	width := fmt.Sprintf("%d bytes", b.n)
	if b.n == math.MaxInt64 {
		width = "more bytes than an int64 counts"
	}
	e := p.limitf(at, RuleImpossibleBound, "queue %q reads %s version %d, whose narrowest body (each required field at its min_length and min_items) is %s, over the queue's max_body_bytes %d: no message of it can be delivered, its guard dead-letters every one unread",
		q.Name, msg.Name, v.Number, width, q.MaxBodyBytes)
	var hints []string
	if b.widest != nil {
		hints = append(hints, fmt.Sprintf("lower the minimums of field %s (%s)", b.widest.Name, p.where(b.widest.Pos)))
	}
	if b.n <= queue.MaxBodyBytes {
		hints = append(hints, fmt.Sprintf("raise max_body_bytes to %d", b.n))
	}
	e.Hint = strings.Join(hints, ", or ")
}
