package schema

import (
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestAsyncAPIKey(t *testing.T) {
	f, err := Parse("s.yaml", []byte(strings.Replace(valid, "package: ordersmsg\n", "package: ordersmsg\nasyncapi: {file: './docs\\api.yaml', version: 2.0.0-rc.1}\n", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if want := (&AsyncAPI{File: "docs/api.yaml", Version: "2.0.0-rc.1"}); !cmp.Equal(f.AsyncAPI, want) {
		t.Errorf("asyncapi %+v, want %+v", f.AsyncAPI, want)
	}
	f, err = Parse("s.yaml", []byte(strings.Replace(valid, "package: ordersmsg\n", "package: ordersmsg\nasyncapi: {file: api.yml}\n", 1)))
	if err != nil || f.AsyncAPI.Version != DefaultAsyncAPIVersion {
		t.Errorf("default version: %v, %+v", err, f.AsyncAPI)
	}
	for value, want := range map[string]string{
		"{version: 1.0.0}":            "3:11: asyncapi has no file (the document's path relative to this file, such as file: orders.asyncapi.yaml) [MISSING-KEY]",
		"{file: /srv/api.yaml}":       `3:18: asyncapi file "/srv/api.yaml" must be a path relative to the schema file [BAD-OUTPUT]`,
		"{file: api.json}":            `3:18: asyncapi file "api.json" must end in .yaml or .yml: lilygen writes the document as YAML [BAD-OUTPUT]`,
		"{file: ../api.yaml}":         `3:18: asyncapi file "../api.yaml" must lie below the schema file's directory [BAD-OUTPUT]`,
		"{file: a.yaml, version: ''}": "3:35: asyncapi version: want the API's version, such as 1.2.0 [EMPTY]",
		"{file: a.yaml, version: 2}":  "3:35: asyncapi version: want a string, got the integer 2 [WRONG-KIND]",
		"{file: a.yaml, title: x}":    `3:26: unknown key "title" (did you mean "file"?) [UNKNOWN-KEY]`,
		"api.yaml":                    "3:11: asyncapi: want a mapping, got the string \"api.yaml\" [WRONG-KIND]",
	} {
		src := strings.Replace(valid, "package: ordersmsg\n", "package: ordersmsg\nasyncapi: "+value+"\n", 1)
		if got := errorsOf(t, src); !cmp.Equal(got, []string{want}) {
			t.Errorf("asyncapi: %s\n got %q\nwant %q", value, got, want)
		}
	}
}

// The document belongs to the root file, as the package and output do.
func TestAsyncAPIKeyInInclude(t *testing.T) {
	files := map[string]string{
		"root.yaml": "version: 1\npackage: x\ninclude: [a.yaml]\n",
		"a.yaml":    "version: 1\nasyncapi: {file: a.yaml}\nmessages:\n  A: {versions: {1: {}}}\n",
	}
	read := func(name string, _ int) ([]byte, error) {
		if data, ok := files[name]; ok {
			return []byte(data), nil
		}
		return nil, os.ErrNotExist
	}
	_, err := parse("root.yaml", []byte(files["root.yaml"]), read)
	want := "a.yaml:2:1: asyncapi belongs in the root schema file, not in an included one [BAD-INCLUDE]"
	if err == nil || err.Error() != want {
		t.Errorf("got %v, want %s", err, want)
	}
}
