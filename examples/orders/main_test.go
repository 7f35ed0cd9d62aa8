package main

import (
	"flag"
	"io"
	"strings"
	"testing"
)

// -clean's help says all it deletes: cleanUp drops the checkout's
// PostgreSQL schema too, as make help and the README say.
func TestCleanHelpNamesAllItDeletes(t *testing.T) {
	fs := flag.NewFlagSet("orders", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	defineFlags(fs)
	usage := fs.Lookup("clean").Usage
	for _, what := range []string{"queues", "retry buckets", "DLQs", "exchange", "PostgreSQL schema " + demoSchema} {
		if !strings.Contains(usage, what) {
			t.Errorf("-clean's help does not name the %s it deletes: %q", what, usage)
		}
	}
}
