package step

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"
)

// A step that calls runtime.Goexit (t.FailNow does, off its test's
// goroutine) is answered when its goroutine ends, not at its deadline.
func TestOpenAnswersAStepThatExits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	discarded := make(chan int, 1)
	_, err := Open(ctx, func() (int, error) {
		runtime.Goexit()
		return 1, nil
	}, func(v int) { discarded <- v })
	if !errors.Is(err, ErrExited) {
		t.Fatalf("err = %v, want ErrExited", err)
	}
	if ctx.Err() != nil {
		t.Fatal("answered only at the deadline")
	}
	select {
	case v := <-discarded:
		t.Errorf("discarded %d: a step that exited opened nothing", v)
	default:
	}
}
