package schema

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/lily-mq/lily/envelope"
)

// messages reads one file's messages; envelopes are the profiles they may
// name.
func (p *parser) messages(n *yaml.Node, envelopes []*Envelope) []*Message {
	var out []*Message
	p.entries(n, "messages", func(k, v *yaml.Node) {
		if len(k.Value) > maxName {
			const hint = "give it a shorter name: it names the Go types and functions of the message"
			if v.Kind != yaml.MappingNode || keyNode(v, "type") == nil {
				// It travels as its type, longer than a consumer's guard
				// has ever taken. Its uses are not reported: its
				// declaration's error says why.
				p.errorf(k, RuleName, "message name %q is %d bytes: at most %d", shorten(k.Value), len(k.Value), maxName).Hint = hint
				p.known.brokenMessages[k.Value] = p.pos(k)
				return
			}
			// With its own type, a limit set after lilygen accepted such
			// names: the message is read all the same.
			p.limitf(k, RuleName, "message name %q is %d bytes: at most %d", shorten(k.Value), len(k.Value), maxName).Hint = hint
		}
		if at, ok := p.known.messageAt(k.Value); ok {
			p.errorf(k, RuleDuplicate, "message %s is already declared (%s)", overLong(k.Value), p.where(at))
			return
		}
		if !isIdent(k.Value, true) {
			e := p.errorf(k, RuleName, "message name %q is not an UpperCamel Go identifier such as OrderPlaced", overLong(k.Value))
			if len(k.Value) <= maxName {
				e.Hint = renameHint(k.Value)
			}
		}
		msg := &Message{Name: k.Value, Type: k.Value, Pos: p.pos(k)}
		p.declare("message "+msg.Name, k, msg.Name+"Type")
		m := p.object(v, k.Value, "type", "envelope", "publish", "versions")
		if m == nil {
			p.known.brokenMessages[msg.Name] = msg.Pos
			return
		}
		if e, ok := m["type"]; ok {
			if s, ok := p.wireType(e.v); ok {
				msg.Type = s
			}
		}
		if first, ok := p.known.types[msg.Type]; ok {
			at := k
			if e, ok := m["type"]; ok {
				at = e.v
			}
			p.errorf(at, RuleDuplicate, "message %s has the type %q of message %s (%s): a delivery's type picks its message", msg.Name, msg.Type, first.Name, p.where(first.Pos))
		} else {
			p.known.types[msg.Type] = msg
		}
		if e, ok := m["envelope"]; ok {
			msg.Envelope = p.envelopeRef(e.v, envelopes)
		}
		if e, ok := m["versions"]; ok {
			msg.Versions = p.versions(msg, e.v)
		} else {
			p.errorf(k, RuleMissingKey, "message %s has no versions", msg.Name)
		}
		// After the versions, whose fields and headers a key names.
		if e, ok := m["publish"]; ok {
			p.publish(msg, e.k, e.v)
		}
		if msg.Envelope != nil {
			p.ownHeaders(msg.Envelope, msg)
		}
		out = append(out, msg)
		p.known.messages[msg.Name] = msg
	})
	if n.Kind == yaml.MappingNode && len(n.Content) == 0 {
		p.errorf(n, RuleEmpty, "messages: want at least one message")
	}
	return out
}

// renameHint suggests a Go name for a message named name, which is not one,
// and that it keep name as the type it travels as, when it could.
func renameHint(name string) string {
	hint := "name it " + GoName(name)
	if GoName(name) == "" { // no letter or digit to make one of
		hint = "give it such a name"
	}
	if !isWireType(name) {
		return hint
	}
	return hint + " and set type: " + name + ", the type it travels as"
}

var versionKeys = []string{"content_types", "fields", "headers", "examples", "deprecated_since", "remove_after"}

