package gen

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lily-mq/lily/schema"
)

// replayed are the schemas whose examples are replayed through their
// generated code: the example's and every golden schema with examples.
var replayed = func() []string {
	out := []string{"../examples/orders/orders.lily.yaml"}
	golden, _ := filepath.Glob("../testdata/golden/*/schema.lily.yaml")
	for _, name := range golden {
		if f, err := schema.Load(name); err == nil && slices.ContainsFunc(f.Messages, func(m *schema.Message) bool {
			return slices.ContainsFunc(m.Versions, func(v *schema.Version) bool { return len(v.Examples) > 0 })
		}) {
			out = append(out, name)
		}
	}
	return out
}()

// TestExamplesReplay compiles the code generated for each schema in replayed
// with a test that feeds every example of every version through its extractor
// and header extractor, then through its producer, if it has one, and back.
// It also feeds mutations of each example to both the generated extractor
// and the schema's own checker (which lilygen uses to refuse examples and
// defaults), and requires that they report the same problem at the same
// path.
func TestExamplesReplay(t *testing.T) {
	if testing.Short() {
		t.Skip("compiling generated code is skipped in -short mode")
	}
	module, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	tmp, err := os.MkdirTemp(filepath.Join(module, "testdata"), "replay-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	var pkgs []string
	for i, name := range replayed {
		f, err := schema.Load(name)
		if err != nil {
			t.Fatal(err)
		}
		out, err := Generate(f)
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(tmp, strconv.Itoa(i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(dir, "gen.go"), out.Content)
		write(t, filepath.Join(dir, "replay_test.go"), replayTest(t, f))
		pkgs = append(pkgs, "./"+filepath.ToSlash(must(filepath.Rel(module, dir))))
	}
	cmd := exec.Command("go", append([]string{"test", "-count=1"}, pkgs...)...)
	cmd.Dir = module
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("replaying the examples: %v\n%s", err, out)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func write(t *testing.T, name string, content []byte) {
	t.Helper()
	if err := os.WriteFile(name, content, 0o644); err != nil {
		t.Fatal(err)
	}
}

// replayTest writes the test file of schema f's package.
func replayTest(t *testing.T, f *schema.File) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "package %s\n\nimport (\n\t\"context\"\n\t\"reflect\"\n\t\"testing\"\n\t\"time\"\n\n\truntime %q\n)\n\nvar _ = time.UTC\n\n", f.Package, rt)
	b.WriteString(`type recorder []runtime.Message

func (r *recorder) Send(_ context.Context, m runtime.Message) error {
	*r = append(*r, m)
	return nil
}

func lookup(h map[string]any) func(string) (any, bool) {
	return func(k string) (any, bool) { v, ok := h[k]; return v, ok }
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

`)
	routed := routedVersions(f)
	for _, m := range f.Messages {
		for _, v := range m.Versions {
			if len(v.Examples) == 0 {
				continue
			}
			// A version neither routed nor produced has no header extractor.
			readsHeaders := v.HeadersName != "" && (routed[v] || f.Produced(m))
			fmt.Fprintf(&b, "func TestReplay%s(t *testing.T) {\n", v.GoName)
			for i, ex := range v.Examples {
				fmt.Fprintf(&b, "\t{ // example %d\n\t\tmsg, err := Extract%s([]byte(%s))\n\t\tif err != nil {\n\t\t\tt.Fatal(err)\n\t\t}\n", i+1, v.GoName, strconv.Quote(string(ex.Body)))
				if readsHeaders {
					fmt.Fprintf(&b, "\t\tif msg.Headers, err = extract%s(lookup(%s)); err != nil {\n\t\t\tt.Fatal(err)\n\t\t}\n", v.HeadersName, goHeaders(ex.Headers))
				}
				// Messages of another producer's envelope have no producer.
				if !f.Produced(m) {
					b.WriteString("\t\t_ = msg\n\t}\n")
				} else {
					fmt.Fprintf(&b, `		p, err := New%s("m-1", msg)
		if err != nil {
			t.Fatal(err)
		}
		back, err := Extract%s(p.Body)
		if err != nil {
			t.Fatal(err)
		}
`, v.GoName, v.GoName)
					if v.HeadersName != "" {
						fmt.Fprintf(&b, "\t\tif back.Headers, err = extract%s(lookup(p.Headers)); err != nil {\n\t\t\tt.Fatal(err)\n\t\t}\n", v.HeadersName)
					}
					b.WriteString("\t\tif !reflect.DeepEqual(back, msg) {\n\t\t\tt.Errorf(\"after a round trip through the producer: %+v, want %+v\", back, msg)\n\t\t}\n")
					if m.Publish != nil {
						b.WriteString(publishCheck(t, m, v, ex))
					}
					b.WriteString("\t}\n")
				}
				for _, body := range append(mutations(t, ex.Body), nestings(t, ex.Body)...) {
					want := ""
					if err := v.Check(body, ex.Headers); err != nil {
						want = err.Error()
					}
					fmt.Fprintf(&b, "\tif got := errText(first(Extract%s([]byte(%s)))); got != %q {\n\t\tt.Errorf(\"%%s: extractor %%q, checker %%q\", %s, got, %q)\n\t}\n",
						v.GoName, strconv.Quote(string(body)), want, strconv.Quote(string(body)), want)
				}
			}
			b.WriteString("}\n\n")
		}
	}
	b.WriteString("func first[T any](_ T, err error) error { return err }\n")
	return []byte(b.String())
}

// nestings returns variants of a JSON body with a member the schema does
// not know added to one object, an array nested so deep that the body nests
// exactly 1,000 deep, or 1,001, counted from its root as docs/schema.md
// counts it.
func nestings(t *testing.T, body []byte) [][]byte {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		t.Fatal(err)
	}
	const mark = "\x02" // written "\u0002", then replaced by the arrays
	var out [][]byte
	var visit func(v any, depth int)
	visit = func(v any, depth int) {
		switch x := v.(type) {
		case map[string]any:
			for _, n := range []int{1000 - depth, 1001 - depth} {
				x["lily-deep"] = mark
				arrays := strings.Repeat("[", n) + strings.Repeat("]", n)
				out = append(out, bytes.Replace(must(json.Marshal(doc)), []byte(`"\u0002"`), []byte(arrays), 1))
				delete(x, "lily-deep")
			}
			for _, k := range slices.Sorted(maps.Keys(x)) {
				visit(x[k], depth+1)
			}
		case []any:
			for _, e := range x {
				visit(e, depth+1)
			}
		}
	}
	visit(doc, 1)
	return out
}

