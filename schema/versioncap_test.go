package schema

import (
	"fmt"
	"strings"
	"testing"
)

// A schema holds at most 10,000 versions, all its messages' together: the
// one past them is refused where it is declared, and none after it is
// read (no error of theirs is listed).
func TestVersionCapCountsEveryMessage(t *testing.T) {
	schema := func(a, b int) string {
		var s strings.Builder
		s.WriteString("version: 1\npackage: p\nmessages:\n  A:\n    versions:\n")
		for i := range a {
			fmt.Fprintf(&s, "      %d: {}\n", i+1)
		}
		s.WriteString("  B:\n    versions:\n")
		for i := range b {
			fmt.Fprintf(&s, "      %d: {}\n", i+1)
		}
		s.WriteString("      0: {}\n") // past the cap too: not read, not reported
		return s.String()
	}
	if _, err := Parse("schema.lily.yaml", []byte(strings.Replace(schema(6000, 4000), "      0: {}\n", "", 1))); err != nil {
		t.Errorf("Parse of 10,000 versions: %v", err)
	}
	_, err := Parse("schema.lily.yaml", []byte(schema(6000, 4002)))
	// A's 6000 versions from line 6, B's from line 6008.
	want := "schema.lily.yaml:10008:7: B version 4001 takes the schema past 10000 versions, the most it may have, all messages' together (those after it are not read) (remove the versions no producer sends any more, or split the messages into schemas of their own) [OUT-OF-RANGE]"
	if err == nil || err.Error() != want {
		t.Errorf("Parse of 10,003 versions: %v\nwant %s", err, want)
	}
}
