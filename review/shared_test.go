package review

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lily-mq/lily/schema"
)

// sharedBase has two versions that share Card, and through it CardBrand;
// version 2 also holds a list of Card.
const sharedBase = `version: 1
package: paymsg
types:
  Card:
    type: object
    fields:
      brand: {type: CardBrand, required: true}
      last4: {type: string, required: true, max_length: 4}
      holder: {type: string, max_length: 100}
  CardBrand: {type: enum, values: [visa, mastercard, amex]}
messages:
  PaymentAuthorized:
    versions:
      1:
        fields:
          card: {type: Card, required: true}
      2:
        fields:
          card: {type: Card, required: true}
          backup_cards: {type: list, max_items: 3, items: {type: Card}}
`

// inlineBase is sharedBase's version 1 before Card was shared: the same
// payload, its object and enum written in place.
const inlineBase = `version: 1
package: paymsg
messages:
  PaymentAuthorized:
    versions:
      1:
        fields:
          card:
            type: object
            required: true
            fields:
              brand: {type: enum, required: true, values: [visa, mastercard, amex]}
              last4: {type: string, required: true, max_length: 4}
              holder: {type: string, max_length: 100}
`

// acksOf is each finding as RULE@SUBJECT, in order.
func acksOf(found []Finding) []string {
	var out []string
	for _, f := range found {
		out = append(out, f.Ack())
	}
	return out
}

// findingKeys are the findings of Breaking(old, new) as CATEGORY RULE@SUBJECT,
// sorted.
func findingKeys(old, new *schema.File) []string {
	var out []string
	for _, f := range Breaking(old, new) {
		out = append(out, string(f.Category)+" "+f.Ack())
	}
	slices.Sort(out)
	return out
}

// TestBreakingSeesThroughSharedTypes: a change inside a shared type is a
// change to every version that uses it, under the same rules as an object
// written in place, reported once by the type's name (its fields are one Go
// struct for every use); a change to a use is reported where it is.
func TestBreakingSeesThroughSharedTypes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edits []string
		want  []string
	}{
		{"field removed", []string{"      holder: {type: string, max_length: 100}\n", ""}, []string{
			"API FIELD-REMOVED@Card.holder",
		}},
		{"bound narrowed", []string{"max_length: 100", "max_length: 50"}, []string{
			"INFLIGHT BOUND-NARROWED@Card.holder",
		}},
		{"enum value removed", []string{"[visa, mastercard, amex]", "[visa, mastercard]"}, []string{
			"API ENUM-CONSTANT-REMOVED@CardBrand", "INFLIGHT BOUND-NARROWED@Card.brand",
		}},
		{"type renamed", []string{"  Card:\n", "  PaymentCard:\n", "{type: Card,", "{type: PaymentCard,", "{type: Card}", "{type: PaymentCard}"}, []string{
			"API FIELD-GO-TYPE-CHANGED@PaymentAuthorized.v1.card",
			"API FIELD-GO-TYPE-CHANGED@PaymentAuthorized.v2.backup_cards",
			"API FIELD-GO-TYPE-CHANGED@PaymentAuthorized.v2.card",
		}},
		{"use made optional", []string{"      1:\n        fields:\n          card: {type: Card, required: true}", "      1:\n        fields:\n          card: {type: Card}"}, []string{
			"API FIELD-GO-TYPE-CHANGED@PaymentAuthorized.v1.card",
			"PRODUCER FIELD-MADE-OPTIONAL@PaymentAuthorized.v1.card",
		}},
		{"type added, unused", []string{"messages:", "  Spare: {type: enum, values: [a]}\nmessages:"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := sharedBase
			for i := 0; i+1 < len(tc.edits); i += 2 {
				if !strings.Contains(src, tc.edits[i]) {
					t.Fatalf("base lacks %q", tc.edits[i])
				}
				src = strings.ReplaceAll(src, tc.edits[i], tc.edits[i+1])
			}
			got := findingKeys(parse(t, "old.lily.yaml", sharedBase), parse(t, "new.lily.yaml", src))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("findings (-want +got):\n%s", diff)
			}
		})
	}
}

// TestBreakingSharingAnObject: sharing what was written in place changes
// the Go types, Card for PaymentAuthorizedV1Card, and nothing on the wire.
func TestBreakingSharingAnObject(t *testing.T) {
	shared := strings.Replace(sharedBase, "      2:\n        fields:\n          card: {type: Card, required: true}\n          backup_cards: {type: list, max_items: 3, items: {type: Card}}\n", "", 1)
	got := findingKeys(parse(t, "old.lily.yaml", inlineBase), parse(t, "new.lily.yaml", shared))
	want := []string{
		"API FIELD-GO-TYPE-CHANGED@PaymentAuthorized.v1.card",
		"API FIELD-GO-TYPE-CHANGED@PaymentAuthorized.v1.card.brand",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("findings (-want +got):\n%s", diff)
	}
}

