package gen

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// runGenerated runs test, a test file of the package of out, beside out's
// code in a directory of the module's testdata named by prefix.
func runGenerated(t *testing.T, prefix string, out Output, test string) {
	t.Helper()
	dir, err := os.MkdirTemp(filepath.Join("..", "testdata"), prefix+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	write(t, filepath.Join(dir, "gen.go"), out.Content)
	write(t, filepath.Join(dir, "gen_test.go"), []byte(test))
	cmd := exec.Command("go", "test", "-count=1", "./"+filepath.Base(dir))
	cmd.Dir = filepath.Join("..", "testdata")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

// Every producer refuses a nil message alike, with a *wire.FieldError:
// without typed headers it would send the body null, which an extractor
// reads as an empty object; with them it would dereference nil.
func TestProducersRefuseNil(t *testing.T) {
	if testing.Short() {
		t.Skip("compiling generated code is skipped in -short mode")
	}
	out := generateFrom(t, "nil.lily.yaml", []byte(`version: 1
package: nilmsg
messages:
  Probe:
    publish: {routing_key: probes}
    versions: {1: {fields: {a: {type: string}}, headers: {x-a: {type: string, max_length: 3}}}}
  Bare:
    publish: {routing_key: bares}
    versions: {1: {fields: {n: {type: integer}}}}
`))
	runGenerated(t, "nil", out, `package nilmsg

import (
	"context"
	"errors"
	"testing"

	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/wire"
)

type sender struct{ sent int }

func (s *sender) Send(context.Context, runtime.Message) error {
	s.sent++
	return nil
}

func TestNil(t *testing.T) {
	s := &sender{}
	for _, c := range []struct {
		name    string
		produce func() error
	}{
		{"NewProbeV1", func() error { _, err := NewProbeV1("id-1", nil); return err }},
		{"NewBareV1", func() error { _, err := NewBareV1("id-1", nil); return err }},
		{"PublishProbeV1", func() error { return PublishProbeV1(context.Background(), s, "id-1", nil) }},
		{"PublishBareV1", func() error { return PublishBareV1(context.Background(), s, "id-1", nil) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			var fe *wire.FieldError
			if err := c.produce(); !errors.As(err, &fe) || fe.Error() != "payload: msg is nil" {
				t.Errorf("%T %v, want payload: msg is nil", err, err)
			}
		})
	}
	if s.sent != 0 {
		t.Errorf("%d sent", s.sent)
	}
}
`)
}
