// Package membername quotes a JSON member name from a message body for an
// error. The wire package's extractors and lilygen's schema checker, which
// promises their problems word for word, share it, without a name in wire's
// public face.
package membername

import "strconv"

// MaxBytes is how much of a name an error quotes: a member name is the
// producer's, of any length.
const MaxBytes = 64

// Quote quotes name as a Go string, shortened to its first MaxBytes bytes
// and "…".
func Quote[S ~string | ~[]byte](name S) string {
	if len(name) > MaxBytes {
		return strconv.Quote(string(name[:MaxBytes])) + "…"
	}
	return strconv.Quote(string(name))
}

// Entry is the path of a map's member key, relative to the map: the key
// quoted in brackets, as in labels["team"].
func Entry(key string) string { return "[" + Quote(key) + "]" }
