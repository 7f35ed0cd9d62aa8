package wire

import "fmt"

// FieldError is a payload that failed to decode or broke a bound of the schema.
// Generated extractors and producers return it. The runtime does not look for
// it: a generated route wraps its extractor's FieldError in runtime.Permanent,
// so the message goes to the DLQ at once, and a route written by hand must wrap
// it so too (runtime.Routes says so), or it is a plain error, which the runtime
// retries.
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
