package schema

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/internal/membername"
	"github.com/lily-mq/lily/wire"
)

// Check reports, as a *wire.FieldError, whether body and headers make a valid
// message of version v. It interprets the schema the way the generated
// extractors apply it, problem for problem, so that tools can replay examples
// without compiling them; it reads JSON by the same rules, with
// wire.ParseJSON. Where a body has several problems it may name another
// than the extractor, which reports the first in the body's order. A name
// repeated in one object is, as the extractor reports it, "repeated" at the
// path of a field or map key, or a syntax error with its byte offset for a
// member the schema does not know. Headers hold AMQP table values: strings,
// any integer type, float32/float64, bool and time.Time.
func (v *Version) Check(body []byte, headers map[string]any) error {
	return v.check(body, headers, false)
}

// CheckExample is Check worded as a schema error words an example's
// problem: a problem that quotes the schema lists at most 20 of an enum's
// values, then how many more, and quotes a pattern of more than 40 bytes by
// its first 37. It is for reports of examples, such as lilygen breaking's
// replay of one schema's examples against another's, where Check's words,
// the extractor's, would quote a large enum whole in each.
func (v *Version) CheckExample(body []byte, headers map[string]any) error {
	return v.check(body, headers, true)
}

// check is Check; brief words the problems that quote the schema within
// the bounds of a schema error, for an example: an enum's values listed as
// a hint lists names, a pattern shortened. As the extractor words them,
// every example of a 1,000-value enum quoted all its values.
func (v *Version) check(body []byte, headers map[string]any, brief bool) error {
	doc, err := wire.ParseJSON(body)
	if err != nil {
		if refused := refusal(v.Fields, body); refused != nil {
			return refused
		}
		return err
	}
	if doc == nil {
		doc = map[string]any{} // a null body is an object without members
	}
	if err := checkObject(v.Fields, doc, "", brief); err != nil {
		return err
	}
	return checkHeaders(v.Headers, headers, brief)
}

// HeaderPath is the path of a header in a wire.FieldError.
func HeaderPath(name string) string { return "headers." + name }

func checkHeaders(fields []*Field, headers map[string]any, brief bool) error {
	for _, f := range fields {
		path := HeaderPath(f.Name)
		raw, ok := headers[f.Name]
		if !ok || raw == nil {
			if f.Required {
				return &wire.FieldError{Path: path, Problem: "required"}
			}
			continue
		}
		v, ok := headerValue(f.Type, raw)
		if !ok {
			return &wire.FieldError{Path: path, Problem: HeaderTypeProblem(f.Type)}
		}
		// In the generated extractor's order.
		if s, ok := v.(string); ok && HeaderBytesChecked(f) && len(s) > envelope.MaxHeaderValueBytes {
			return &wire.FieldError{Path: path, Problem: fmt.Sprintf("longer than %d bytes", envelope.MaxHeaderValueBytes)}
		}
		if s, ok := v.(string); ok && f.Type == String && !utf8.ValidString(s) {
			return &wire.FieldError{Path: path, Problem: HeaderNotUTF8}
		}
		if problem := checkScalar(f, v, brief); problem != "" {
			return &wire.FieldError{Path: path, Problem: problem}
		}
	}
	return nil
}

// HeaderBytesChecked reports whether the values of string header f are
// checked against the bytes a consumer's guard takes in one value, first, as
// that check costs least: when its characters, of up to 4 bytes, may take
// more. (Those of another string header cannot, once it is UTF-8 and within
// its max_length.)
func HeaderBytesChecked(f *Field) bool {
	return f.Type == String && (f.MaxLength == nil || utf8.UTFMax**f.MaxLength > envelope.MaxHeaderValueBytes)
}

// HeaderNotUTF8 is the problem of a string header that is not UTF-8.
const HeaderNotUTF8 = "not UTF-8"

// HeaderTypeProblem is the problem of a header value of the wrong type.
func HeaderTypeProblem(t Type) string {
	return map[Type]string{
		String: "not a string", Enum: "not a string", Integer: "not an integer",
		Number: "not a number", Bool: "not true or false", Time: "not a timestamp or RFC 3339 time",
	}[t]
}

