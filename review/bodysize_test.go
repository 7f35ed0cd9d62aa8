package review

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// The widest body worked out from a schema's bounds is as wide as the
// widest value encoding/json, which producers marshal with, writes.
func TestBodySizeIsTheWidestMarshal(t *testing.T) {
	f := parse(t, "sizes.lily.yaml", `version: 1
package: sizes
types:
  Level: {type: enum, values: [a, "b<&"]}
  Point:
    type: object
    fields:
      x: {type: int8, required: true}
      level: {type: Level, required: true}
messages:
  Wide:
    versions:
      1:
        fields:
          text: {type: string, required: true, max_length: 5}
          blob: {type: bytes, max_length: 4}
          small: {type: integer, min: 0, max: 9}
          big: {type: integer, required: true}
          ratio: {type: number, required: true}
          ok: {type: bool, required: true}
          at: {type: time, required: true}
          points: {type: list, required: true, max_items: 3, items: {type: Point}}
          maybe: {type: list, max_items: 1, items: {type: uint16, max: 9}}
          inner: {type: object, fields: {p: {type: Point, required: true}}}
queues:
  wide:
    consumes: [{message: Wide}]
`)
	type point struct {
		X     int8   `json:"x"`
		Level string `json:"level"`
	}
	widest := point{X: -128, Level: "b<&"}
	at := time.Date(2006, 1, 2, 15, 4, 5, 999999999, time.FixedZone("", -7*3600))
	body, err := json.Marshal(struct {
		Text   string  `json:"text"`
		Blob   []byte  `json:"blob"`
		Small  *int64  `json:"small"` // null is wider than 0 to 9
		Big    int64   `json:"big"`
		Ratio  float64 `json:"ratio"`
		OK     bool    `json:"ok"`
		At     time.Time
		Points []point  `json:"points"`
		Maybe  []uint16 `json:"maybe"` // null is wider than [0]
		Inner  struct {
			P point `json:"p"`
		} `json:"inner"`
	}{
		Text: strings.Repeat("<", 5), Blob: []byte{1, 2, 3, 4}, Big: -1 << 63, Ratio: -0.0000012345678901234567, At: at,
		Points: []point{widest, widest, widest}, Inner: struct {
			P point `json:"p"`
		}{widest},
	})
	if err != nil {
		t.Fatal(err)
	}
	// The Go name At is as wide as the key at.
	want := len(body) - len(`"At"`) + len(`"at"`)
	sizes := bodySizes{named: map[string]size{}}
	if got := sizes.body(f.Messages[0].Versions[0]); !got.bounded || got.n != int64(want) {
		t.Errorf("body %+v, want %d bytes: %s", got, want, body)
	}
}

// A string, bytes or list without a bound, and any map, whose keys nothing
// bounds, leave the body without one.
func TestBodySizeUnbounded(t *testing.T) {
	for _, field := range []string{
		"{type: string}",
		"{type: bytes}",
		"{type: list, items: {type: bool}}",
		"{type: list, max_items: 2, items: {type: string}}",
		"{type: map, max_items: 2, items: {type: bool}}",
		"{type: object, fields: {s: {type: string}}}",
	} {
		f := parse(t, "sizes.lily.yaml", fmt.Sprintf("version: 1\npackage: sizes\nmessages:\n  M:\n    versions:\n      1:\n        fields:\n          f: %s\n", field))
		sizes := bodySizes{named: map[string]size{}}
		if got := sizes.body(f.Messages[0].Versions[0]); got.bounded {
			t.Errorf("%s: body of at most %d bytes, want unbounded", field, got.n)
		}
	}
}

// Each shared type is walked once, however many uses reach it: 4^30 uses
// of T1 would otherwise take years.
func TestBodySizeDeepSharedTypes(t *testing.T) {
	var b strings.Builder
	b.WriteString("version: 1\npackage: nested\ntypes:\n  T1: {type: object, fields: {a: {type: bool, required: true}}}\n")
	for k := 2; k <= 31; k++ {
		fmt.Fprintf(&b, "  T%d:\n    type: object\n    fields:\n", k)
		for i := range 4 {
			fmt.Fprintf(&b, "      f%d: {type: T%d, required: true}\n", i, k-1)
		}
	}
	b.WriteString("messages:\n  Nested:\n    versions:\n      1:\n        fields:\n          t: {type: T31, required: true}\n")
	f := parse(t, "nested.lily.yaml", b.String())
	sizes := bodySizes{named: map[string]size{}}
	// Far past any limit: the sum saturates rather than wrap.
	if got := sizes.body(f.Messages[0].Versions[0]); !got.bounded || got.n < 1<<60 {
		t.Errorf("body %+v, want bounded and saturated", got)
	}
}
