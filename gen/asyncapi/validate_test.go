package asyncapi

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lily-mq/lily/internal/npmtest"
)

// validator holds the AsyncAPI project's parser, an npm package: its
// package.json and package-lock.json pin every version, and validate.cjs
// runs it.
const validator = "testdata/validator"

// resolvedFacts are what the parser itself read from the documents, its
// references resolved: a shared type's schema where a field refers to it,
// a channel's message where an operation refers to it.
var resolvedFacts = []fact{
	{"shared_types", "components/messages/PaymentAuthorizedV1/payload/properties/card/required", `["brand","last4"]`},
	{"shared_types", "components/messages/PaymentAuthorizedV1/payload/properties/card/properties/brand/enum", `["visa","mastercard","amex"]`},
	{"full", "operations/receiveOrders/messages/0/name", `"OrderPlacedV1"`},
	{"publish", "operations/publishOrderPlaced/messages/1/name", `"OrderPlacedV2"`},
	{"full", "channels/queue.orders/messages/OrderPlacedV2/payload/required/0", `"order_id"`},
	{"cmd_asyncapi", "operations/receiveBillingPayments/channel/bindings/amqp/queue/name", `"billing.payments"`},
	{"cmd_asyncapi", "channels/queue.billing.invoices/x-lily-retry/delays", `["5s","1m0s"]`},
	{"cmd_asyncapi", "components/messages/PaymentAuthorizedV1/headers/properties/cloudEvents_dataversion/enum", `[1,"1"]`},
	{"edges", "channels/queue.pings._eu_/address", `null`},
	// YAML 1.2 reads U+0085, U+2028 and U+2029 as characters.
	{"edges", "components/messages/QuotedV1/examples/0/payload", `{"text":"a\u2028b","note":"c\u2029d\u0085e","counts":{"f\u2028g":1,"h\u0085i":2}}`},
	// A line break at either end of a string stays.
	{"edges", "components/messages/QuotedV1/examples/1/payload", `{"switch":"10:30","lines":["\n","\na"," a\nb","a\n\n","\r\n","OFF","1:2.5","<<","="],"counts":{"=":1,"on":2,"::error::k":3,"##[add-mask]k":4},"command":"##[stop-commands]t"}`},
	{"edges", "components/messages/QuotedV1/payload/properties/switch/enum", `["on","off","yes","No","y","10:30",null]`},
	{"edges", "components/messages/QuotedV1/payload/properties/command/enum", `["##[stop-commands]t","\u001b[31mred","::error::v","r\u202eevil",null]`},
	{"edges", "channels/queue.q_evil___add-mask_/address", `"q\u202eevil##[add-mask]"`},
}

// TestAsyncAPIParser validates every documented schema's document with the
// AsyncAPI project's own parser (@asyncapi/parser, which checks AsyncAPI
// 3.0.0 and its bindings against the specification's JSON Schema), checks
// each message's examples against its schemas, and reads facts from what
// the parser resolved. It needs node and npm: it installs the parser once
// into the user's cache directory, keyed by the lock file's hash (a cold
// install takes 10 to 20 seconds, a warm run about 3). Without node or npm
// it fails; go test -short skips it.
func TestAsyncAPIParser(t *testing.T) {
	if testing.Short() {
		t.Skip("validation by the AsyncAPI parser (node and npm) skipped in -short mode")
	}
	modules := npmtest.Install(t, validator, "@asyncapi/parser")
	dir := t.TempDir()
	var files []string
	for _, path := range documented {
		files = append(files, filepath.Join(dir, name(path)+".yaml"))
	}
	for name, doc := range documents(t) {
		if err := os.WriteFile(filepath.Join(dir, name+".yaml"), doc, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	script, err := filepath.Abs(filepath.Join(validator, "validate.cjs"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", append([]string{script, "--resolved", dir}, files...)...)
	cmd.Env = append(os.Environ(), "NODE_PATH="+modules)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the AsyncAPI parser refused a document (%v):\n%s", err, out)
	}
	t.Logf("%s", out)
	docs := map[string]any{}
	for _, path := range files {
		name := strings.TrimSuffix(filepath.Base(path), ".yaml")
		data, err := os.ReadFile(filepath.Join(dir, name+".resolved.json"))
		if err != nil {
			t.Fatal(err)
		}
		var v any
		if err := json.Unmarshal(data, &v); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		docs[name] = v
	}
	checkFacts(t, docs, resolvedFacts)
}