// publishCheck writes the check that Publish<Version> sends example ex
// where the schema publishes it, or fails as it must for a routing key
// longer than AMQP carries.
func publishCheck(t *testing.T, m *schema.Message, v *schema.Version, ex schema.Example) string {
	var body map[string]any
	if err := json.Unmarshal(ex.Body, &body); err != nil {
		t.Fatal(err)
	}
	value := func(k schema.Key) string {
		switch {
		case k.Field != "":
			return body[k.Field].(string)
		case k.Header != "":
			return ex.Headers[k.Header].(string)
		}
		return k.For(v)
	}
	pub := m.Publish
	key, order, wantErr := value(pub.RoutingKey), "", ""
	if pub.OrderKey != nil {
		order = value(*pub.OrderKey)
	}
	if len(key) > 255 {
		path := pub.RoutingKey.Field
		if path == "" {
			path = schema.HeaderPath(pub.RoutingKey.Header)
		}
		wantErr = "field " + path + ": longer than 255 bytes"
	}
	sent := fmt.Sprintf(`len(sent) != 1 || sent[0].Exchange != %q || sent[0].RoutingKey != %q || sent[0].OrderKey != %q || sent[0].MessageId != "m-1"`, pub.Exchange, key, order)
	if wantErr != "" {
		sent = "len(sent) != 0"
	}
	return fmt.Sprintf(`		var sent recorder
		if err := Publish%s(context.Background(), &sent, "m-1", msg); errText(err) != %q {
			t.Errorf("publish: %%v, want %%q", err, %q)
		} else if %s {
			t.Errorf("sent %%+v", sent)
		}
`, v.GoName, wantErr, wantErr, sent)
}

// goHeaders writes h, an example's headers, as a Go literal.
func goHeaders(h map[string]any) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(h)) {
		var v string
		switch x := h[k].(type) {
		case time.Time:
			v = fmt.Sprintf("time.Unix(%d, 0).UTC()", x.Unix())
		case string:
			v = strconv.Quote(x)
		default:
			v = fmt.Sprintf("%T(%v)", x, x)
		}
		parts = append(parts, strconv.Quote(k)+": "+v)
	}
	return "map[string]any{" + strings.Join(parts, ", ") + "}"
}

// mutations returns variants of a JSON body, each with one value replaced,
// one key removed, one key in upper case, one key repeated or one long key
// added, to probe every bound the body reaches.
func mutations(t *testing.T, body []byte) [][]byte {
	// Numbers stay as written: int64's extremes do not survive a float64.
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		t.Fatal(err)
	}
	replacements := []any{nil, "", strings.Repeat("x", 300), "not base64!", 0, -1, 0.5, 1e12, true, []any{}, map[string]any{}, []any{nil}}
	var out [][]byte
	var visit func(v any, set func(any), remove func())
	visit = func(v any, set func(any), remove func()) {
		for _, r := range replacements {
			set(r)
			out = append(out, must(json.Marshal(doc)))
		}
		if remove != nil {
			remove()
			out = append(out, must(json.Marshal(doc)))
		}
		set(v)
		switch x := v.(type) {
		case map[string]any:
			for _, k := range slices.Sorted(maps.Keys(x)) {
				old := x[k]
				visit(old, func(n any) { x[k] = n }, func() { delete(x, k) })
				x[k] = old
				// Names match exactly: the key in upper case is another member.
				if up := strings.ToUpper(k); up != k && x[up] == nil {
					delete(x, k)
					x[up] = old
					out = append(out, must(json.Marshal(doc)))
					delete(x, up)
					x[k] = old
				}
				// The key twice, with its value: the copy, first of the
				// object's sorted keys, is renamed once marshalled.
				x[repeatMark+k] = old
				out = append(out, bytes.Replace(must(json.Marshal(doc)), []byte(`"\u0001`), []byte(`"`), 1))
				delete(x, repeatMark+k)
			}
			// A name longer than an error quotes whole, with a value wrong
			// for a map's items of any type (true for a list, [null] for a
			// bool), and the same name, unknown, for a struct.
			if long := strings.Repeat("k", 100); x[long] == nil {
				for _, bad := range []any{true, []any{nil}} {
					x[long] = bad
					out = append(out, must(json.Marshal(doc)))
				}
				delete(x, long)
			}
		case []any:
			for i, old := range x {
				visit(old, func(n any) { x[i] = n }, nil)
			}
		}
	}
	root := doc
	visit(doc, func(n any) { doc = n }, nil)
	doc = root
	return out
}

// repeatMark starts the name of a member that mutations renames to the one
// after it once the body is marshalled, as encoding/json cannot write a name
// twice; it sorts before any name of the examples and is written \u0001.
const repeatMark = "\x01"
