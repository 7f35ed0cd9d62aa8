package main

import (
	"os"
	"strings"
	"testing"
)

// TestMain runs the tests with no GIT_* variable set. Run from a git hook
// or `git rebase -x`, git's environment (GIT_DIR, GIT_INDEX_FILE, …) would
// point the tests' own repositories, and lilygen's git, at the repository
// the tests run in: their commits would land there, and their git init
// would make it bare.
func TestMain(m *testing.M) {
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "GIT_") {
			os.Unsetenv(k)
		}
	}
	os.Exit(m.Run())
}
