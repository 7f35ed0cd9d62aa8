package schema

import (
	"bytes"
	"errors"
	"fmt"
	"go/token"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/lily-mq/lily/internal/printable"
)

// Load reads and checks the schema file at name and the files it includes.
// A name that is a symbolic link to a file outside name's repository (see
// Parse) is not read.
func Load(name string) (*File, error) {
	return loadWithin(name, enclosing(filepath.Dir(name)))
}

// LoadWithin is Load for a schema whose repository has its root at the
// directory root, though no git work tree holds it (a revision written out
// from git): it and its includes stay inside root.
func LoadWithin(name, root string) (*File, error) {
	return loadWithin(name, bound{dir: fileID(root), what: inRepository})
}

// loadWithin is Load with the files read bounded by b. The root schema is
// bounded too: CI names it, but a pull request may commit a link there.
func loadWithin(name string, b bound) (*File, error) {
	if !b.holds(fileID(name)) {
		return nil, fmt.Errorf("%s: a link to a file outside %s, which is not read", name, b.what)
	}
	data, err := readFile(name, maxSchemaBytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, unwrapPath(err))
	}
	return parseWithin(name, data, readFile, b)
}

// Parse checks data, the contents of the schema file name; the files it
// includes are read from disk, relative to name's directory, and must
// stay inside its repository: the git work tree that holds name's
// directory, or that directory when none does. On failure the
// error is an ErrorList with every problem found in every file, sorted.
//
// When every problem is one of a limit that leaves the schema read whole
// (the room of a version's typed headers or a string header's min_length
// beyond a consumer's guard, an enum value over 256 bytes, a consumed
// version whose narrowest body is over its queue's max_body_bytes, a
// typed header the broker writes or routes by, a message, shared type or
// envelope name over 128 bytes), the File comes
// back beside the error: lilygen set such limits after it accepted
// schemas beyond them, so an older revision may break one, and is still
// compared with the change that meets it (lilygen breaking). A tool that
// generates code refuses it, as on any error. Load returns the same.
func Parse(name string, data []byte) (*File, error) {
	return parse(name, data, readFile)
}

// maxSchemaBytes bounds a schema, its files together. What lilygen costs
// grows with the YAML nodes it reads, and yaml.v3 holds a file's every
// node before one can be counted: its bytes are the bound that holds
// before. The densest YAML ({a,a,…}) has a node a byte, some 200 bytes of
// lilygen's memory each; a schema of 1,000 versions, each with ten fields,
// a typed header and an example, takes under a MiB, and one written by
// hand some kilobytes.
const maxSchemaBytes = 4 << 20

// reader reads a schema file, of at most room bytes: one larger, that
// would fit in maxSchemaBytes, is errPastRoom, known before it is read
// (load also refuses one a reader returns larger).
type reader func(name string, room int) ([]byte, error)

// errPastRoom is the error of a file larger than the room the files read
// before it leave.
var errPastRoom = errors.New("past the room left")

// readFile reads a schema file: a regular file, of at most room bytes,
// room at most maxSchemaBytes. An include may name anything in its
// repository (a link to /dev/zero, a FIFO), and a device or a FIFO would
// be read without end or block for ever. Its size is looked at first: a
// file listed many times, each past the room, would otherwise be read
// each time before it is refused.
func readFile(name string, room int) ([]byte, error) {
	// Looked at before it is opened: opening a FIFO waits for a writer.
	info, err := os.Stat(name)
	switch {
	case err != nil:
		return nil, err
	case !info.Mode().IsRegular():
		return nil, errors.New("not a regular file")
	case info.Size() > maxSchemaBytes:
		return nil, fmt.Errorf("larger than %d MiB", maxSchemaBytes>>20)
	case info.Size() > int64(room):
		return nil, errPastRoom
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, int64(room)+1))
	switch {
	case err != nil:
	case len(data) > maxSchemaBytes:
		err = fmt.Errorf("larger than %d MiB", maxSchemaBytes>>20) // it grew
	case len(data) > room:
		err = errPastRoom
	}
	return data, err
}

func parse(name string, data []byte, read reader) (*File, error) {
	return parseWithin(name, data, read, enclosing(filepath.Dir(name)))
}

