package wire

import "encoding/json"

// ParseJSON decodes body, one JSON value, by the rules generated extractors
// apply (see JSONReader), into nil, bool, string, json.Number, []any and
// map[string]any. It is for tools that check a body without generated code,
// such as lilygen's check of a schema's examples; it fails with a
// *FieldError without a path, which names the byte offset of the problem.
func ParseJSON(body []byte) (any, error) {
	r := JSONReader{data: body}
	v := r.value(0)
	r.end()
	if r.err != nil {
		return nil, &FieldError{Problem: r.err.Error()}
	}
	return v, nil
}

// value decodes the value at r.pos, nested depth deep.
func (r *JSONReader) value(depth int) any {
	c := r.peek()
	switch c {
	case 0:
		return nil
	case '{', '[':
		if depth == maxJSONDepth {
			r.fail(tooDeep)
			return nil
		}
		r.pos++
		r.first = true
		if c == '[' {
			out := []any{}
			for r.more(']') {
				out = append(out, r.value(depth+1))
			}
			return out
		}
		out := map[string]any{}
		for r.more('}') {
			at := r.space()
			name, ok := r.name()
			if !ok {
				return nil
			}
			// The name may lie in the reader's buffer for unescaped text,
			// which reading the value reuses: copy it first.
			key := string(name)
			if _, ok := out[key]; ok {
				r.repeated(at, name)
				return nil
			}
			out[key] = r.value(depth + 1)
		}
		return out
	case '"':
		t, _ := r.text()
		return string(t)
	case 't':
		return r.literal("true")
	case 'f':
		r.literal("false")
		return false
	case 'n':
		r.literal("null")
		return nil
	}
	if c != '-' && (c < '0' || c > '9') {
		r.fail(invalidChar(c, "at the start of a value"))
		return nil
	}
	span, _, _ := r.number()
	return json.Number(span)
}