func (p *parser) versions(msg *Message, n *yaml.Node) []*Version {
	var out []*Version
	first := map[int]*yaml.Node{}
	last := 1 // the version number read last, for a hint
	// misplaced holds the version keys written as versions (fields:
	// indented as 1: is), read as the body of version misplacedNum.
	var misplaced *yaml.Node
	misplacedNum := 0
	// Not p.entries: a repeated key here is a repeated version, said so.
	if !p.kind(n, yaml.MappingNode, "versions") {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if p.pastVersionCap(msg, k) {
			continue
		}
		num, ok := p.versionKey(msg, k, last)
		switch {
		case !ok && slices.Contains(versionKeys, k.Value):
			// A version's key indented at the level of the versions:
			// its body, with any others beside it, is checked below as
			// the body of the version it was meant for.
			if misplaced == nil {
				misplaced = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: k.Line, Column: k.Column}
				misplacedNum = last
			}
			misplaced.Content = append(misplaced.Content, k, v)
			continue
		case !ok:
			// Its body is checked all the same, so that fixing its key
			// reveals no errors that were hidden; nothing is generated
			// from it.
			if guess, ok := versionNumber(k.Value); ok {
				last = guess
			}
			p.checkVersion(msg, last, fmt.Sprintf("%s version %q", msg.Name, shorten(k.Value)), k, v)
			continue
		}
		last = num
		if prev, dup := first[num]; dup {
			p.errorf(k, RuleDuplicateVersion, "duplicate version %d of %s (first at line %d)", num, msg.Name, prev.Line).
				Hint = fmt.Sprintf("a changed payload needs a new version number, such as %d", slices.Max(slices.Collect(maps.Keys(first)))+1)
			// Its body is checked all the same, so that renumbering it
			// reveals no errors that were hidden.
			p.checkVersion(msg, num, fmt.Sprintf("%s version %d", msg.Name, num), k, v)
			continue
		}
		first[num] = k
		out = append(out, p.version(msg, num, k, v))
	}
	if misplaced != nil {
		k := misplaced.Content[0]
		p.checkVersion(msg, misplacedNum, fmt.Sprintf("%s version %d", msg.Name, misplacedNum), k, misplaced)
	}
	if len(n.Content) == 0 {
		p.errorf(n, RuleEmpty, "versions: want at least one version")
	}
	slices.SortFunc(out, func(a, b *Version) int { return a.Number - b.Number })
	return out
}

// maxVersions bounds the versions of one schema, all its messages' and
// those of the files it includes together: each version generates a
// payload struct, its extractor, producer, routes and handler methods,
// some 60 KB of memory in lilygen apiece, and a 4 MiB schema of empty
// versions would hold 300,000 of them.
const maxVersions = 10_000

// pastVersionCap counts k, a key under the versions of msg, and reports
// whether it is past maxVersions: the one that crosses it is reported,
// and neither it nor any after it is read, so that no more are held.
func (p *parser) pastVersionCap(msg *Message, k *yaml.Node) bool {
	p.versionsRead++
	if p.versionsRead == maxVersions+1 {
		p.errorf(k, RuleRange, "%s version %s takes the schema past %d versions, the most it may have, all messages' together (those after it are not read)",
			msg.Name, shorten(k.Value), maxVersions).Hint = "remove the versions no producer sends any more, or split the messages into schemas of their own"
	}
	return p.versionsRead > maxVersions
}

// versionKey reads k, the key of a version of msg; last is the version
// number read before it, for a hint.
func (p *parser) versionKey(msg *Message, k *yaml.Node, last int) (int, bool) {
	if k.Kind != yaml.ScalarNode || k.ShortTag() == "!!int" {
		// Within what a consumer's guard reads: a version past it would
		// be poison at every delivery.
		return p.intRange(k, "version", 1, envelope.MaxVersion)
	}
	if p.leadingZero(k, "version") { // 09, which YAML reads as a float
		return 0, false
	}
	// Not "version: want an integer", the error of the top-level
	// version key: this one names its message, and a version's own key
	// indented at the level of the versions gets here.
	e := p.errorf(k, RuleKind, "message %s: version key: want an integer, got %s", overLong(msg.Name), describe(k))
	switch num, ok := versionNumber(k.Value); {
	case slices.Contains(versionKeys, k.Value):
		e.Hint = fmt.Sprintf("%s is a key of a version: indent it under the version's number, such as %d:", k.Value, last)
	case ok:
		e.Hint = fmt.Sprintf("a version's key is its number: write %d:", num)
	}
	return 0, false
}

// versionNumber reads a version number written as a string: 1 in "v1",
// "V1", "version 1" or "1" (quoted).
func versionNumber(s string) (int, bool) {
	s = strings.ToLower(s)
	s = strings.TrimPrefix(s, "version")
	s = strings.TrimPrefix(s, "v")
	s = strings.TrimLeft(s, " _-")
	n, err := strconv.Atoi(s)
	if err != nil || s != strconv.Itoa(n) || n < 1 || n > envelope.MaxVersion {
		return 0, false
	}
	return n, true
}

// checkVersion checks the body v of a version of msg that is not
// generated (its key k is no version number, or one taken), read as
// version num and named what in errors. Its Go names are checked only
// against each other: those of a version generated, or none.
func (p *parser) checkVersion(msg *Message, num int, what string, k, v *yaml.Node) {
	decls := p.decls
	p.decls = map[string]decl{}
	p.readVersion(msg, num, what, k, v)
	p.decls = decls
}