// headerValue converts an AMQP table value with the wire package's functions,
// as the generated code does.
func headerValue(t Type, v any) (any, bool) {
	switch t {
	case String, Enum:
		s, ok := v.(string)
		return s, ok
	case Bool:
		b, ok := v.(bool)
		return b, ok
	case Integer:
		return wire.HeaderInt(v)
	case Number:
		return wire.HeaderNumber(v)
	case Time:
		return wire.HeaderTime(v)
	}
	return nil, false
}

func checkObject(fields []*Field, v any, prefix string, brief bool) error {
	obj, ok := v.(map[string]any)
	if !ok {
		return typeError(strings.TrimSuffix(prefix, "."), v)
	}
	for _, f := range fields {
		val, present := obj[f.Name] // names match exactly
		path := prefix + f.Name
		if !present || val == nil {
			if f.Required && !(present && f.Nullable) {
				return &wire.FieldError{Path: path, Problem: "required"}
			}
			continue
		}
		if err := checkValue(f, val, path, brief); err != nil {
			return err
		}
	}
	return nil
}

// refusal reads again a body that wire.ParseJSON refuses, with the
// extractor's reader, by the schema's objects, lists and maps (not its
// scalars' types and bounds), and returns the error the extractor's reader
// gives: a syntax error first, wherever it is (for a name repeated in a
// member the schema does not know too); else the first name repeated in the
// body's order, "repeated" at the path of its field or map key, or a null
// element or a value of the wrong kind for an object, list or map read
// before it. ParseJSON stops at the first repeated name, and knows no paths.
func refusal(fields []*Field, body []byte) error {
	r := wire.NewJSONReader(body)
	return r.End(repeatsIn(r, fields))
}

// repeatsIn reads an object of fields from r, each value by its field's
// type, for repeated names alone.
func repeatsIn(r *wire.JSONReader, fields []*Field) error {
	names := make([]wire.JSONField, len(fields))
	for i, f := range fields {
		names[i] = wire.JSONField{Name: f.Name}
	}
	o := r.Object(wire.NewJSONFields(names...))
	for o.Next(r) {
		f := fields[o.Member()]
		if err := repeatsInValue(r, f); err != nil {
			return wire.At(f.Name, err)
		}
	}
	return o.End()
}

func repeatsInValue(r *wire.JSONReader, f *Field) error {
	var err error
	switch f.Type {
	case Object:
		err = repeatsIn(r, f.Fields)
	case List:
		_, err = wire.JSONList(r, wire.Unbounded, func(*struct{}) error { return repeatsInValue(r, f.Items) })
	case Map:
		_, err = wire.JSONMap(r, wire.Unbounded, func(*struct{}) error { return repeatsInValue(r, f.Items) })
	default:
		_, err = r.Raw()
	}
	return err
}

func typeError(path string, v any) error {
	kind := "value"
	switch v.(type) {
	case string:
		kind = "string"
	case json.Number:
		kind = "number"
	case bool:
		kind = "bool"
	case []any:
		kind = "array"
	case map[string]any:
		kind = "object"
	}
	return &wire.FieldError{Path: path, Problem: "unexpected JSON " + kind}
}

