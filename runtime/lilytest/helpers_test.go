package lilytest_test

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"os"
	"testing"

	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/runtime/internal/fixture"
	"github.com/lily-mq/lily/runtime/lilytest"

	// Every test package takes -update, so that `go test ./... -update` runs.
	_ "github.com/lily-mq/lily/internal/update"
)

// TestMain runs up to eight of the package's parallel tests at once, not
// go test's default of one for each core: they wait on handler timeouts,
// steps and requeue pauses far more than they compute, and two at a time
// kept the quick tier waiting 5.5 s on them (3 s so). A -parallel on the
// command line (make test's) still decides: it is read after this.
func TestMain(m *testing.M) {
	if err := flag.Set("test.parallel", "8"); err != nil {
		panic(err)
	}
	os.Exit(m.Run())
}

// handler is a test's implementation of the fixture's generated handler
// interface.
type handler func(ctx context.Context, msg *fixture.OrderPlacedV1, d runtime.RawDelivery) error

func (h handler) HandleOrderPlacedV1(ctx context.Context, msg *fixture.OrderPlacedV1, d runtime.RawDelivery) error {
	return h(ctx, msg, d)
}

// quiet keeps the diagnostics out of the test's output.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// harness is a harness of the fixture's queue "lilytest" (three attempts,
// one retry bucket of 300 ms, a body limit of 1024 bytes) calling h, with
// cfg changed by tweaks; it is closed when the test ends.
func harness(t *testing.T, h handler, tweaks ...func(*runtime.Config)) *lilytest.Harness {
	t.Helper()
	return harnessOf(t, fixture.LilytestQueueSpec(), h, tweaks...)
}

func harnessOf(t *testing.T, spec runtime.QueueSpec, h handler, tweaks ...func(*runtime.Config)) *lilytest.Harness {
	t.Helper()
	cfg := runtime.Config{Logger: quiet}
	for _, f := range tweaks {
		f(&cfg)
	}
	hs, err := lilytest.New(spec, fixture.LilytestRoutes(h), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hs.Close)
	return hs
}

// order is OrderPlaced v1 with order id and message id id, as the generated
// producer builds it.
func order(t *testing.T, id string) runtime.Publishing {
	t.Helper()
	return produce(t, id, &fixture.OrderPlacedV1{OrderID: id})
}

func produce(t *testing.T, id string, msg *fixture.OrderPlacedV1) runtime.Publishing {
	t.Helper()
	p, err := fixture.NewOrderPlacedV1(id, msg)
	if err != nil {
		t.Fatalf("produce %s: %v", id, err)
	}
	return p
}

func ok(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error { return nil }

// hostile is the catalogue of the runtime's poison test
// (TestBrokerPoisonIsRejectedBeforeUserCode), fixture.Hostile's.
func hostile(t *testing.T) map[string]runtime.Publishing {
	return fixture.Hostile(func(id string) runtime.Publishing { return order(t, id) })
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
