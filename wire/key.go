package wire

import "strconv"

// MemberText returns the text of a top-level member of the JSON object in
// body: a string's value, or a number as written, but -0 as "0". An
// extractor reads -0 as 0, and it is the only other way to write an integer
// that one reads (JSON has no leading zero or +, and an integer's extractor
// refuses a fraction or an exponent), so one integer is one key; an order
// key is never a float. It returns "" when body is not an object, lacks the
// member, holds it as another kind, or breaks the JSON rules before it. It
// reads no further than the member, and skips the others without checking
// that their names are unique: order keys read it, not extractors.
func MemberText(body []byte, name string) string {
	r := NewJSONReader(body)
	if r.peek() != '{' {
		return ""
	}
	r.pos++
	r.first = true
	for r.more('}') {
		n, ok := r.name()
		if !ok {
			return ""
		}
		if string(n) != name {
			r.skip(false)
			continue
		}
		switch c := r.peek(); {
		case c == '"':
			s, err := r.String()
			if err != nil {
				return ""
			}
			return s
		case c == '-' || isDigit(c):
			t, _, err := r.numberText()
			if err != nil {
				return ""
			}
			if string(t) == "-0" { // the extractor's 0: one value, one lane
				return "0"
			}
			return string(t)
		}
		return ""
	}
	return ""
}

// HeaderText returns a header value as text: a string as it is, an integer
// or bool in decimal or as true/false; "" for any other value. Order keys
// read it.
func HeaderText(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case bool:
		return strconv.FormatBool(x)
	case uint:
		// Beyond int64, which asInt64 refuses, but a key all the same.
		return strconv.FormatUint(uint64(x), 10)
	case uint64:
		return strconv.FormatUint(x, 10)
	}
	if n, ok := asInt64(v); ok {
		return strconv.FormatInt(n, 10)
	}
	return ""
}
