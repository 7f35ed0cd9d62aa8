package ordersmsg

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/lily-mq/lily/wire"
)

// The fuzz targets hold each generated extractor of the example to its
// schema (orders.lily.yaml, as docs/schema.md defines the types): it never
// panics, fails only with a *wire.FieldError, and accepts exactly the
// bodies (and headers) an independent check written here accepts, with the
// same values.
//
// The check reads JSON as docs/schema.md says: names match exactly; a body is
// refused when any object in it repeats a name, when it holds invalid UTF-8
// or a lone surrogate escape, or when it nests deeper than 1,000 (counted
// from its root, the body's object being the first level); null is absence. It reads the tokens with
// encoding/json's tokenizer, so strings are unquoted as the extractor sees
// them once those rules hold; every rule of the schema, the integer rule and
// RFC 3339 are its own.

func FuzzExtractOrderPlacedV1(f *testing.F) {
	for _, seed := range []string{
		`{"order_id":"order-1","amount_cents":1250}`,
		`{"order_id":"order-2","amount_cents":99,"note":"leave at the door"}`,
		`{"ORDER_ID":"x","Amount_Cents":100000000,"note":null,"extra":[1,{"a":null}]}`,
		`{"order_id":"x","amount_cents":100000000,"note":null,"extra":[1,{"a":null,"a":1}]}`,
		`{"order_id":"x","amount_cents":1,"x":1,"x":2}`,
		`{"order_id":"\ud83d\ude00","amount_cents":1,"x":"\\ud800"}`,
		`{"order_id":"x","amount_cents":1,"x":"\udc00"}`,
		`{"order_id":"x","amount_cents":1,"x":` + strings.Repeat("[", 1001) + strings.Repeat("]", 1001) + `}`,
		`{"order_id":"x","amount_cents":1,"x":` + strings.Repeat("[", 1000) + strings.Repeat("]", 1000) + `}`,
		`{"order_id":"x","amount_cents":1,"x":` + strings.Repeat("[", 999) + strings.Repeat("]", 999) + `}`,
		`{"order_id":"","amount_cents":1,"x":` + strings.Repeat("[", 1000) + strings.Repeat("]", 1000) + `}`,
		`{"order_id":"","amount_cents":1}`,
		`{"order_id":"a","amount_cents":0}`,
		`{"order_id":"a","amount_cents":1.0}`,
		`{"order_id":"a","amount_cents":1e2}`,
		`{"order_id":"a","amount_cents":9223372036854775808}`,
		`{"order_id":"a","amount_cents":"1"}`,
		`{"order_id":"a","order_id":null,"amount_cents":1}`,
		`{"order_id":"\ud800\u00e9\u0000","amount_cents":1}`,
		"{\"order_id\":\"\xff\xfe\",\"amount_cents\":1}",
		`{"order_id":"` + strings.Repeat("é", 64) + `","amount_cents":1}`,
		`{"order_id":"` + strings.Repeat("é", 65) + `","amount_cents":1}`,
		`{"order_id":"a","amount_cents":1,"note":"` + strings.Repeat("n", 201) + `"}`,
		`null`, `[]`, `"x"`, `{`, `{"order_id":"a","amount_cents":1} {}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, err := ExtractOrderPlacedV1(body)
		want, why := checkV1(body)
		compare(t, body, got, err, want, why, func(got, want *OrderPlacedV1) bool {
			return got.OrderID == want.OrderID && got.AmountCents == want.AmountCents && sameString(got.Note, want.Note)
		})
	})
}

func FuzzExtractOrderPlacedV2(f *testing.F) {
	good := `{"order_id":"order-3","amount_cents":4200,"customer":{"email":"ada@example.com","name":"Ada"},` +
		`"items":[{"sku":"LILY-1","qty":2}],"placed_at":"2026-12-02T10:00:00Z"}`
	for _, seed := range []string{
		good,
		`{"order_id":"order-4","amount_cents":100,"customer":{"email":"grace@example.com"},"items":[{"sku":"A-1","qty":1},{"sku":"B-2","qty":3}],"placed_at":"2026-12-02T10:05:00+01:00","channel":"store"}`,
		strings.Replace(good, `"Z"`, `".123456789123-23:59"`, 1),
		strings.Replace(good, `10:00:00Z`, `10:00:60Z`, 1),
		strings.Replace(good, `2026-12-02`, `2024-02-29`, 1),
		strings.Replace(good, `2026-12-02`, `2026-02-29`, 1),
		strings.Replace(good, `T10`, `t10`, 1),
		strings.Replace(good, `"items":[{"sku":"LILY-1","qty":2}]`, `"items":[]`, 1),
		strings.Replace(good, `"items":[{"sku":"LILY-1","qty":2}]`, `"items":[null]`, 1),
		strings.Replace(good, `"items":[{"sku":"LILY-1","qty":2}]`, `"items":[{"sku":"a","qty":1}],"items":[{"qty":5}]`, 1),
		strings.Replace(good, `"items":[{"sku":"LILY-1","qty":2}]`, `"items":[{"sku":"a","qty":1},{"sku":"b","qty":1}],"items":[{"qty":2}],"items":[{"qty":3},{"qty":4}]`, 1),
		strings.Replace(good, `"customer":{`, `"customer":{"email":"e"},"customer":{`, 1),
		strings.Replace(good, `"customer":{"email":"ada@example.com","name":"Ada"}`, `"customer":{"email":"e"},"customer":{"name":"n"}`, 1),
		strings.Replace(good, `"customer":{"email":"ada@example.com","name":"Ada"}`, `"customer":{"email":"e"},"customer":null`, 1),
		good[:len(good)-1] + `,"channel":"fax"}`,
		good[:len(good)-1] + `,"CHANNEL":"phone","channel":null}`,
		`{"items":[` + strings.Repeat(`{"sku":"s","qty":1},`, 50) + `{"sku":"s","qty":1}]}`,
		strings.Replace(good, `"qty":2}`, `"qty":2,"x":`+strings.Repeat("[", 997)+strings.Repeat("]", 997)+`}`, 1),
		strings.Replace(good, `"qty":2}`, `"qty":2,"x":`+strings.Repeat("[", 998)+strings.Repeat("]", 998)+`}`, 1),
	} {
		f.Add([]byte(seed), "acme", uint8(1), "4bf92f3577b34da6", uint8(1))
	}
	f.Add([]byte(good), "Acme", uint8(1), "", uint8(0))
	f.Add([]byte(good), "acme\n", uint8(1), "", uint8(3))
	f.Add([]byte(good), "", uint8(2), strings.Repeat("t", 65), uint8(1))
	f.Add([]byte(good), "a-"+strings.Repeat("b", 30), uint8(3), "x", uint8(2))
	f.Add([]byte(good), "acme", uint8(1), "\xff\xfe\x1b[2J\x00", uint8(1))
	f.Fuzz(func(t *testing.T, body []byte, tenant string, tenantKind uint8, trace string, traceKind uint8) {
		got, err := ExtractOrderPlacedV2(body)
		want, why := checkV2(body)
		compare(t, body, got, err, want, why, sameV2)
		headers := map[string]any{}
		setHeader(headers, "x-tenant", tenant, tenantKind)
		setHeader(headers, "x-trace-id", trace, traceKind)
		gotH, err := extractOrderPlacedV2Headers(func(k string) (any, bool) { v, ok := headers[k]; return v, ok })
		wantH, why := checkV2Headers(headers)
		compare(t, []byte(fmtHeaders(headers)), &gotH, err, wantH, why, func(got, want *OrderPlacedV2Headers) bool {
			return got.XTenant == want.XTenant && sameString(got.XTraceID, want.XTraceID)
		})
	})
}

// compare fails the test unless the extractor and the check agree.
func compare[T any](t *testing.T, input []byte, got *T, err error, want *T, why string, same func(got, want *T) bool) {
	t.Helper()
	var fe *wire.FieldError
	switch {
	case err != nil && !errors.As(err, &fe):
		t.Fatalf("%q: failed with %T %v, not a *wire.FieldError", input, err, err)
	case err != nil && want != nil:
		t.Fatalf("%q: refused (%v), but it is within every bound", input, err)
	case err == nil && want == nil:
		t.Fatalf("%q: accepted as %+v, but %s", input, *got, why)
	case err == nil && !same(got, want):
		t.Fatalf("%q: extracted %+v, want %+v", input, *got, *want)
	}
}

func sameString(a, b *string) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

func sameV2(got, want *OrderPlacedV2) bool {
	if got.OrderID != want.OrderID || got.AmountCents != want.AmountCents || !sameString(got.Note, want.Note) ||
		got.Customer.Email != want.Customer.Email || !sameString(got.Customer.Name, want.Customer.Name) ||
		!got.PlacedAt.Equal(want.PlacedAt) || got.Channel != want.Channel || len(got.Items) != len(want.Items) {
		return false
	}
	for i := range got.Items {
		if got.Items[i] != want.Items[i] {
			return false
		}
	}
	return true
}

// A JSON value as the check decodes it: nil (null), string, json.Number,
// bool, []any, or *object (keys in order, repeats kept).
type object struct {
	keys   []string
	values []any
}

// parse decodes one JSON document, or says why it is not one.
func parse(body []byte) (any, error) {
	switch {
	case !json.Valid(body):
		return nil, errors.New("not valid JSON")
	case !utf8.Valid(body):
		return nil, errors.New("invalid UTF-8")
	case loneSurrogate(body):
		return nil, errors.New("a lone surrogate escape")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	v, err := value(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("more than one JSON value")
	}
	if nesting(v) > 1000 {
		return nil, errors.New("nested deeper than 1,000")
	}
	return v, nil
}

// escapes matches each escape of a valid JSON body, left to right, so that an
// escaped backslash is never taken for the start of another escape.
var escapes = regexp.MustCompile(`\\(u[0-9a-fA-F]{4}|[^u])`)

// loneSurrogate reports whether a \u escape of body is half a surrogate pair
// without its other half right beside it.
func loneSurrogate(body []byte) bool {
	end, high := -1, false
	for _, m := range escapes.FindAllSubmatchIndex(body, -1) {
		var u uint64 // not a surrogate unless a \u escape says so
		if body[m[2]] == 'u' {
			u, _ = strconv.ParseUint(string(body[m[2]+1:m[3]]), 16, 32)
		}
		low, paired := u >= 0xDC00 && u <= 0xDFFF, high && m[0] == end
		if high && !(paired && low) || low && !paired {
			return true
		}
		high, end = u >= 0xD800 && u <= 0xDBFF, m[1]
	}
	return high
}

func value(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch tok {
	case json.Delim('{'):
		o := &object{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return nil, err
			}
			v, err := value(dec)
			if err != nil {
				return nil, err
			}
			if slices.Contains(o.keys, k.(string)) {
				return nil, errors.New("a repeated name")
			}
			o.keys, o.values = append(o.keys, k.(string)), append(o.values, v)
		}
		_, err := dec.Token()
		return o, err
	case json.Delim('['):
		var a []any
		for dec.More() {
			v, err := value(dec)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		_, err := dec.Token()
		return a, err
	}
	return tok, nil
}

// A wire value, as decoding leaves it before the schema's bounds: nil when
// absent or null, string, int64, fields, or []any (a list's elements).
type fields map[string]any

// shape says, per field of an object, how it decodes: "string", "int", an
// object's shape, or a list of an object's shape.
type shape map[string]any

type listOf struct{ elem shape }

var (
	shapeV1       = shape{"order_id": "string", "amount_cents": "int", "note": "string"}
	shapeCustomer = shape{"email": "string", "name": "string"}
	shapeItem     = shape{"sku": "string", "qty": "int"}
	shapeV2       = shape{"order_id": "string", "amount_cents": "int", "note": "string", "customer": shapeCustomer,
		"items": listOf{shapeItem}, "placed_at": "string", "channel": "string"}
)

// decode decodes v by s; false means a JSON value of the wrong kind, which
// fails the whole decoding.
func decode(s any, v any) (any, bool) {
	if v == nil {
		return nil, true
	}
	switch s := s.(type) {
	case string:
		switch x := v.(type) {
		case string:
			return x, s == "string"
		case json.Number:
			n, err := strconv.ParseInt(x.String(), 10, 64)
			return n, s == "int" && err == nil
		}
		return nil, false
	case shape:
		o, ok := v.(*object)
		if !ok {
			return nil, false
		}
		f := fields{}
		for i, k := range o.keys {
			fs, known := s[k]
			if !known {
				continue
			}
			nv, ok := decode(fs, o.values[i])
			if !ok {
				return nil, false
			}
			f[k] = nv
		}
		return f, true
	case listOf:
		a, ok := v.([]any)
		if !ok {
			return nil, false
		}
		out := []any{}
		for _, e := range a {
			ne, ok := decode(s.elem, e)
			if !ok {
				return nil, false
			}
			out = append(out, ne)
		}
		return out, true
	}
	panic("unknown shape")
}

// nesting counts the arrays and objects around the deepest value in v.
func nesting(v any) int {
	var inner []any
	switch x := v.(type) {
	case []any:
		inner = x
	case *object:
		inner = x.values
	default:
		return 0
	}
	deepest := 0
	for _, e := range inner {
		deepest = max(deepest, nesting(e))
	}
	return deepest + 1
}

// byModel parses body and decodes it by s; nil and a reason when it does not.
func byModel(body []byte, s shape) (fields, string) {
	v, err := parse(body)
	if err != nil {
		return nil, err.Error()
	}
	if v == nil {
		return fields{}, "" // null leaves every field absent
	}
	f, ok := decode(s, v)
	if !ok {
		return nil, "a value is of the wrong JSON kind"
	}
	return f.(fields), ""
}

// chars counts characters as the schema does: runes, an invalid byte being one.
func chars(s string) int {
	n := 0
	for range s {
		n++
	}
	return n
}

func text(f fields, name string, required bool, minChars, maxChars int) (*string, string) {
	s, ok := f[name].(string)
	switch {
	case !ok && required:
		return nil, name + " is required"
	case !ok:
		return nil, ""
	case chars(s) < minChars || chars(s) > maxChars:
		return nil, name + " is not " + strconv.Itoa(minChars) + " to " + strconv.Itoa(maxChars) + " characters"
	}
	return &s, ""
}

func integer(f fields, name string, lo, hi int64) (int64, string) {
	n, ok := f[name].(int64)
	switch {
	case !ok:
		return 0, name + " is required"
	case n < lo || n > hi:
		return 0, name + " is out of range"
	}
	return n, ""
}

func checkV1(body []byte) (*OrderPlacedV1, string) {
	f, why := byModel(body, shapeV1)
	if f == nil {
		return nil, why
	}
	var out OrderPlacedV1
	if why := common(f, &out.OrderID, &out.AmountCents, &out.Note); why != "" {
		return nil, why
	}
	return &out, ""
}

// common checks the fields v1 and v2 share.
func common(f fields, orderID *string, cents *int64, note **string) string {
	id, why := text(f, "order_id", true, 1, 64)
	if why != "" {
		return why
	}
	*orderID = *id
	if *cents, why = integer(f, "amount_cents", 1, 100000000); why != "" {
		return why
	}
	*note, why = text(f, "note", false, 0, 200)
	return why
}

func checkV2(body []byte) (*OrderPlacedV2, string) {
	f, why := byModel(body, shapeV2)
	if f == nil {
		return nil, why
	}
	var out OrderPlacedV2
	if why := common(f, &out.OrderID, &out.AmountCents, &out.Note); why != "" {
		return nil, why
	}
	c, ok := f["customer"].(fields)
	if !ok {
		return nil, "customer is required"
	}
	email, why := text(c, "email", true, 0, 254)
	if why != "" {
		return nil, why
	}
	out.Customer.Email = *email
	if out.Customer.Name, why = text(c, "name", false, 0, 100); why != "" {
		return nil, why
	}
	l, ok := f["items"].([]any)
	if !ok || len(l) < 1 || len(l) > 50 {
		return nil, "items is not a list of 1 to 50"
	}
	for _, e := range l {
		item, ok := e.(fields)
		if !ok {
			return nil, "an item is null"
		}
		sku, why := text(item, "sku", true, 1, 32)
		if why != "" {
			return nil, why
		}
		qty, why := integer(item, "qty", 1, 1000)
		if why != "" {
			return nil, why
		}
		out.Items = append(out.Items, OrderPlacedV2ItemsItem{SKU: *sku, Qty: qty})
	}
	placed, ok := f["placed_at"].(string)
	if !ok {
		return nil, "placed_at is required"
	}
	if out.PlacedAt, ok = rfc3339(placed); !ok {
		return nil, "placed_at is not an RFC 3339 date-time"
	}
	out.Channel = OrderPlacedV2ChannelWeb
	if ch, ok := f["channel"].(string); ok {
		if ch != "web" && ch != "store" && ch != "phone" {
			return nil, "channel is not web, store or phone"
		}
		out.Channel = OrderPlacedV2Channel(ch)
	}
	return &out, ""
}

// rfc3339 reads an RFC 3339 (section 5.6) date-time, with "T" and "Z" in
// upper case (the restriction section 5.6 allows) and without leap seconds
// (Go's time has none).
func rfc3339(s string) (time.Time, bool) {
	digits := func(s string) (int, bool) {
		n := 0
		for _, c := range []byte(s) {
			if c < '0' || c > '9' {
				return 0, false
			}
			n = n*10 + int(c-'0')
		}
		return n, s != ""
	}
	if len(s) < len("2006-01-02T15:04:05Z") || s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':' {
		return time.Time{}, false
	}
	year, ok1 := digits(s[0:4])
	month, ok2 := digits(s[5:7])
	day, ok3 := digits(s[8:10])
	hour, ok4 := digits(s[11:13])
	minute, ok5 := digits(s[14:16])
	second, ok6 := digits(s[17:19])
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || !ok6 || month < 1 || month > 12 || hour > 23 || minute > 59 || second > 59 {
		return time.Time{}, false
	}
	leap := year%4 == 0 && (year%100 != 0 || year%400 == 0)
	days := [13]int{0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}[month]
	if month == 2 && leap {
		days = 29
	}
	if day < 1 || day > days {
		return time.Time{}, false
	}
	rest, nanos := s[19:], 0
	if strings.HasPrefix(rest, ".") {
		end := 1
		for end < len(rest) && rest[end] >= '0' && rest[end] <= '9' {
			end++
		}
		if end == 1 {
			return time.Time{}, false
		}
		frac := (rest[1:end] + "000000000")[:9]
		nanos, _ = digits(frac)
		rest = rest[end:]
	}
	offset := 0
	switch {
	case rest == "Z":
	case len(rest) == 6 && (rest[0] == '+' || rest[0] == '-') && rest[3] == ':':
		oh, ok1 := digits(rest[1:3])
		om, ok2 := digits(rest[4:6])
		if !ok1 || !ok2 || oh > 23 || om > 59 {
			return time.Time{}, false
		}
		offset = oh*3600 + om*60
		if rest[0] == '-' {
			offset = -offset
		}
	default:
		return time.Time{}, false
	}
	return time.Date(year, time.Month(month), day, hour, minute, second, nanos, time.FixedZone("", offset)), true
}

// setHeader puts value in headers as kind says: 0 absent, 1 a string, 2 an
// integer, 3 a null (void) value.
func setHeader(headers map[string]any, key, value string, kind uint8) {
	switch kind % 4 {
	case 1:
		headers[key] = value
	case 2:
		headers[key] = int64(len(value))
	case 3:
		headers[key] = nil
	}
}

func fmtHeaders(h map[string]any) string {
	var b strings.Builder
	for _, k := range []string{"x-tenant", "x-trace-id"} {
		if v, ok := h[k]; ok {
			b.WriteString(k + "=" + strconv.Quote(stringOf(v)) + " ")
		}
	}
	return b.String()
}

func stringOf(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case int64:
		return "int " + strconv.FormatInt(v, 10)
	}
	return "null"
}

func checkV2Headers(h map[string]any) (*OrderPlacedV2Headers, string) {
	var out OrderPlacedV2Headers
	switch tenant := h["x-tenant"].(type) {
	case nil:
		return nil, "x-tenant is required"
	case string:
		if chars(tenant) < 1 || chars(tenant) > 32 {
			return nil, "x-tenant is not 1 to 32 characters"
		}
		for i, c := range []byte(tenant) {
			if !(c >= 'a' && c <= 'z' || i > 0 && (c >= '0' && c <= '9' || c == '-')) {
				return nil, "x-tenant does not match ^[a-z][a-z0-9-]*$"
			}
		}
		out.XTenant = tenant
	default:
		return nil, "x-tenant is not a string"
	}
	switch trace := h["x-trace-id"].(type) {
	case nil:
	case string:
		if !utf8.ValidString(trace) {
			return nil, "x-trace-id is not UTF-8"
		}
		if chars(trace) > 64 {
			return nil, "x-trace-id is longer than 64 characters"
		}
		out.XTraceID = &trace
	default:
		return nil, "x-trace-id is not a string"
	}
	return &out, ""
}
