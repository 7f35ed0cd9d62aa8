package schema

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// A version a queue consumes that its message does not have is hinted
// with at most maxListed of the versions it has; and a problem past
// maxErrors, only counted, does not gather them: each of many unknown
// versions of a message of many cost time and output of their product
// (10,000 versions and 150,000 unknown ones in 1 MiB: 3 min 30 s, 59 MB
// of errors).
func TestUnknownConsumedVersionHint(t *testing.T) {
	schema := func(unknown int) string {
		var s strings.Builder
		s.WriteString("version: 1\npackage: x\nmessages:\n  A:\n    versions:\n")
		for i := range 1000 {
			fmt.Fprintf(&s, "      %d: {}\n", i+1)
		}
		s.WriteString("queues:\n  q:\n    consumes:\n      - message: A\n        versions: [2000" + strings.Repeat(", 2000", unknown-1) + "]\n")
		return s.String()
	}
	_, err := Parse("s.yaml", []byte(schema(1)))
	want := "s.yaml:1010:20: message A has no version 2000 (it has 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20 and 980 more) [UNKNOWN-REFERENCE]"
	if err == nil || err.Error() != want {
		t.Errorf("Parse: %v\nwant %s", err, want)
	}
	var list ErrorList
	if _, err := Parse("s.yaml", []byte(schema(maxErrors+1))); !errors.As(err, &list) || list[len(list)-1].Rule != RuleTooMany {
		t.Fatalf("Parse of %d unknown versions: %v", maxErrors+1, err)
	}
	// Past maxErrors, 1,000 more unknown versions take about what their
	// YAML takes to read, not 1,000 versions' names each.
	listed, past := schema(maxErrors), schema(2*maxErrors)
	perProblem := (testing.AllocsPerRun(1, func() { Parse("s.yaml", []byte(past)) }) -
		testing.AllocsPerRun(1, func() { Parse("s.yaml", []byte(listed)) })) / maxErrors
	if perProblem > 50 {
		t.Errorf("%.0f allocations for each problem past maxErrors, want at most 50", perProblem)
	}
}