func parseWithin(name string, data []byte, read reader, b bound) (*File, error) {
	if len(data) > maxSchemaBytes {
		return nil, fmt.Errorf("%s: larger than %d MiB", name, maxSchemaBytes>>20)
	}
	p := newParser(read)
	p.bound = b
	f := p.schema(name, data)
	if len(p.errs) > 0 {
		list := p.errs.sorted(p.files)
		if p.dropped > 0 {
			list = append(list, &Error{File: name, Line: 1, Column: 1, Rule: RuleTooMany,
				Msg: fmt.Sprintf("%d more problems, not listed: lilygen lists the first %d it finds", p.dropped, maxErrors)})
		}
		if p.dropped == 0 && p.limits == len(p.errs) {
			return f, list
		}
		return nil, list
	}
	return f, nil
}

type parser struct {
	name  string   // the file being checked, for errors
	files []string // every file read, root first
	read  reader
	// seen holds the fileID of every file read, and of every one refused
	// for the room it would take, to read or refuse each once.
	seen  map[string]bool
	ids   map[string]string // the fileID of each include's path, by path
	bound bound             // where the files included may be
	docs  []doc
	errs  ErrorList
	// dropped counts the problems found past maxErrors.
	dropped int
	// limits counts the problems listed that judge the schema against a
	// limit and leave it read whole (limitf).
	limits int
	decls  map[string]decl // Go names the generated file declares
	// types are the shared types by name; reading is the stack of those
	// being read, to name a cycle.
	types   map[string]*sharedType
	reading []string
	// publishes wait for the exchanges and queues to be read.
	publishes []pendingPublish
	// depth is how deep the field being read nests; deepest is the deepest
	// level the shared type being read reaches, written out: its height.
	depth, deepest int
	// known holds what the schema declares, as it is read.
	known declarations
	// hints works out the typo hints of the problems, within one budget.
	hints hinter
	// bytes counts the bytes of the files read, against maxSchemaBytes.
	bytes int
	// versionsRead counts the versions read, of every message of every
	// file, against maxVersions.
	versionsRead int
	// fieldsRead counts the fields read (elements and headers among
	// them), of every version and shared type, against maxFields;
	// versionFields those of the version being read, against
	// maxVersionFields, and inVersion names it, "" outside one.
	fieldsRead, versionFields int
	inVersion                 string
	// patternInsts counts the instructions the patterns read compile
	// to, against maxPatternInsts.
	patternInsts int
	// minBodies works out the narrowest body of each version a queue
	// consumes.
	minBodies minBodies
}

// declarations holds the envelopes, messages, exchanges and queues read so
// far by name, and each wire type by the first message that travels as it:
// a list searched for each of them would take time of the square of their
// number.
type declarations struct {
	envelopes       map[string]*Envelope
	messages, types map[string]*Message
	// brokenMessages are those whose body is not a mapping, where they
	// are declared: their declaration's error is the one a use of them
	// gets.
	brokenMessages map[string]Pos
	exchanges      map[string]*Exchange
	queues         map[string]*Queue
}

// newParser returns a parser that reads included files with read.
func newParser(read reader) *parser {
	return &parser{read: read, seen: map[string]bool{}, ids: map[string]string{}, decls: map[string]decl{}, types: map[string]*sharedType{}, known: declarations{
		envelopes: map[string]*Envelope{}, messages: map[string]*Message{}, types: map[string]*Message{}, brokenMessages: map[string]Pos{},
		exchanges: map[string]*Exchange{}, queues: map[string]*Queue{},
	}}
}

// doc is one file's top-level mapping.
type doc struct {
	name string
	root *yaml.Node
	m    map[string]entry
}

// decl is where a generated Go name comes from, to report two that clash.
type decl struct {
	what string
	at   Pos
}

type entry struct{ k, v *yaml.Node }

func (p *parser) pos(n *yaml.Node) Pos { return Pos{File: p.name, Line: n.Line, Column: n.Column} }

// errorf reports a problem at n; the caller may add a hint to the result.
func (p *parser) errorf(n *yaml.Node, rule, format string, args ...any) *Error {
	return p.errorAt(Pos{File: p.name, Line: n.Line, Column: n.Column}, rule, format, args...)
}

