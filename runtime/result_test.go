package runtime

import (
	"errors"
	"testing"
)

func TestWithinPrefixesOnlyFieldErrors(t *testing.T) {
	err := Within("items[2].", &FieldError{Path: "sku", Problem: "empty"})
	if fe, ok := err.(*FieldError); !ok || fe.Error() != "field items[2].sku: empty" {
		t.Errorf("Within = %v", err)
	}
	plain := errors.New("boom")
	if Within("x.", plain) != plain {
		t.Error("Within changed an error that is not a FieldError")
	}
}
