package wire

import (
	"slices"
	"strconv"
	"strings"

	"github.com/lily-mq/lily/internal/membername"
)

// JSONField is one member of an object the schema describes.
type JSONField struct {
	Name string
	// Required members must be present and, unless Nullable, not null.
	Required, Nullable bool
	// quick: Name is plain bytes (no quote, backslash, control or non-ASCII
	// byte), so that a member name in the body equals it exactly when its
	// bytes do, escapes aside.
	quick bool
}

// JSONFields are the members of one object type, in schema order; generated
// code makes them once, when the package loads.
type JSONFields struct {
	fields []JSONField
	// required has the bits of the Required members among the first 64.
	required uint64
	// index finds a member of an object with many; fewer are found by a scan.
	index map[string]int
}

// scanFields is the most members found by a scan rather than a map.
const scanFields = 8

// NewJSONFields returns the members of an object type.
func NewJSONFields(fields ...JSONField) *JSONFields {
	fields = slices.Clone(fields)
	var required uint64
	for i := range fields {
		if fields[i].Required && i < 64 {
			required |= 1 << i
		}
		fields[i].quick = fields[i].Name != "" && !strings.ContainsFunc(fields[i].Name, func(c rune) bool { return c > 0x7f || !plain(byte(c)) })
	}
	f := &JSONFields{fields: fields, required: required}
	if len(fields) > scanFields {
		f.index = make(map[string]int, len(fields))
		for i, field := range fields {
			f.index[field.Name] = i
		}
	}
	return f
}

// find returns the index of the member named name, or -1. Names match
// exactly, as encoding/json/v2 matches them.
func (f *JSONFields) find(name []byte) int {
	if f.index != nil {
		if i, ok := f.index[string(name)]; ok {
			return i
		}
		return -1
	}
	for i, field := range f.fields {
		if field.Name == string(name) {
			return i
		}
	}
	return -1
}

// memberBits is a set of member indexes. The words past the first are
// behind a pointer, so that a JSONObject, returned by value for each object
// read, stays small.
type memberBits struct {
	low  uint64
	high *[]uint64 // members from 64 on, for objects that have them
}

func (b *memberBits) has(i int) bool {
	if i < 64 {
		return b.low&(1<<i) != 0
	}
	return (*b.high)[i/64-1]&(1<<(i%64)) != 0
}

func (b *memberBits) add(i int) {
	if i < 64 {
		b.low |= 1 << i
		return
	}
	(*b.high)[i/64-1] |= 1 << (i % 64)
}

// JSONObject reads the members of one object the schema describes:
//
//	o := r.Object(fields)
//	for o.Next(r) {
//		switch o.Member() { ... read the value from r ... }
//	}
//	return o.End()
//
// It does not hold r: Next is handed it. An object holding its reader would
// return the reader with End's error, as far as the compiler can tell, and
// every extractor's reader would be allocated on the heap.
type JSONObject struct {
	f     *JSONFields
	names nameMark // where its unknown members' names start
	// member is the last member met: the one Next moved to, or a null one
	// it skipped (-1 before the first).
	member int
	done   bool
	err    error
	// seen are the members met, null or not, so that a repeat is found;
	// present those that count as present: not null, unless Nullable.
	seen, present memberBits
}

// Object starts reading an object whose members are fields. A null reads as
// an object without members.
func (r *JSONReader) Object(fields *JSONFields) JSONObject {
	o := JSONObject{f: fields, names: r.markNames(), member: -1}
	if n := len(fields.fields); n > 64 {
		seen, present := make([]uint64, (n-1)/64), make([]uint64, (n-1)/64)
		o.seen.high, o.present.high = &seen, &present
	}
	switch c := r.peek(); {
	case c == '{':
		r.pos++
		r.first = true
		r.depth++
	case c == 'n' && r.literal("null"):
		o.done = true
	default:
		o.err = r.kindError(c)
	}
	return o
}

// Next moves to the next member the schema knows whose value is not null,
// and reports false at the end of the object or at a problem, which End
// returns. It skips the other members: null ones (marking a Nullable one
// present), and unknown ones, whose values it checks for syntax and repeated
// names.
func (o *JSONObject) Next(r *JSONReader) bool {
	for o.err == nil && !o.done {
		if !r.more('}') {
			o.done = true
			r.depth--
			if r.err == nil {
				r.closeNames(o.names)
			}
			if r.err != nil {
				o.err = r.err
			}
			return false
		}
		at := r.space()
		i, ok := o.expected(r, at)
		var name []byte // read when not the expected one
		if !ok {
			if r.err == nil {
				name, ok = r.name()
			}
			if !ok {
				o.err = r.err
				return false
			}
			i = o.f.find(name)
		}
		switch {
		case i < 0:
			r.addName(at, name)
			r.skip(true)
			continue
		case o.seen.has(i):
			o.err = &FieldError{Path: o.f.fields[i].Name, Problem: "repeated"}
			return false
		}
		o.seen.add(i)
		o.member = i
		if r.null() {
			if o.f.fields[i].Nullable {
				o.present.add(i)
			}
			continue
		}
		if r.err != nil {
			o.err = r.err
			return false
		}
		o.present.add(i)
		return true
	}
	return false
}