// limitf reports a problem at n that judges what was read whole against a
// limit of lilygen's, one it may have set after it accepted schemas beyond
// it; the caller may add a hint to the result.
func (p *parser) limitf(n *yaml.Node, rule, format string, args ...any) *Error {
	listed := len(p.errs)
	e := p.errorf(n, rule, format, args...)
	if len(p.errs) > listed {
		p.limits++
	}
	return e
}

// problems counts the problems found so far, listed or not: a step that
// compares the count before and after it sees its own past maxErrors too.
func (p *parser) problems() int { return len(p.errs) + p.dropped }

// faults counts the problems found so far but the limits (limitf), which
// leave what they judge read whole.
func (p *parser) faults() int { return p.problems() - p.limits }

// errorAt reports a problem at a position read before, its message
// bounded (clip). Past maxErrors the problem is counted, and the caller's
// hint goes nowhere.
func (p *parser) errorAt(at Pos, rule, format string, args ...any) *Error {
	if len(p.errs) >= maxErrors {
		p.dropped++
		return &Error{}
	}
	e := &Error{File: at.File, Line: at.Line, Column: at.Column, Rule: rule, Msg: clip(fmt.Sprintf(format, args...))}
	p.errs = append(p.errs, e)
	return e
}

// where names a position for a message about another node: its line in the
// same file, or file:line in another.
func (p *parser) where(at Pos) string {
	if at.File == p.name {
		return fmt.Sprintf("line %d", at.Line)
	}
	return fmt.Sprintf("%s:%d", at.File, at.Line)
}

// declare records the Go names the generated file declares for one schema
// entity, and reports the first that another entity already took.
func (p *parser) declare(what string, at *yaml.Node, names ...string) {
	for _, name := range names {
		if first, ok := p.decls[name]; ok {
			p.errorf(at, RuleNameClash, "%s gives the Go name %s, already taken by %s (%s)", what, name, first.what, p.where(first.at))
			return
		}
	}
	for _, name := range names {
		p.decls[name] = decl{what: what, at: p.pos(at)}
	}
}

var (
	rootKeys     = []string{"version", "package", "output", "asyncapi", "include", "envelopes", "types", "messages", "exchanges", "queues", "acknowledge"}
	includedKeys = []string{"version", "include", "envelopes", "types", "messages", "exchanges", "queues"}
)

func (p *parser) schema(name string, data []byte) *File {
	f := &File{Name: name, Output: DefaultOutput}
	p.load(name, data, nil)
	if len(p.docs) == 0 || p.docs[0].name != name {
		return nil
	}
	root := p.docs[0]
	p.name = name
	f.bound = p.bound
	if e, ok := root.m["package"]; ok {
		f.Package = p.packageName(e.v)
		f.outputAt = p.pos(e.v)
	} else {
		p.errorf(root.root, RuleMissingKey, "missing package: the Go package name of the generated code")
	}
	if e, ok := root.m["output"]; ok {
		f.Output = p.output(e.v)
		f.outputAt = p.pos(e.v)
	}
	if e, ok := root.m["asyncapi"]; ok {
		f.AsyncAPI, f.asyncAPIAt = p.asyncAPI(e.v)
	}
	if e, ok := root.m["acknowledge"]; ok {
		f.Acknowledged = p.acknowledgements(e.v)
	}
	f.Includes = p.files[1:]
	// Envelopes first: messages and queues name them.
	for _, d := range p.docs {
		p.name = d.name
		if e, ok := d.m["envelopes"]; ok {
			f.Envelopes = append(f.Envelopes, p.envelopes(e.v)...)
		}
	}
	f.Types = p.sharedTypes() // before messages, whose fields use them
	declared := false
	for _, d := range p.docs {
		p.name = d.name
		if e, ok := d.m["messages"]; ok {
			declared = true
			f.Messages = append(f.Messages, p.messages(e.v, f.Envelopes)...)
		}
	}
	if !declared {
		p.name = name
		p.errorf(root.root, RuleMissingKey, "missing messages")
	}
	var exchanges []*pendingExchange
	for _, d := range p.docs {
		p.name = d.name
		if e, ok := d.m["exchanges"]; ok {
			p.entries(e.v, "exchanges", func(k, v *yaml.Node) {
				if pe := p.exchange(k, v); pe != nil {
					f.Exchanges = append(f.Exchanges, pe.x)
					p.known.exchanges[pe.x.Name] = pe.x
					exchanges = append(exchanges, pe)
				}
			})
		}
	}
	p.exchangeRefs(f, exchanges)
	for _, d := range p.docs {
		p.name = d.name
		if e, ok := d.m["queues"]; ok {
			p.entries(e.v, "queues", func(k, v *yaml.Node) {
				if q := p.queue(k, v, f); q != nil {
					f.Queues = append(f.Queues, q)
					p.known.queues[q.Name] = q
				}
			})
		}
	}
	p.queueRoles(f.Queues)
	f.readIn = readIn(f.Queues)
	f.known = p.known
	f.exchangeAt = make(map[*Exchange]int, len(f.Exchanges))
	for i, x := range f.Exchanges {
		f.exchangeAt[x] = i
	}
	p.exampleHeaders(f)
	p.publishRefs(f)
	return f
}

