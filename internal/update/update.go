// Package update says whether tests should rewrite their golden files. It
// defines the -update test flag once for the whole module: `go test ./...
// -update` passes the flag to every test binary, and a binary that does not
// define it fails, so each test package of the module imports this package
// (a blank import will do). LILY_UPDATE=1 does the same without the flag.
package update

import (
	"flag"
	"os"
)

var update = flag.Bool("update", false, "rewrite golden files instead of comparing with them (or set LILY_UPDATE=1)")

// Enabled reports whether golden files are to be rewritten.
func Enabled() bool { return *update || os.Getenv("LILY_UPDATE") == "1" }