// checkValue checks a present, non-null JSON value of f at path.
func checkValue(f *Field, v any, path string, brief bool) error {
	var scalar any
	switch f.Type {
	case String, Enum, Time, Bytes:
		s, ok := v.(string)
		if !ok {
			return typeError(path, v)
		}
		scalar = s
		switch f.Type {
		case Time:
			if _, ok := wire.ParseTime(s); !ok {
				return &wire.FieldError{Path: path, Problem: "not an RFC 3339 time"}
			}
		case Bytes:
			b, err := base64.StdEncoding.DecodeString(s)
			if err != nil {
				return &wire.FieldError{Path: path, Problem: "not base64"}
			}
			scalar = b
		}
	case Integer:
		n, ok := v.(json.Number)
		if !ok {
			return typeError(path, v)
		}
		i, err := strconv.ParseInt(string(n), 10, 64)
		switch {
		case strings.ContainsAny(string(n), ".eE"):
			return &wire.FieldError{Path: path, Problem: "not an integer (a fraction or exponent)"}
		case err != nil:
			return &wire.FieldError{Path: path, Problem: "beyond int64"}
		}
		scalar = i
	case Number:
		n, ok := v.(json.Number)
		if !ok {
			return typeError(path, v)
		}
		x, err := strconv.ParseFloat(string(n), 64)
		if err != nil {
			return &wire.FieldError{Path: path, Problem: "beyond float64's range"}
		}
		scalar = x
	case Bool:
		if _, ok := v.(bool); !ok {
			return typeError(path, v)
		}
	case Object:
		return checkObject(f.Fields, v, path+".", brief)
	case List:
		items, ok := v.([]any)
		if !ok {
			return typeError(path, v)
		}
		if problem := checkCount(f, len(items)); problem != "" {
			return &wire.FieldError{Path: path, Problem: problem}
		}
		for i, item := range items {
			if err := checkElem(f.Items, item, path+"["+strconv.Itoa(i)+"]", brief); err != nil {
				return err
			}
		}
		return nil
	case Map:
		entries, ok := v.(map[string]any)
		if !ok {
			return typeError(path, v)
		}
		if problem := checkCount(f, len(entries)); problem != "" {
			return &wire.FieldError{Path: path, Problem: problem}
		}
		for _, k := range slices.Sorted(maps.Keys(entries)) {
			if err := checkElem(f.Items, entries[k], MapPath(path, k), brief); err != nil {
				return err
			}
		}
		return nil
	}
	if problem := checkScalar(f, scalar, brief); problem != "" {
		return &wire.FieldError{Path: path, Problem: problem}
	}
	return nil
}

// MapPath is the path of the entry key of the map at path, the key quoted
// and bounded as the extractors quote it.
func MapPath(path, key string) string { return path + membername.Entry(key) }

func checkElem(f *Field, v any, path string, brief bool) error {
	if v == nil {
		return &wire.FieldError{Path: path, Problem: "required"}
	}
	return checkValue(f, v, path, brief)
}

func checkCount(f *Field, n int) string {
	return checkRange(f.Limits(), f.MinItems, f.MaxItems, n)
}

// checkScalar checks one decoded value of f: a string (also of an enum), an
// int64, a float64, a bool or the bytes of a bytes field. It returns the
// problem, or "", worded brief or as the extractor words it (see check).
func checkScalar(f *Field, v any, brief bool) string {
	l := f.Limits()
	switch x := v.(type) {
	case string:
		if f.Type == Enum {
			switch {
			case slices.Contains(f.Values, x):
			case brief:
				return "not one of " + listed(f.Values)
			default:
				return f.EnumProblem()
			}
			return ""
		}
		if f.Type != String {
			return ""
		}
		if problem := checkRange(l, f.MinLength, f.MaxLength, utf8.RuneCountInString(x)); problem != "" {
			return problem
		}
		if f.Pattern != "" && !compiled(f.Pattern).MatchString(x) {
			if brief {
				return "does not match " + shorten(f.Pattern)
			}
			return f.PatternProblem()
		}
	case []byte:
		return checkRange(l, f.MinLength, f.MaxLength, len(x))
	case int64:
		return checkRange(l, f.MinInt, f.MaxInt, x)
	case float64:
		return checkRange(l, f.MinNum, f.MaxNum, x)
	}
	return ""
}

func checkRange[T int | int64 | float64](l Limits, lo, hi *T, v T) string {
	switch {
	case lo != nil && v < *lo:
		return l.LoProblem
	case hi != nil && v > *hi:
		return l.HiProblem
	}
	return ""
}

// patterns caches compiled patterns; the parser has already compiled each
// once, so MustCompile cannot fail for a checked schema.
var patterns sync.Map

func compiled(pattern string) *regexp.Regexp {
	if re, ok := patterns.Load(pattern); ok {
		return re.(*regexp.Regexp)
	}
	re := regexp.MustCompile(pattern)
	patterns.Store(pattern, re)
	return re
}
