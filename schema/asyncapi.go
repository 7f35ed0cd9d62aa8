package schema

import (
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"
)

// AsyncAPI is the AsyncAPI document of a schema that `lilygen generate`
// writes and `lilygen check` verifies, like the Go file.
type AsyncAPI struct {
	// File is the document's path, slash-separated and relative to the
	// schema file's directory; it ends in .yaml or .yml.
	File string
	// Version is the document's info.version, the version of the API it
	// describes.
	Version string
}

// DefaultAsyncAPIVersion is info.version when the schema names none:
// AsyncAPI requires one, and a Lily schema has no version of its own API.
const DefaultAsyncAPIVersion = "1.0.0"

// asyncAPI reads the root file's asyncapi: {file, version}, and where the
// file is named.
func (p *parser) asyncAPI(n *yaml.Node) (*AsyncAPI, Pos) {
	m := p.object(n, "asyncapi", "file", "version")
	if m == nil {
		return nil, Pos{}
	}
	a := &AsyncAPI{Version: DefaultAsyncAPIVersion}
	if e, ok := m["version"]; ok {
		s, ok := p.str(e.v, "asyncapi version")
		switch {
		case ok && s == "":
			p.errorf(e.v, RuleEmpty, "asyncapi version: want the API's version, such as 1.2.0")
		case ok:
			a.Version = s
		}
	}
	e, ok := m["file"]
	if !ok {
		p.errorf(n, RuleMissingKey, "asyncapi has no file").Hint = "the document's path relative to this file, such as file: orders.asyncapi.yaml"
		return nil, Pos{}
	}
	s, ok := p.str(e.v, "asyncapi file")
	if !ok {
		return nil, Pos{}
	}
	// Cleaned as output is, so that two spellings of one path are one file.
	clean := filepath.ToSlash(filepath.Clean(strings.ReplaceAll(s, `\`, "/")))
	switch {
	case s == "" || strings.HasPrefix(clean, "/") || strings.Contains(clean, ":"):
		p.errorf(e.v, RuleOutput, "asyncapi file %q must be a path relative to the schema file", shorten(s))
	case !printableText(s):
		p.errorf(e.v, RuleOutput, "asyncapi file %q holds a character that is not printable: %s", shorten(s), unprintableWhy)
	case clean == ".." || strings.HasPrefix(clean, "../"):
		// generate finds the documents it wrote below the schema's
		// directory, to delete one the schema no longer names.
		p.errorf(e.v, RuleOutput, "asyncapi file %q must lie below the schema file's directory", shorten(s))
	case !strings.HasSuffix(clean, ".yaml") && !strings.HasSuffix(clean, ".yml"):
		// The document is YAML; a .json name would promise what it is not.
		p.errorf(e.v, RuleOutput, "asyncapi file %q must end in .yaml or .yml: lilygen writes the document as YAML", shorten(s))
	default:
		a.File = clean
		return a, p.pos(e.v)
	}
	return nil, Pos{}
}