// TestLintSharedTypes: a shared type's fields are linted once, under its
// name, and an unused type of the root file is reported.
func TestLintSharedTypes(t *testing.T) {
	src := strings.NewReplacer("max_length: 100", "pattern: x", "messages:", "  Spare: {type: enum, values: [a]}\nmessages:").Replace(sharedBase)
	got := acksOf(Lint(parse(t, "new.lily.yaml", src), time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)))
	want := []string{"LINT-STRING-UNBOUNDED@Card.holder", "LINT-TYPE-UNUSED@Spare"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("findings (-want +got):\n%s", diff)
	}
}

// TestBreakingPlacesSharedTypeChanges: a field removed from a shared object,
// and an enum constant removed from a shared enum, are placed at the type's
// definition, which the change is about, not at the first use of it.
func TestBreakingPlacesSharedTypeChanges(t *testing.T) {
	src := strings.NewReplacer("      holder: {type: string, max_length: 100}\n", "", "[visa, mastercard, amex]", "[visa, mastercard]").Replace(sharedBase)
	var got []string
	for _, f := range Breaking(parse(t, "old.lily.yaml", sharedBase), parse(t, "new.lily.yaml", src)) {
		if f.Rule == "FIELD-REMOVED" || f.Rule == "ENUM-CONSTANT-REMOVED" {
			got = append(got, fmt.Sprintf("%s@%s line %d", f.Rule, f.Subject, f.Line))
		}
	}
	slices.Sort(got)
	want := []string{"ENUM-CONSTANT-REMOVED@CardBrand line 9", "FIELD-REMOVED@Card.holder line 4"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("findings (-want +got):\n%s", diff)
	}
}

// diamond is a schema whose shared types, named <t>0 to <t><depth>, nest
// depth deep, each using the next in eight fields: 8^depth paths lead to the
// last, extra in its fields.
func diamond(depth int, t, message, extra string) string {
	var b strings.Builder
	b.WriteString("version: 1\npackage: deep\ntypes:\n")
	for k := range depth {
		fmt.Fprintf(&b, "  %s%d:\n    type: object\n    fields:\n", t, k)
		for i := range 8 {
			fmt.Fprintf(&b, "      f%d: {type: %s%d}\n", i, t, k+1)
		}
	}
	fmt.Fprintf(&b, "  %s%d:\n    type: object\n    fields:\n      n: {type: string, max_length: 5}\n%s", t, depth, extra)
	fmt.Fprintf(&b, "messages:\n  %s:\n    versions:\n      1:\n        fields:\n          root: {type: %s0}\n", message, t)
	return b.String()
}

// TestReviewOfNestedSharedTypes: an addition deep in shared types nested in
// one another is reported once, by the type's name, the new one's when the
// types were renamed; and a message renamed with its versions as they were
// is found: each pair of shared types is compared once, not along each of
// its 8^20 paths, which would never end.
func TestReviewOfNestedSharedTypes(t *testing.T) {
	old := parse(t, "old.lily.yaml", diamond(20, "T", "Deep", ""))
	const extra = "      extra: {type: string, max_length: 5}\n"
	if got, want := Changes(old, parse(t, "new.lily.yaml", diamond(20, "T", "Deep", extra))), []string{"T20.extra added (optional)"}; !slices.Equal(got, want) {
		t.Errorf("changes %q, want %q", got, want)
	}
	renamedTypes := parse(t, "new.lily.yaml", diamond(20, "U", "Deep", extra))
	if got, want := Changes(old, renamedTypes), []string{"U20.extra added (optional)"}; !slices.Equal(got, want) {
		t.Errorf("changes with the types renamed %q, want %q", got, want)
	}
	if got := findingKeys(old, renamedTypes); !slices.ContainsFunc(got, func(k string) bool { return strings.HasPrefix(k, "API FIELD-GO-TYPE-CHANGED@") }) {
		t.Errorf("findings with the types renamed %q lack the Go type change", got)
	}
	renamed := parse(t, "new.lily.yaml", diamond(20, "T", "Deeper", ""))
	if got := findingKeys(old, renamed); !slices.ContainsFunc(got, func(k string) bool { return strings.Contains(k, "MESSAGE-RENAMED") }) {
		t.Errorf("findings %q lack the rename", got)
	}
}

// TestChangesNameASharedTypesAdditionOnce: a field added to a shared type
// that two versions use is one change.
func TestChangesNameASharedTypesAdditionOnce(t *testing.T) {
	src := strings.Replace(sharedBase, "      holder: {type: string, max_length: 100}\n", "      holder: {type: string, max_length: 100}\n      nick: {type: string, max_length: 9}\n", 1)
	if got, want := Changes(parse(t, "old.lily.yaml", sharedBase), parse(t, "new.lily.yaml", src)), []string{"Card.nick added (optional)"}; !slices.Equal(got, want) {
		t.Errorf("changes %q, want %q", got, want)
	}
}
