package gen

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/lily-mq/lily/schema"
)

// nestedTypes is a schema of shared types T1 to Tn, T1 of the fields leaf,
// each other of width fields of the type before it, and a produced message
// of a Tn: Tn has width^(n-1) uses of T1.
func nestedTypes(n, width int, leaf string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "version: 1\npackage: nested\ntypes:\n  T1: {type: object, fields: {%s}}\n", leaf)
	for k := 2; k <= n; k++ {
		fmt.Fprintf(&b, "  T%d:\n    type: object\n    fields:\n", k)
		for i := range width {
			fmt.Fprintf(&b, "      f%d: {type: T%d}\n", i, k-1)
		}
	}
	fmt.Fprintf(&b, "messages:\n  Nested:\n    versions:\n      1:\n        fields:\n          t: {type: T%d}\n", n)
	return []byte(b.String())
}

// Each shared type is walked once, however many uses reach it: walking it
// again at each would take time exponential in how deep types nest.
func TestMarshalChecksWalkEachTypeOnce(t *testing.T) {
	for leaf, want := range map[string]bool{
		"a: {type: integer}, b: {type: bool}": false,
		"a: {type: integer}, b: {type: time}": true,
	} {
		f, err := schema.Parse("nested.lily.yaml", nestedTypes(8, 2, leaf))
		if err != nil {
			t.Fatal(err)
		}
		walks := map[string]int{}
		checks := answerTypes(f.Types, func(f *schema.Field, inner func(*schema.Field) bool) bool {
			walks[f.Named]++
			return marshalChecked(f, inner)
		})
		for k := 1; k <= 8; k++ {
			name := fmt.Sprintf("T%d", k)
			if walks[name] != 1 {
				t.Errorf("%s: %s walked %d times, want once", leaf, name, walks[name])
			}
			if checks[name] != want {
				t.Errorf("%s: %s checked %v, want %v", leaf, name, checks[name], want)
			}
		}
	}
}

// Generation reads each shared type's answer, with no walk: 4^30 uses of
// T1 would otherwise take years. 31 is as deep as a payload nests a type
// holding an object.
func TestGenerateDeepSharedTypes(t *testing.T) {
	out := generateFrom(t, "nested.lily.yaml", nestedTypes(31, 4, "a: {type: integer}, b: {type: bool}"))
	if bytes.Contains(out.Content, []byte(checkMarshal)) {
		t.Errorf("a checkMarshal of a payload that holds no string or time:\n%s", out.Content)
	}
}
