package lilytest_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// docs/runtime.md lists what the fake broker leaves to a test apart from
// the package's fakes: one list run on into the next would say that Inbox,
// Recorder and RawDelivery are things the broker does.
func TestDocsListTheBrokersWorkApart(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "runtime.md"))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, list := range lists(string(data)) {
		if !strings.Contains(strings.Join(list, "\n"), "x-delivery-count") {
			continue
		}
		found = true
		for _, item := range list {
			if strings.HasPrefix(item, "- `lilytest.") {
				t.Errorf("docs/runtime.md: %q is in the list of what the broker does", item)
			}
		}
	}
	if !found {
		t.Error("docs/runtime.md: no list names x-delivery-count, the broker's work the test looks for")
	}
}

// lists returns the bullet lists of markdown md, each item its first line,
// as CommonMark reads them: items apart only by blank lines, with indented
// lines within them, are one list; any other line ends it.
func lists(md string) [][]string {
	var out [][]string
	var list []string
	for line := range strings.SplitSeq(md, "\n") {
		switch {
		case strings.HasPrefix(line, "- "):
			list = append(list, line)
		case line == "" || strings.HasPrefix(line, "  ") && list != nil:
		default:
			if list != nil {
				out = append(out, list)
			}
			list = nil
		}
	}
	if list != nil {
		out = append(out, list)
	}
	return out
}
