package asyncapi

import (
	"fmt"

	"gopkg.in/yaml.v3"

	"github.com/lily-mq/lily/schema"
)

// The JSON Schema of a payload states what Lily's extractor accepts, key by
// key: types, presence, null, bounds, patterns, enum values, elements and map
// values. Unknown members are accepted, as the extractor ignores them, so
// objects leave additionalProperties open. Patterns are RE2, as Lily checks
// them; those that would not read the same as the ECMA 262 patterns JSON
// Schema means go to x-lily-pattern instead (pattern.go).

// place is where a field stands, which decides whether null is a value.
type place int

const (
	inObject  place = iota // a payload's or object's field: null when nullable, or optional
	inElement              // a list's element or a map's value: never null
	inHeaders              // an AMQP header: tables hold no null
)

// schemaPointer is the reference to shared type name's schema.
func schemaPointer(name string) string { return "#/components/schemas/" + name }

// payloadSchema is the schema of v's body.
func payloadSchema(v *schema.Version) *yaml.Node {
	o := objectSchema(v.Fields, false)
	if v.DeprecatedSince != "" {
		o.set("deprecated", boolean(true))
	}
	return o.mapping()
}

// sharedSchemas are the schemas of the shared types some version uses, by
// name, for components.schemas.
func sharedSchemas(f *schema.File) *yaml.Node {
	o := newObject()
	for _, t := range f.UsedTypes() {
		o.set(t.Named, valueSchema(t, false).mapping())
	}
	return o.node()
}

// objectSchema is the schema of an object with fields.
func objectSchema(fields []*schema.Field, nullable bool) object {
	o := newObject().set("type", typeName("object", nullable))
	props := newObject()
	var required []string
	for _, f := range fields {
		props.set(f.Name, fieldSchema(f, inObject))
		if f.Required {
			required = append(required, f.Name)
		}
	}
	o.set("properties", props.node())
	if len(required) > 0 {
		o.set("required", strs(required))
	}
	return o
}

// fieldSchema is the schema of field f standing at p: a shared type by
// reference, any other type in full, null added where it is a value.
func fieldSchema(f *schema.Field, p place) *yaml.Node {
	// An optional field accepts null as it accepts absence.
	nullable := p == inObject && (f.Nullable || !f.Required)
	var o object
	switch {
	case f.Named != "" && !nullable:
		return ref(schemaPointer(f.Named))
	case f.Named != "":
		// draft-07 ignores a $ref's siblings, so null and the default
		// stand beside it in a oneOf.
		o = newObject().set("oneOf", list(ref(schemaPointer(f.Named)), newObject().set("type", str("null")).mapping()))
	default:
		o = valueSchema(f, nullable)
	}
	if f.Default != nil {
		o.set("default", value(f.Default))
	}
	return o.mapping()
}

// valueSchema is the schema of a value of f's own type (a shared type's
// declaration included), with null when nullable.
func valueSchema(f *schema.Field, nullable bool) object {
	switch f.Type {
	case schema.Object:
		return objectSchema(f.Fields, nullable)
	case schema.List:
		o := newObject().set("type", typeName("array", nullable)).set("items", fieldSchema(f.Items, inElement))
		return bounds(o, "minItems", "maxItems", f.MinItems, f.MaxItems)
	case schema.Map:
		o := newObject().set("type", typeName("object", nullable)).set("additionalProperties", fieldSchema(f.Items, inElement))
		return bounds(o, "minProperties", "maxProperties", f.MinItems, f.MaxItems)
	case schema.Enum:
		values := strs(f.Values)
		if nullable {
			// enum restricts every value, null too.
			values.Content = append(values.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"})
		}
		return newObject().set("type", typeName("string", nullable)).set("enum", values)
	case schema.Integer:
		// int64's own range where the schema sets no bound: values are
		// read as int64s. YAML writes its ends exactly.
		lo, hi := f.Int.Range()
		if f.MinInt != nil {
			lo = *f.MinInt
		}
		if f.MaxInt != nil {
			hi = *f.MaxInt
		}
		return newObject().set("type", typeName("integer", nullable)).set("minimum", integer(lo)).set("maximum", integer(hi))
	case schema.Number:
		o := newObject().set("type", typeName("number", nullable))
		if f.MinNum != nil {
			o.set("minimum", number(*f.MinNum))
		}
		if f.MaxNum != nil {
			o.set("maximum", number(*f.MaxNum))
		}
		return o
	case schema.Bool:
		return newObject().set("type", typeName("boolean", nullable))
	case schema.Time:
		return dateTime(newObject().set("type", typeName("string", nullable)))
	case schema.Bytes:
		return bytesSchema(f, nullable)
	}
	o := newObject().set("type", typeName("string", nullable))
	bounds(o, "minLength", "maxLength", f.MinLength, f.MaxLength)
	switch {
	case f.Pattern == "":
	case ecmaPattern(f.Pattern):
		o.set("pattern", str(ecmaDots(f.Pattern)))
	default:
		o.set("x-lily-pattern", str(f.Pattern))
	}
	return o
}

// bytesSchema is the schema of base64 text. Lily bounds the decoded bytes,
// which JSON Schema cannot: the text's lengths are those the bounds imply
// (four characters per three bytes, padded), the exact bounds are stated.
func bytesSchema(f *schema.Field, nullable bool) object {
	o := newObject().set("type", typeName("string", nullable)).set("contentEncoding", str("base64"))
	encoded := func(n *int) *int {
		if n == nil {
			return nil
		}
		e := (*n + 2) / 3 * 4
		return &e
	}
	bounds(o, "minLength", "maxLength", encoded(f.MinLength), encoded(f.MaxLength))
	what := "Standard base64 with padding"
	switch lo, hi := f.MinLength, f.MaxLength; {
	case lo != nil && hi != nil:
		what += fmt.Sprintf("; %d to %d bytes once decoded", *lo, *hi)
	case lo != nil:
		what += fmt.Sprintf("; at least %d bytes once decoded", *lo)
	case hi != nil:
		what += fmt.Sprintf("; at most %d bytes once decoded", *hi)
	}
	return o.set("description", str(what+"."))
}

// bounds sets a pair of count bounds that the schema names.
func bounds(o object, minKey, maxKey string, lo, hi *int) object {
	if lo != nil {
		o.set(minKey, integer(*lo))
	}
	if hi != nil {
		o.set(maxKey, integer(*hi))
	}
	return o
}

// typeName is a JSON Schema type, or the pair of it and null.
func typeName(t string, nullable bool) *yaml.Node {
	if nullable {
		return list(str(t), str("null"))
	}
	return str(t)
}
