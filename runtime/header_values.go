package runtime

import "time"

// HeaderInt reads a header value of any integer type an AMQP table holds.
// Generated extractors of typed headers call it.
func HeaderInt(v any) (int64, bool) { return asInt64(v) }

// HeaderNumber reads a float or integer header value. Generated extractors of
// typed headers call it.
func HeaderNumber(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case float32:
		return float64(n), true
	}
	i, ok := asInt64(v)
	return float64(i), ok
}

// HeaderTime reads an AMQP timestamp, or an RFC 3339 string from producers
// that cannot set one. Generated extractors of typed headers call it.
func HeaderTime(v any) (time.Time, bool) {
	switch t := v.(type) {
	case time.Time:
		return t, true
	case string:
		parsed, err := time.Parse(time.RFC3339, t)
		return parsed, err == nil
	}
	return time.Time{}, false
}
