package schema

import (
	"fmt"
	"strings"
	"testing"
)

// versionsOf is a schema of message M whose versions hold the fields
// each string lists, one a line.
func versionsOf(versions ...[]string) string {
	var s strings.Builder
	s.WriteString("version: 1\npackage: p\nmessages:\n  M:\n    versions:\n")
	for i, fields := range versions {
		fmt.Fprintf(&s, "      %d:\n        fields:\n", i+1)
		for _, f := range fields {
			s.WriteString("          " + f + "\n")
		}
	}
	return s.String()
}

// bools is n boolean fields, named from f0.
func bools(n int, extra string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("f%d: {type: bool%s}", i, extra)
	}
	return out
}

// A version holds at most 1,000 fields, its nested fields, elements and
// headers counted: the one past them is refused where it is named, and
// none after it is read. 20,000 fields of one version took lilygen check
// 13 s and 455 MB, and would generate one extractor of them all.
func TestVersionFieldCap(t *testing.T) {
	full := append(bools(998, ""), "o: {type: object, fields: {a: {type: bool}}}")
	over := append(bools(1000, ""), "nested: {type: object, fields: {a: {type: bool}}}", "after: {type: nope}")
	_, err := Parse("schema.lily.yaml", []byte(versionsOf(full, over)))
	want := `schema.lily.yaml:2009:11: field "nested" takes M version 2 past 1000 fields, the most a version may have, its nested fields, elements and headers together (those after it are not read) (move what travels together into messages of their own) [OUT-OF-RANGE]`
	if err == nil || err.Error() != want {
		t.Errorf("Parse: %v\nwant %s", err, want)
	}
}

// A schema holds at most 50,000 fields, all its versions' and shared
// types' together, as it holds at most 10,000 versions: each costs
// lilygen some 20 KB, and a 4 MiB schema could hold 200,000.
func TestSchemaFieldCap(t *testing.T) {
	versions := make([][]string, 51)
	for i := range versions {
		versions[i] = bools(1000, "")
	}
	_, err := Parse("schema.lily.yaml", []byte(versionsOf(versions...)))
	// Version 51's fields start at line 6 + 50*1002 + 2.
	want := `schema.lily.yaml:50108:11: field "f0" takes the schema past 50000 fields, the most it may have, all versions' and types' together (those after it are not read) (split the messages into schemas of their own) [OUT-OF-RANGE]`
	if err == nil || err.Error() != want {
		t.Errorf("Parse: %v\nwant %s", err, want)
	}
}

// A schema's patterns compile to at most 1,000,000 instructions together:
// each is compiled by lilygen and by the consumer as it starts, and a
// bounded repeat compiles its expression once per repeat ([a-z]{1000}
// takes 1,002). 20,000 such patterns took lilygen lint 29.5 s.
func TestPatternCap(t *testing.T) {
	heavy := ", pattern: '[a-z]{1000}'"
	strs := func() []string {
		out := bools(600, "")
		for i := range out {
			out[i] = fmt.Sprintf("f%d: {type: string%s}", i, heavy)
		}
		return out
	}
	_, err := Parse("schema.lily.yaml", []byte(versionsOf(strs(), strs())))
	// The 999th: version 2's f398.
	want := `schema.lily.yaml:1008:41: pattern of "f398" takes the schema's patterns past 1000000 instructions compiled, the most they may have together (those after it are not read) (a bounded repeat such as {1000} compiles its expression once a repeat: bound the length with max_length instead) [OUT-OF-RANGE]`
	if err == nil || err.Error() != want {
		t.Errorf("Parse: %v\nwant %s", err, want)
	}
}