// maxFiles bounds the files one schema reads, the root among them: a
// directory bind-mounted in itself names new files without end.
const maxFiles = 1000

// maxPath bounds the path, in bytes, that an include or a generated file
// leads to, before its links are resolved: Linux opens none longer
// (PATH_MAX), and one of 40,000 parts took seconds to resolve.
const maxPath = 4096

// fileID names a file by what it is, not by the path that reached it:
// symbolic links resolved, absolute and clean. l1/sub.yaml, with l1 a link
// to ., is sub.yaml; ./root.yaml is root.yaml. Of a path that does not
// resolve (its file does not exist, and reading it will say so), the
// longest leading directory that does is resolved.
func fileID(name string) string {
	abs, err := filepath.Abs(name)
	if err != nil {
		return filepath.Clean(name)
	}
	// ends are where the leading directories of abs end, abs's own last.
	// A directory that resolves has each above it resolve too, so the
	// longest that does is found by halves: tried one at a time, each
	// resolved whole, they took time of the square of their number.
	var ends []int
	for i := len(filepath.VolumeName(abs)) + 1; i < len(abs); i++ {
		if os.IsPathSeparator(abs[i]) {
			ends = append(ends, i)
		}
	}
	ends = append(ends, len(abs))
	id := abs
	for lo, hi := 0, len(ends); lo < hi; {
		mid := int(uint(lo+hi) >> 1)
		real, err := filepath.EvalSymlinks(abs[:ends[mid]])
		if err != nil {
			hi = mid
			continue
		}
		id, lo = filepath.Join(real, abs[ends[mid]:]), mid+1
	}
	return id
}

// bound is the directory the files a schema includes must be in, resolved
// as fileID does, and what it is, for errors. A schema from a pull request,
// checked in CI, would otherwise read any file the runner can
// (../../.git-credentials) and quote it in its errors.
type bound struct{ dir, what string }

const (
	inRepository = "the repository"
	inModule     = "the Go module, and no git work tree holds it"
	inSchemaDir  = "the root schema's directory, and no git work tree or Go module holds it"
)

// enclosing is the bound of a root schema in dir: the top of the git work
// tree that holds dir (the nearest directory up with a .git, which git
// keeps out of any tree it commits, so a change cannot add one); outside
// any, as where a build copies the sources without .git, the outermost Go
// module that holds dir (the last directory up with a go.mod: a service's
// module in a repository of several may include a file the repository's
// modules share), or dir itself.
func enclosing(dir string) bound {
	dir = fileID(dir)
	module := ""
	for d := dir; ; {
		if _, err := os.Lstat(filepath.Join(d, ".git")); err == nil {
			return bound{dir: d, what: inRepository}
		}
		if _, err := os.Lstat(filepath.Join(d, "go.mod")); err == nil {
			module = d
		}
		parent := filepath.Dir(d)
		if parent == d {
			break
		}
		d = parent
	}
	if module != "" {
		return bound{dir: module, what: inModule}
	}
	return bound{dir: dir, what: inSchemaDir}
}