// version reads the body v of version num of msg, whose key is k.
func (p *parser) version(msg *Message, num int, k, v *yaml.Node) *Version {
	return p.readVersion(msg, num, fmt.Sprintf("%s version %d", msg.Name, num), k, v)
}

// readVersion reads the body v of version num of msg, whose key is k,
// named what in errors.
func (p *parser) readVersion(msg *Message, num int, what string, k, v *yaml.Node) *Version {
	ver := &Version{Number: num, GoName: fmt.Sprintf("%sV%d", msg.Name, num), Pos: p.pos(k), ContentTypes: []string{DefaultContentType}}
	p.inVersion, p.versionFields = what, 0
	defer func() { p.inVersion = "" }()
	p.declare(what, k, ver.GoName, "Extract"+ver.GoName, "New"+ver.GoName)
	m := p.object(v, what, versionKeys...)
	before := p.problems()
	if e, ok := m["content_types"]; ok {
		ver.ContentTypes = p.contentTypes(e.v)
	}
	if e, ok := m["fields"]; ok {
		ver.Fields = p.fields(e.v, ver.GoName)
	}
	if e, ok := m["headers"]; ok {
		ver.HeadersName = ver.GoName + "Headers"
		p.declare(what+" headers", e.k, ver.HeadersName)
		ver.Headers = p.headers(e.v, ver.HeadersName)
		// The payload struct holds the typed headers in its field Headers.
		if i := slices.IndexFunc(ver.Fields, func(f *Field) bool { return f.GoName == "Headers" }); i >= 0 {
			p.errorf(e.k, RuleNameClash, "typed headers go in the Go field Headers of %s, already taken by field %q (line %d)",
				ver.GoName, ver.Fields[i].Name, ver.Fields[i].Pos.Line).Hint = "rename the field"
		}
	}
	fieldsOK := p.problems() == before
	if e, ok := m["headers"]; ok {
		// A limit, not a problem of reading: the version is whole, and
		// its examples are judged all the same.
		p.headerRoom(e.k, ver)
	}
	p.dates(m, ver)
	if e, ok := m["examples"]; ok {
		ver.Examples = p.examples(e.v, ver, fieldsOK)
	}
	return ver
}

// dates reads deprecated_since and remove_after: dates, in that order.
func (p *parser) dates(m map[string]entry, ver *Version) {
	read := func(key string) string {
		e, ok := m[key]
		if !ok {
			return ""
		}
		s, ok := p.date(e.v, key)
		if !ok {
			return ""
		}
		return s
	}
	ver.DeprecatedSince, ver.RemoveAfter = read("deprecated_since"), read("remove_after")
	switch e, ok := m["remove_after"]; {
	case !ok || ver.RemoveAfter == "":
	case ver.DeprecatedSince == "" && m["deprecated_since"].k == nil:
		p.errorf(e.k, RuleDate, "remove_after needs deprecated_since: a version is deprecated before it is removed")
	case ver.DeprecatedSince != "" && ver.RemoveAfter < ver.DeprecatedSince:
		p.errorf(e.v, RuleDate, "remove_after %s is before deprecated_since %s", ver.RemoveAfter, ver.DeprecatedSince)
	}
}

// date reads a YYYY-MM-DD date. YAML reads an unquoted one as a timestamp,
// which is accepted too.
func (p *parser) date(n *yaml.Node, what string) (string, bool) {
	if !p.scalar(n, what, "a date such as 2026-06-30", "!!str", "!!timestamp") {
		return "", false
	}
	if _, err := parseDate(n.Value); err != nil {
		p.errorf(n, RuleDate, "%s: %q is not a date such as 2026-06-30", what, shorten(n.Value))
		return "", false
	}
	return n.Value, true
}

func (p *parser) contentTypes(n *yaml.Node) []string {
	var out []string
	items, ok := p.seq(n, "content_types")
	if !ok {
		return nil
	}
	if len(items) == 0 {
		p.errorf(n, RuleEmpty, "content_types: want at least one content type")
	}
	for _, item := range items {
		s, ok := p.str(item, "a content type")
		switch {
		case !ok:
		case s != DefaultContentType:
			p.errorf(item, RuleContentType, "content type %q is not supported (only %s)", shorten(s), DefaultContentType)
		case slices.Contains(out, s):
			p.errorf(item, RuleDuplicate, "duplicate content type %q", s)
		default:
			out = append(out, s)
		}
	}
	return out
}

// messageAt is where the message of name is already declared, its body
// read or broken, and whether it is.
func (k declarations) messageAt(name string) (Pos, bool) {
	if m, ok := k.messages[name]; ok {
		return m.Pos, true
	}
	at, ok := k.brokenMessages[name]
	return at, ok
}
