package schema

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lily-mq/lily/wire"
)

const sharedSchema = `version: 1
package: paymsg
include: [common.lily.yaml]
types:
  Card:
    type: object
    fields:
      brand: {type: Brand, required: true}
      holder: {type: Holder}
  Brand: {type: enum, values: [visa, amex]}
messages:
  Paid:
    versions:
      1:
        fields:
          card: {type: Card, required: true}
          brand: {type: Brand, default: amex}
        examples:
          - body: {card: {brand: visa, holder: {name: Ann}}}
      2:
        fields:
          cards: {type: list, items: {type: Card}}
        headers:
          x-brand: {type: Brand, required: true}
`

const commonSchema = `version: 1
types:
  Holder: {type: object, fields: {name: {type: string, max_length: 9}}}
  Spare: {type: enum, values: [a]}
`

func parseShared(t *testing.T, root, common string) (*File, error) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "common.lily.yaml"), []byte(common), 0o644); err != nil {
		t.Fatal(err)
	}
	return Parse(filepath.Join(dir, "pay.lily.yaml"), []byte(root))
}

func TestSharedTypesModel(t *testing.T) {
	f, err := parseShared(t, sharedSchema, commonSchema)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, ty := range f.Types {
		names = append(names, ty.Named+" "+string(ty.Type))
	}
	if diff := cmp.Diff([]string{"Card object", "Brand enum", "Holder object", "Spare enum"}, names); diff != "" {
		t.Errorf("types in file order (-want +got):\n%s", diff)
	}
	card, brand := f.Types[0], f.Types[1]
	v1, v2 := f.Messages[0].Versions[0], f.Messages[0].Versions[1]
	use := v1.Fields[0]
	if use.Named != "Card" || use.GoPath != "Card" || use.Type != Object || !use.Required || use.Name != "card" || &use.Fields[0] != &card.Fields[0] {
		t.Errorf("use of Card: %+v", use)
	}
	if b := v1.Fields[1]; b.Named != "Brand" || b.GoPath != "Brand" || b.Default != "amex" || !cmp.Equal(b.Values, brand.Values) || b.Pointer() {
		t.Errorf("use of Brand with a default: %+v", b)
	}
	if el := v2.Fields[0].Items; el.Named != "Card" || !el.Required || el.Name != "" {
		t.Errorf("element of type Card: %+v", el)
	}
	if h := v2.Headers[0]; h.Named != "Brand" || h.TypeName() != "Brand" {
		t.Errorf("header of type Brand: %+v", h)
	}
	if holder := card.Fields[1]; holder.GoPath != "Holder" || holder.Fields[0].GoPath != "HolderName" {
		t.Errorf("Card's holder: %+v", holder)
	}
	var used []string
	for _, ty := range f.UsedTypes() {
		used = append(used, ty.Named)
	}
	if diff := cmp.Diff([]string{"Card", "Brand", "Holder"}, used); diff != "" {
		t.Errorf("UsedTypes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"Card", "Brand", "Holder"}, v2.SharedTypes()); diff != "" {
		t.Errorf("SharedTypes of version 2 (-want +got):\n%s", diff)
	}
	// Check, as examples and review use it, reads through the shared types.
	err = v2.Check([]byte(`{"cards": [{"brand": "visa"}, {"brand": "visa", "holder": {"name": "0123456789"}}]}`), map[string]any{"x-brand": "amex"})
	var fe *wire.FieldError
	if !errors.As(err, &fe) || fe.Path != "cards[1].holder.name" || fe.Problem != "longer than 9 characters" {
		t.Errorf("Check: %v", err)
	}
}

func TestSharedTypesErrors(t *testing.T) {
	for _, tc := range []struct {
		name, root, common string
		want               []string // rule: message, of each error
	}{
		{"example breaks a shared type", strings.Replace(sharedSchema, "{brand: visa, holder", "{brand: mastercard, holder", 1), commonSchema,
			[]string{"BAD-EXAMPLE: example 1 of PaidV1 breaks the schema: field card.brand: not one of visa, amex"}},
		{"declared in two files", sharedSchema, commonSchema + "  Brand: {type: enum, values: [b]}\n",
			[]string{"DUPLICATE: type Brand is already declared (" + "pay.lily.yaml:10)"}},
		{"types is not a mapping", sharedSchema, "version: 1\ntypes: [Holder]\n",
			[]string{`UNKNOWN-TYPE: unknown type "Holder" (declare it under types, or use one of ` + typeList(types) + ")", "WRONG-KIND: types: want a mapping, got a list"}},
		{"clash with a message's name", sharedSchema, commonSchema + "  PaidType: {type: enum, values: [b]}\n",
			[]string{"NAME-CLASH: message Paid gives the Go name PaidType, already taken by type PaidType (common.lily.yaml:5)"}},
		{"enum value clashes", sharedSchema, commonSchema + "  BrandVisa: {type: enum, values: [b]}\n",
			[]string{"NAME-CLASH: type BrandVisa gives the Go name BrandVisa, already taken by type Brand (pay.lily.yaml:10)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseShared(t, tc.root, tc.common)
			var list ErrorList
			if !errors.As(err, &list) {
				t.Fatalf("want errors, got %v", err)
			}
			var got []string
			for _, e := range list {
				msg := e.Rule + ": " + e.Msg
				if e.Hint != "" {
					msg += " (" + e.Hint + ")"
				}
				got = append(got, strings.ReplaceAll(msg, filepath.Dir(e.File)+string(filepath.Separator), ""))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}

// The nesting bound holds for a type written out: a shared type's fields
// nest as deep as where it is used, plus its own depth.
func TestSharedTypesNestWithinBounds(t *testing.T) {
	// chain is n+1 types, T0 holding T1 and so on; Tn is 2 levels deep
	// (itself and its leaf), Ti n+2-i.
	chain := func(n int, fields string) string {
		var b strings.Builder
		b.WriteString("version: 1\npackage: x\ntypes:\n")
		for i := range n {
			fmt.Fprintf(&b, "  T%d: {type: object, fields: {next: {type: T%d}}}\n", i, i+1)
		}
		fmt.Fprintf(&b, "  T%d: {type: object, fields: {leaf: {type: string}}}\n", n)
		b.WriteString("messages: {A: {versions: {1: {fields: " + fields + "}}}}\n")
		return b.String()
	}
	// T1 is 32 deep: T0's field next, at level 2, would take it to 33.
	wantErrors(t, chain(maxDepth-1, "{t: {type: T0}}"), []string{
		`4:31: next nests deeper than 32 levels of objects, lists and maps: type T1 is 32 deep, used here at level 2 (flatten the payload or the types it uses) [OUT-OF-RANGE]`,
	})
	// T0 to T31 hold one another: T32 would start at level 33, and is not
	// read from there (it is read for its own sake, 9 deep).
	wantErrors(t, chain(maxDepth+8, "{t: {type: T0}}"), []string{
		`35:32: next nests deeper than 32 levels of objects, lists and maps: its type T32 is held within 32 types, T0 to T31, each in the one before (flatten the payload or the types it uses) [OUT-OF-RANGE]`,
	})
	// o, l and the list's items are levels 1 to 3; the map's items, at
	// level 4, holds T0: 22 deep, within the bound, and 30 deep, past it.
	deep := "{o: {type: object, fields: {l: {type: list, items: {type: map, items: {type: T0}}}}}}"
	if _, err := Parse("s.yaml", []byte(chain(20, deep))); err != nil {
		t.Errorf("T0 22 deep at level 4: %v", err)
	}
	wantErrors(t, chain(28, deep), []string{
		`33:102: items nests deeper than 32 levels of objects, lists and maps: type T0 is 30 deep, used here at level 4 (flatten the payload or the types it uses) [OUT-OF-RANGE]`,
	})
}

// A chain of shared types each holding the next is read no deeper than
// maxDepth types: one more would be past the bound whatever it holds, and
// reading a chain as long as it goes, as lilygen did, took a Go stack
// frame per type until a chain of 300,000 (16 MB) overflowed the stack, a
// fatal error. The stack allowed here is far less than a chain of 20,000
// took read whole; each maxDepth types of it are one problem.
func TestSharedTypeChainStopsAtMaxDepth(t *testing.T) {
	const n = 20_000
	var b strings.Builder
	b.WriteString("version: 1\npackage: x\ntypes:\n")
	for i := range n {
		fmt.Fprintf(&b, "  T%d: {type: object, fields: {a: {type: T%d}}}\n", i, i+1)
	}
	fmt.Fprintf(&b, "  T%d: {type: object, fields: {leaf: {type: string}}}\n", n)
	b.WriteString("messages: {A: {versions: {1: {fields: {t: {type: T0}}}}}}\n")
	defer debug.SetMaxStack(debug.SetMaxStack(16 << 20))
	_, err := Parse("s.yaml", []byte(b.String()))
	var list ErrorList
	if !errors.As(err, &list) {
		t.Fatalf("Parse: %v, want an ErrorList", err)
	}
	// T0 is at line 4; T31's a holds T32, which would be level 33.
	want := "s.yaml:35:32: a nests deeper than 32 levels of objects, lists and maps: its type T32 is held within 32 types, T0 to T31, each in the one before (flatten the payload or the types it uses) [OUT-OF-RANGE]"
	if list[0].Error() != want {
		t.Errorf("first error:\n%s\nwant\n%s", list[0], want)
	}
	// The chain is read again from T32, and so on: a problem each
	// maxDepth types.
	if len(list) != n/maxDepth {
		t.Errorf("%d errors, want %d", len(list), n/maxDepth)
	}
}
