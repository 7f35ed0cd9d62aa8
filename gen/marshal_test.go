package gen

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
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

// A map's checks in a map's value name their variables apart from the outer
// map's: none hides another, as none would written by hand.
func TestNestedMapsHideNoName(t *testing.T) {
	src := []byte(`version: 1
package: nested
messages:
  Nested:
    versions:
      1:
        fields:
          maps_of_maps: {type: map, items: {type: map, items: {type: string}}}
          maps_of_int_maps: {type: map, items: {type: map, items: {type: integer}}}
          maps_of_lists_of_maps: {type: map, items: {type: list, items: {type: map, items: {type: time}}}}
          list_of_maps_of_maps: {type: list, items: {type: map, items: {type: map, items: {type: string}}}}
`)
	out := generateFrom(t, "nested.lily.yaml", src)
	file, err := parser.ParseFile(token.NewFileSet(), out.Path, out.Content, 0)
	if err != nil {
		t.Fatal(err)
	}
	funcs := 0
	for _, d := range file.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.Name == checkMarshal {
			funcs++
			for _, name := range hidden(fn) {
				t.Errorf("%s: %s hides a name of an enclosing block", fn.Name.Name, name)
			}
		}
	}
	if funcs == 0 {
		t.Fatalf("no %s in\n%s", checkMarshal, out.Content)
	}
}

// hidden lists the names that fn declares where an enclosing block of fn
// has declared them already. It knows the statements checkMarshal is made
// of.
func hidden(fn *ast.FuncDecl) []string {
	var out []string
	type scopes []map[string]bool
	declare := func(s scopes, id *ast.Ident) {
		for _, outer := range s[:len(s)-1] {
			if outer[id.Name] {
				out = append(out, id.Name)
			}
		}
		s[len(s)-1][id.Name] = true
	}
	push := func(s scopes) scopes { return append(slices.Clip(s), map[string]bool{}) }
	var walk func(n ast.Node, s scopes)
	walk = func(n ast.Node, s scopes) {
		switch n := n.(type) {
		case *ast.BlockStmt:
			s = push(s)
			for _, st := range n.List {
				walk(st, s)
			}
		case *ast.IfStmt:
			s = push(s)
			if n.Init != nil {
				walk(n.Init, s)
			}
			walk(n.Cond, s)
			walk(n.Body, s)
			if n.Else != nil {
				walk(n.Else, s)
			}
		case *ast.RangeStmt:
			walk(n.X, s)
			s = push(s)
			if n.Tok == token.DEFINE {
				for _, e := range []ast.Expr{n.Key, n.Value} {
					if id, ok := e.(*ast.Ident); ok && id.Name != "_" {
						declare(s, id)
					}
				}
			}
			walk(n.Body, s)
		case *ast.AssignStmt:
			for _, e := range n.Rhs {
				walk(e, s)
			}
			if n.Tok == token.DEFINE {
				for _, e := range n.Lhs {
					if id := e.(*ast.Ident); id.Name != "_" {
						declare(s, id)
					}
				}
			}
		case *ast.DeclStmt:
			for _, spec := range n.Decl.(*ast.GenDecl).Specs {
				for _, id := range spec.(*ast.ValueSpec).Names {
					declare(s, id)
				}
			}
		case *ast.FuncLit:
			walk(n.Body, s)
		default:
			ast.Inspect(n, func(c ast.Node) bool {
				switch c.(type) {
				case *ast.BlockStmt, *ast.IfStmt, *ast.RangeStmt, *ast.AssignStmt, *ast.DeclStmt, *ast.FuncLit:
					walk(c, s)
					return false
				}
				return true
			})
		}
	}
	walk(fn.Body, scopes{{"out": true}})
	return out
}

// A producer refuses, with a *wire.FieldError at the field, what
// encoding/json would fail on with no path: a number that is NaN or
// infinite, a time whose year RFC 3339 cannot write (before 0, after 9999)
// or whose zone offset is 24 hours or more; in a pointer, a list, a map and
// an object of a list too.
func TestProducerRefusesWhatJSONCannotWrite(t *testing.T) {
	if testing.Short() {
		t.Skip("compiling generated code is skipped in -short mode")
	}
	out := generateFrom(t, "refuse.lily.yaml", []byte(`version: 1
package: refusemsg
messages:
  Priced:
    versions:
      1:
        fields:
          discount_ratio: {type: number, required: true}
          tip: {type: number}
          scores: {type: list, items: {type: number}}
          taxes: {type: map, items: {type: number}}
          at: {type: time, required: true}
          until: {type: time}
          lines: {type: list, items: {type: object, fields: {price: {type: number}, at: {type: time}}}}
`))
	runGenerated(t, "refuse", out, `package refusemsg

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/lily-mq/lily/wire"
)

func TestRefuses(t *testing.T) {
	msg := func() *PricedV1 {
		tip, price := 0.5, 2.0
		at := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
		until := at.In(time.FixedZone("", -(23*60+59)*60))
		return &PricedV1{
			DiscountRatio: 0.25, Tip: &tip, Scores: []float64{1}, Taxes: map[string]float64{"a": 1},
			At: time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC), Until: &until,
			Lines: []PricedV1LinesItem{{Price: &price, At: &at}},
		}
	}
	if _, err := NewPricedV1("m-1", msg()); err != nil {
		t.Fatal(err)
	}
	year := func(y int) time.Time { return time.Date(y, 12, 31, 23, 59, 59, 0, time.UTC) }
	for _, c := range []struct {
		set           func(*PricedV1)
		path, problem string
	}{
		{func(m *PricedV1) { m.DiscountRatio = math.NaN() }, "discount_ratio", "not a number"},
		{func(m *PricedV1) { *m.Tip = math.Inf(1) }, "tip", "not a number"},
		{func(m *PricedV1) { m.Scores[0] = math.Inf(-1) }, "scores[0]", "not a number"},
		{func(m *PricedV1) { m.Taxes["a"] = math.NaN() }, "taxes[\"a\"]", "not a number"},
		{func(m *PricedV1) { *m.Lines[0].Price = math.NaN() }, "lines[0].price", "not a number"},
		{func(m *PricedV1) { m.At = year(10000) }, "at", "year not in 0 to 9999"},
		{func(m *PricedV1) { m.At = year(-1) }, "at", "year not in 0 to 9999"},
		{func(m *PricedV1) { m.At = year(9999).In(time.FixedZone("", 60)) }, "at", "year not in 0 to 9999"},
		{func(m *PricedV1) { *m.Until = m.Until.In(time.FixedZone("", 24*60*60)) }, "until", "zone offset of 24 hours or more"},
		{func(m *PricedV1) { *m.Until = m.Until.In(time.FixedZone("", -24*60*60)) }, "until", "zone offset of 24 hours or more"},
		{func(m *PricedV1) { *m.Lines[0].At = year(10000) }, "lines[0].at", "year not in 0 to 9999"},
	} {
		m := msg()
		c.set(m)
		_, err := NewPricedV1("m-1", m)
		var fe *wire.FieldError
		if !errors.As(err, &fe) || fe.Path != c.path || fe.Problem != c.problem {
			t.Errorf("%T %v, want field %s: %s", err, err, c.path, c.problem)
		}
	}
}
`)
}
