package schema

import (
	"math"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// A number bound is checked as a float64, so one that does not read as the
// number written is refused: one that underflows to 0, an integer past 2^53
// with no float64 of its own (past uint64 too, which YAML tags a float).
// Decimals a float64 only comes near (0.1) stand, as do integers it holds.
func TestNumberBoundsReadAsWritten(t *testing.T) {
	src := `version: 1
package: p
messages:
  M:
    versions:
      1:
        fields:
          a: {type: number, max: -1e-400}
          b: {type: number, min: 9007199254740993}
          c: {type: number, min: 0.1, max: 9007199254740992}
          d: {type: number, min: 0, max: 1e-300}
          e: {type: number, min: 1180591620717411303424, max: 1180591620717411303425}
`
	_, err := Parse("schema.lily.yaml", []byte(src))
	want := []string{
		"schema.lily.yaml:8:34: max: -1e-400 is too small for a float64, which reads it as 0 [OUT-OF-RANGE]",
		"schema.lily.yaml:9:34: min: 9007199254740993 has no float64 of its own: it reads as 9007199254740992 [OUT-OF-RANGE]",
		// Past uint64, YAML tags an integer !!float.
		"schema.lily.yaml:12:63: max: 1180591620717411303425 has no float64 of its own: it reads as 1180591620717411303424 [OUT-OF-RANGE]",
	}
	if err == nil || err.Error() != strings.Join(want, "\n") {
		t.Errorf("errors:\n%v\nwant:\n%s", err, strings.Join(want, "\n"))
	}
}

// A negative zero reads as 0: a bound checks the same, and a header value
// (a binding's, an example's) is written 0 in generated code, which
// staticcheck would refuse as -0.0.
func TestNegativeZeroReadsAsZero(t *testing.T) {
	p := &parser{}
	for _, written := range []string{"-0.0", "-0", "-0e10"} {
		var n yaml.Node
		if err := yaml.Unmarshal([]byte(written), &n); err != nil {
			t.Fatal(err)
		}
		v, ok := p.number(n.Content[0], "a header")
		if !ok || v != 0 || math.Signbit(v) {
			t.Errorf("%s reads as %v (sign bit %v), %v", written, v, math.Signbit(v), ok)
		}
	}
}

// A plain scalar written as a YAML 1.2 number that does not fit its Go type,
// which yaml.v3 reads as a string, is out of range, not a string; quoted or
// tagged !!str it is the string it says it is.
func TestNumberPastItsTypeIsOutOfRange(t *testing.T) {
	src := `version: 1
package: p
messages:
  M:
    versions:
      1:
        fields:
          a: {type: number, max: 1e400}
          b: {type: number, min: -1.5E+400, default: .5e400}
          c: {type: integer, max: 0x1ffffffffffffffff}
          d: {type: integer, max: 1e400}
          e: {type: number, max: "1e400"}
          f: {type: number, max: !!str 1e400}
          g: {type: number, max: 12e}
`
	_, err := Parse("schema.lily.yaml", []byte(src))
	want := []string{
		"schema.lily.yaml:8:34: max: 1e400 is beyond float64's range [OUT-OF-RANGE]",
		"schema.lily.yaml:9:34: min: -1.5E+400 is beyond float64's range [OUT-OF-RANGE]",
		"schema.lily.yaml:9:54: default: .5e400 is beyond float64's range [OUT-OF-RANGE]",
		"schema.lily.yaml:10:35: max: 0x1ffffffffffffffff does not fit in 64 bits [OUT-OF-RANGE]",
		"schema.lily.yaml:11:35: max: want an integer, got the number 1e400 [WRONG-KIND]",
		`schema.lily.yaml:12:34: max: want a number, got the string "1e400" [WRONG-KIND]`,
		`schema.lily.yaml:13:34: max: want a number, got the string "1e400" [WRONG-KIND]`,
		`schema.lily.yaml:14:34: max: want a number, got the string "12e" [WRONG-KIND]`,
	}
	if err == nil || err.Error() != strings.Join(want, "\n") {
		t.Errorf("errors:\n%v\nwant:\n%s", err, strings.Join(want, "\n"))
	}
}

// An integer of most of a MiB of digits, past int64 in any of the forms
// YAML writes one, does not fit in 64 bits: told by its text, not by
// reading its digits as a big.Int, whose time grows with the square of
// their count (a MiB of nines took 7 s, 4 MiB 46 s). A number bound needs
// no such guard: float64 holds no integer of more than 309 digits, and
// yaml.v3 reads a longer one, whatever its exponent, as 0 or beyond range.
func TestLongIntegerIsReadInLinearTime(t *testing.T) {
	const n = maxSchemaBytes / 5 // four of them in one schema
	nines := strings.Repeat("9", n)
	src := "version: 1\npackage: p\nmessages:\n  M:\n    versions:\n      1:\n        fields:\n" +
		"          a: {type: integer, max: !!int " + strings.Repeat("1_", n/2) + "1}\n" +
		"          b: {type: integer, max: 0x" + strings.Repeat("f", n) + "}\n" +
		"          d: {type: integer, max: !!int 12" + strings.Repeat("a", n) + "}\n" +
		"queues:\n  q:\n    prefetch: " + nines + "\n    consumes: [{message: M}]\n"
	_, err := Parse("schema.lily.yaml", []byte(src))
	want := []string{
		"schema.lily.yaml:8:35: max: 1_1_1_1_1_1_1_1_1_1_1_1_1_1_1_1_1_1_1... does not fit in 64 bits [OUT-OF-RANGE]",
		"schema.lily.yaml:9:35: max: 0xfffffffffffffffffffffffffffffffffff... does not fit in 64 bits [OUT-OF-RANGE]",
		`schema.lily.yaml:10:35: max: YAML cannot read "12aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa..." as !!int, its tag [WRONG-KIND]`,
		"schema.lily.yaml:13:15: prefetch: 9999999999999999999999999999999999999... does not fit in 64 bits [OUT-OF-RANGE]",
	}
	if err == nil || err.Error() != strings.Join(want, "\n") {
		t.Errorf("errors:\n%v\nwant:\n%s", err, strings.Join(want, "\n"))
	}
}
