package schema

import (
	"fmt"
	"strings"
	"testing"

	"github.com/lily-mq/lily/envelope"
)

// An enum holds at most 1,000 values: the one past them is refused where
// it is written, and none after it is read (the duplicate after it is not
// reported).
func TestEnumValueCap(t *testing.T) {
	schema := func(n int) string {
		var s strings.Builder
		s.WriteString("version: 1\npackage: p\nmessages:\n  M:\n    versions:\n      1:\n        fields:\n          e:\n            type: enum\n            values:\n")
		for i := range n {
			fmt.Fprintf(&s, "              - v%d\n", i)
		}
		return s.String()
	}
	if _, err := Parse("schema.lily.yaml", []byte(schema(1000))); err != nil {
		t.Errorf("Parse of 1,000 values: %v", err)
	}
	src := schema(1001) + "              - v0\n"
	_, err := Parse("schema.lily.yaml", []byte(src))
	// The values from line 11, the 1,001st at line 1011.
	want := `schema.lily.yaml:1011:17: enum "e" has more than 1000 values, the most an enum may have (those after the 1000th are not read) (carry the value in a string field with max_length, and check it in the handler) [OUT-OF-RANGE]`
	if err == nil || err.Error() != want {
		t.Errorf("Parse of 1,002 values: %v\nwant %s", err, want)
	}
}

// An enum value is at most 256 bytes, in a payload or a header, written
// where it is used or in a shared type (refused where it is declared, not
// again where it is used). A limit set after lilygen accepted such
// schemas: the schema is read whole. Within it, an enum header's value is
// within what a consumer's guard takes in one header value: its producer
// sends nothing the guard refuses as poison.
func TestEnumValueLength(t *testing.T) {
	if maxEnumValueBytes > envelope.MaxHeaderValueBytes {
		t.Errorf("an enum value of %d bytes is longer than a header value of %d bytes", maxEnumValueBytes, envelope.MaxHeaderValueBytes)
	}
	most, over, huge := strings.Repeat("a", 256), strings.Repeat("b", 257), strings.Repeat("c", 1<<20)
	src := "version: 1\npackage: p\ntypes:\n  Kind: {type: enum, values: [short, " + over + "]}\nmessages:\n  M:\n    versions:\n      1:\n" +
		"        fields:\n" +
		"          kind: {type: Kind}\n" +
		"          fits: {type: enum, values: [short, " + most + "]}\n" +
		"          huge: {type: enum, values: [" + huge + "]}\n" +
		"        headers:\n" +
		"          x-long: {type: enum, values: [short, " + over + "]}\n" +
		"          x-kind: {type: Kind}\n"
	f, err := Parse("schema.lily.yaml", []byte(src))
	why := func(v string) string {
		return fmt.Sprintf("enum value %q is %d bytes: at most 256 (shorten it: it travels in every message that holds it, and names a Go constant) [OUT-OF-RANGE]", shorten(v), len(v))
	}
	want := "schema.lily.yaml:4:38: " + why(over) + "\n" +
		"schema.lily.yaml:12:39: " + why(huge) + "\n" +
		"schema.lily.yaml:14:48: " + why(over)
	if err == nil || err.Error() != want {
		t.Errorf("Parse: %v\nwant %s", err, want)
	}
	if f == nil || len(f.Types) != 1 || len(f.Messages) != 1 || len(f.Messages[0].Versions[0].Fields) != 3 || len(f.Messages[0].Versions[0].Headers) != 2 {
		t.Errorf("Parse returned no file beside the limit: %+v", f)
	}
}