// expected reads, at offset at, the name of the member that follows the
// last one met in schema order, with the colon after it, and returns its
// index; it reads nothing and reports false for any other name, or one with
// an escape, which name and find then read (or when no colon follows, a
// syntax error). Members mostly come in schema order, and this spares them
// the string scanner and the search.
func (o *JSONObject) expected(r *JSONReader, at int) (int, bool) {
	i := o.member + 1
	if i >= len(o.f.fields) || !o.f.fields[i].quick {
		return 0, false
	}
	name := o.f.fields[i].Name
	end := at + 1 + len(name) // the closing quote
	if end >= len(r.data) || r.data[at] != '"' || r.data[end] != '"' || string(r.data[at+1:end]) != name {
		return 0, false
	}
	r.pos = end + 1
	if c := r.peek(); c != ':' {
		if c != 0 {
			r.fail(invalidChar(c, "after a member name"))
		}
		return 0, false
	}
	r.pos++
	return i, true
}

// Member is the index, in the object's fields, of the member Next moved to.
func (o *JSONObject) Member() int { return o.member }

// End returns the problem that stopped Next, or else the first required
// member (in schema order) that is not present.
func (o *JSONObject) End() error {
	if o.err != nil {
		return o.err
	}
	if o.present.low&o.f.required == o.f.required && len(o.f.fields) <= 64 {
		return nil
	}
	for i, f := range o.f.fields {
		if f.Required && !o.present.has(i) {
			return &FieldError{Path: f.Name, Problem: "required"}
		}
	}
	return nil
}

// Unbounded is the most items of a list or a map without max_items.
const Unbounded = -1

// tooMany is the problem of a list or a map with more than most items, as
// the schema's own checker words it.
func tooMany(most int) error {
	if most == 1 {
		return &FieldError{Problem: "more than 1 item"}
	}
	return &FieldError{Problem: "more than " + strconv.Itoa(most) + " items"}
}

// JSONList reads an array of at most most elements (or Unbounded), each
// with read, which reads the element from r and fails with a path relative
// to it. A null element is not one (it is "required"). One element too many
// fails before it is read: a body of a million small elements costs no more
// than the bound.
//
// read is not handed r: a reader passed to a function value is allocated on
// the heap, as the compiler cannot see what the function keeps. A function
// literal that uses the caller's r keeps it on the stack.
func JSONList[T any](r *JSONReader, most int, read func(*T) error) ([]T, error) {
	if c := r.peek(); c != '[' {
		return nil, r.kindError(c)
	}
	r.pos++
	r.first = true
	r.depth++
	out := []T{}
	for i := 0; r.more(']'); i++ {
		if i == most {
			return nil, tooMany(most)
		}
		if r.null() {
			return nil, &FieldError{Path: index(i), Problem: "required"}
		}
		if i == 0 {
			out = make([]T, 0, 4) // skips the first doublings of a typical list
		}
		out = append(out, *new(T))
		if err := read(&out[i]); err != nil {
			return nil, At(index(i), err)
		}
	}
	r.depth--
	if r.err != nil {
		return nil, r.err
	}
	return out, nil
}

func index(i int) string { return "[" + strconv.Itoa(i) + "]" }

// JSONMap reads an object with any member names, at most most of them (or
// Unbounded), as a map, each value with read, which reads it from r (as
// JSONList's does) and fails with a path relative to the value. A null value
// is not one (it is "required"), and a repeated name is an error. One member
// too many fails before it is read.
func JSONMap[T any](r *JSONReader, most int, read func(*T) error) (map[string]T, error) {
	if c := r.peek(); c != '{' {
		return nil, r.kindError(c)
	}
	r.pos++
	r.first = true
	r.depth++
	out := map[string]T{}
	for r.more('}') {
		if len(out) == most {
			return nil, tooMany(most)
		}
		name, ok := r.name()
		if !ok {
			return nil, r.err
		}
		key := string(name)
		if _, ok := out[key]; ok {
			return nil, &FieldError{Path: membername.Entry(key), Problem: "repeated"}
		}
		if r.null() {
			return nil, &FieldError{Path: membername.Entry(key), Problem: "required"}
		}
		var v T
		if err := read(&v); err != nil {
			return nil, At(membername.Entry(key), err)
		}
		out[key] = v
	}
	r.depth--
	if r.err != nil {
		return nil, r.err
	}
	return out, nil
}

// At puts the path of a *FieldError from a value's reader under prefix, the
// value's own path: the value itself, a member of it, or an element ("[i]").
// Other errors pass as they are.
func At(prefix string, err error) error {
	fe, ok := err.(*FieldError)
	if !ok {
		return err
	}
	switch {
	case fe.Path == "":
		return &FieldError{Path: prefix, Problem: fe.Problem}
	case strings.HasPrefix(fe.Path, "["):
		return &FieldError{Path: prefix + fe.Path, Problem: fe.Problem}
	}
	return &FieldError{Path: prefix + "." + fe.Path, Problem: fe.Problem}
}
