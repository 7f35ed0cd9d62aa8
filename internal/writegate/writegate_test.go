package writegate

import (
	"context"
	"errors"
	"testing"

	_ "github.com/lily-mq/lily/internal/update"
)

// A context without a check lets every write go; one with a check hands it
// back.
func TestCheckIsTheContextsOrLetsGo(t *testing.T) {
	if err := Check(context.Background())(); err != nil {
		t.Errorf("no check: %v, want nil", err)
	}
	refused := errors.New("refused")
	ctx := With(context.Background(), func() error { return refused })
	if err := Check(ctx)(); !errors.Is(err, refused) {
		t.Errorf("check: %v, want %v", err, refused)
	}
	if err := Check(With(context.Background(), nil))(); err != nil {
		t.Errorf("nil check: %v, want nil", err)
	}
}
