package connectnote

import (
	"context"
	"errors"
	"testing"

	_ "github.com/lily-mq/lily/internal/update"
)

// A context without a note hands back nil; one with a note hands it back.
func TestNoteIsTheContexts(t *testing.T) {
	if note := Note(context.Background()); note != nil {
		t.Error("no note: got one")
	}
	var heard error
	refused := errors.New("refused")
	Note(With(context.Background(), func(err error) { heard = err }))(refused)
	if !errors.Is(heard, refused) {
		t.Errorf("heard %v, want %v", heard, refused)
	}
}