// holds reports whether the file whose fileID is id is inside b.
func (b bound) holds(id string) bool {
	rel, err := filepath.Rel(b.dir, id)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// inGit reports whether the file whose fileID is id, inside dir, is in a
// .git directory below dir: the repository's, or a submodule's. It is
// inside the repository, yet git keeps there what is no schema, among it
// the config where CI may leave the token it fetched with. Compared
// without case, as a case-insensitive file system (macOS's) finds .GIT.
func inGit(dir, id string) bool {
	rel, err := filepath.Rel(dir, id)
	if err != nil {
		return false
	}
	for part := range strings.SplitSeq(filepath.ToSlash(rel), "/") {
		if strings.EqualFold(part, ".git") {
			return true
		}
	}
	return false
}

// load reads one file's top level, then the files it includes, each once.
// at is the include entry that names the file, nil for the root.
func (p *parser) load(name string, data []byte, at *yaml.Node) {
	p.files = append(p.files, name)
	p.seen[fileID(name)] = true
	p.bytes += len(data)
	p.name = name
	root := p.top(data)
	if root == nil {
		return
	}
	keys := rootKeys
	if at != nil {
		keys = includedKeys
		for _, key := range []string{"package", "output", "asyncapi"} {
			if k := keyNode(root, key); k != nil {
				p.errorf(k, RuleInclude, "%s belongs in the root schema file, not in an included one", key)
				keys = append(slices.Clip(keys), key) // reported once, as above
			}
		}
	}
	m := p.object(root, "the schema", keys...)
	p.docs = append(p.docs, doc{name: name, root: root, m: m})
	e, ok := m["include"]
	if !ok {
		return
	}
	items, _ := p.seq(e.v, "include")
	for _, item := range items {
		s, ok := p.str(item, "include")
		if !ok {
			continue
		}
		if s == "" || filepath.IsAbs(s) || strings.HasPrefix(s, "/") {
			p.errorf(item, RuleInclude, "include %q must be a file name relative to this file", shorten(s))
			continue
		}
		target := filepath.Join(filepath.Dir(name), filepath.FromSlash(s))
		if len(target) > maxPath {
			p.errorf(item, RuleInclude, "include %q leads to a path of %d bytes: at most %d, the longest a system opens", shorten(s), len(target), maxPath)
			continue
		}
		id, ok := p.ids[target]
		if !ok {
			// A file listed many times is resolved once.
			id = fileID(target)
			p.ids[target] = id
		}
		if !p.bound.holds(id) {
			p.errorf(item, RuleInclude, "include %q is outside %s", shorten(s), p.bound.what)
			continue
		}
		if inGit(p.bound.dir, id) {
			p.errorf(item, RuleInclude, "include %q is in a .git directory, git's own, which is not read: its config may hold a credential", shorten(s))
			continue
		}
		if p.seen[id] {
			// Each file is read once, so includes may form a diamond or a
			// cycle; a file listed twice is no different.
			continue
		}
		if len(p.files) >= maxFiles {
			p.errorf(item, RuleInclude, "include %q would be file %d of this schema: at most %d are read", shorten(s), len(p.files)+1, maxFiles)
			continue
		}
		room := maxSchemaBytes - p.bytes
		data, err := p.read(target, room)
		if err != nil && !errors.Is(err, errPastRoom) {
			p.errorf(item, RuleInclude, "cannot read include %q: %v", shorten(s), unwrapPath(err))
			continue
		}
		if err != nil || len(data) > room {
			// Refused once: a repeat of it is no different.
			p.seen[id] = true
			p.errorf(item, RuleInclude, "include %q takes the schema past %d MiB, the most its files may hold together (it is not read)", shorten(s), maxSchemaBytes>>20).
				Hint = "split the messages and queues into schemas of their own, each with its root file"
			continue
		}
		p.load(target, data, item)
		p.name = name
	}
}

// unwrapPath drops the path an os error repeats, since the message names it.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// top parses data and checks its version; it returns the top-level mapping,
// or nil when nothing more can be read.
func (p *parser) top(data []byte) *yaml.Node {
	// yaml.v3 skips a byte order mark, and counts no column for it.
	text := bytes.TrimPrefix(data, []byte("\ufeff"))
	if at, what, fix, ok := yamlOnlyBreak(text); ok {
		// Read on, the file's errors after it would name lines the file
		// does not show: it is refused as a syntax error is.
		line, col := gitPosition(text, at)
		p.errorf(&yaml.Node{Line: line, Column: col}, RuleSyntax, "%s ends a line to YAML, not to git or an editor: the lines of the errors after it would not be the file's", what).Hint = fix
		return nil
	}
	var doc, next yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		p.syntaxError(data, err)
		return nil
	}
	// yaml.Unmarshal reads the first document and leaves the rest unread:
	// what follows a --- would be silently left out of the schema. An empty
	// one (a file that ends with ---) holds nothing to leave out.
	for {
		switch err := dec.Decode(&next); {
		case errors.Is(err, io.EOF):
		case err != nil:
			p.syntaxError(data, err)
			return nil
		case emptyDocument(&next):
			continue
		default:
			p.errorf(&next, RuleSyntax, "a second YAML document: a schema file is one document").Hint = "remove the --- and join the two"
			return nil
		}
		break
	}
	if len(doc.Content) == 0 {
		p.errorf(&yaml.Node{Line: 1, Column: 1}, RuleEmpty, "the schema is empty: want a mapping with version, package and messages")
		return nil
	}
	root := doc.Content[0]
	if root.Kind == yaml.ScalarNode {
		// Not YAML-shaped at all (a .env file, a key): what it holds may be
		// a secret, so it is not quoted.
		p.errorf(root, RuleKind, "the schema: want a mapping, got a single value (its content is not shown): a schema starts with version: 1")
		return nil
	}
	if !p.kind(root, yaml.MappingNode, "the schema") {
		return nil
	}
	// The version decides what every other key means, so it is read first
	// and nothing else is read under a version this generator does not know.
	k := keyNode(root, "version")
	if k == nil {
		p.errorf(root, RuleVersion, "missing version: add version: 1")
		return nil
	}
	version := root.Content[slices.Index(root.Content, k)+1]
	if v, ok := p.integer(version, "version"); !ok {
		return nil
	} else if v != 1 {
		p.errorf(version, RuleVersion, "schema version %d is unknown: this lilygen reads version 1", v)
		return nil
	}
	return root
}

