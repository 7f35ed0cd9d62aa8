package wire

import "fmt"

// FieldError is a payload that failed to decode or broke a bound of the schema.
// Generated extractors return it; dispatch treats it as a permanent failure.
type FieldError struct {
	// Path is the field's path in the payload, such as "items[2].sku";
	// empty when the body as a whole does not decode.
	Path    string
	Problem string
}

func (e *FieldError) Error() string {
	if e.Path == "" {
		return "payload: " + e.Problem
	}
	return fmt.Sprintf("field %s: %s", e.Path, e.Problem)
}
