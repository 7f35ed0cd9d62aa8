package rules

import (
	"slices"
	"testing"

	_ "github.com/lily-mq/lily/internal/update"
)

func TestAll(t *testing.T) {
	var seen []string
	last := 0
	for _, r := range All {
		c := slices.Index(Categories, r.Category)
		switch {
		case slices.Contains(seen, r.ID):
			t.Errorf("%s is listed twice", r.ID)
		case c < 0 || r.Meaning == "":
			t.Errorf("%s has no category or meaning: %+v", r.ID, r)
		case c < last:
			t.Errorf("%s (%s) is out of the categories' order", r.ID, r.Category)
		}
		seen, last = append(seen, r.ID), c
		if got, ok := Lookup(r.ID); !ok || got != r {
			t.Errorf("Lookup(%s) = %+v, %v", r.ID, got, ok)
		}
	}
	if _, ok := Lookup("FIELD-REMOVD"); ok {
		t.Error("Lookup found a rule that does not exist")
	}
	if b := Breaking(); len(b) != len(All)-12 || slices.ContainsFunc(b, func(id string) bool { r, _ := Lookup(id); return r.Category == Lint }) {
		t.Errorf("Breaking() = %v", b)
	}
}