func (p *parser) packageName(n *yaml.Node) string {
	s, ok := p.str(n, "package")
	if !ok {
		return ""
	}
	if !isIdent(s, false) || strings.ToLower(s) != s || token.IsKeyword(s) {
		p.errorf(n, RuleName, "package %q is not a lower-case Go package name such as ordersmsg", shorten(s))
	}
	return s
}

func (p *parser) output(n *yaml.Node) string {
	s, ok := p.str(n, "output")
	if !ok {
		return DefaultOutput
	}
	clean := filepath.ToSlash(filepath.Clean(strings.ReplaceAll(s, `\`, "/")))
	switch {
	case s == "" || strings.HasPrefix(clean, "/") || strings.Contains(clean, ":"):
		p.errorf(n, RuleOutput, "output %q must be a directory relative to the schema file", shorten(s))
	case !printableText(s):
		p.errorf(n, RuleOutput, "output %q holds a character that is not printable: %s", shorten(s), unprintableWhy)
	}
	return clean
}

// printableText reports whether a path or header the schema names is
// printable text: a control character (an ANSI escape, a carriage return, a
// NUL), a bidi override or another format character (a byte order mark), a
// space other than U+0020 or a byte that is not UTF-8 in it would act on the
// terminal every message naming it is printed to, forging lines, or hide in
// the generated code, and no directory or header needs one.
func printableText(s string) bool { return printable.String(s) == s }

// unprintableWhy says why a path must be printable.
const unprintableWhy = "a terminal would act on it in every message that names the file"

// emptyDocument reports whether a YAML document holds nothing: a --- with
// nothing after it.
func emptyDocument(n *yaml.Node) bool {
	return len(n.Content) == 1 && n.Content[0].Kind == yaml.ScalarNode && n.Content[0].Tag == "!!null" && n.Content[0].Value == ""
}
