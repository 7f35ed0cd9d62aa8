package schema

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// A version a queue consumes that its message does not have is hinted
// with at most maxListed of the versions it has; and a problem past
// maxErrors, only counted, does not gather them: each of many unknown
// versions of a message of many cost time and output of their product
// (10,000 versions and 150,000 unknown ones in 1 MiB: 3 min 30 s, 59 MB
// of errors).
func TestUnknownConsumedVersionHint(t *testing.T) {
	schema := func(unknown int) string {
		return ofVersions(1000, "      - message: A\n        versions: [2000"+strings.Repeat(", 2000", unknown-1)+"]\n")
	}
	_, err := Parse("s.yaml", []byte(schema(1)))
	want := "s.yaml:1010:20: message A has no version 2000 (it has 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20 and 980 more) [UNKNOWN-REFERENCE]"
	if err == nil || err.Error() != want {
		t.Errorf("Parse: %v\nwant %s", err, want)
	}
	var list ErrorList
	if _, err := Parse("s.yaml", []byte(schema(maxErrors+1))); !errors.As(err, &list) || list[len(list)-1].Rule != RuleTooMany {
		t.Fatalf("Parse of %d unknown versions: %v", maxErrors+1, err)
	}
	// Past maxErrors, 1,000 more unknown versions take about what their
	// YAML takes to read, not 1,000 versions' names each.
	listed, past := schema(maxErrors), schema(2*maxErrors)
	perProblem := (testing.AllocsPerRun(1, func() { Parse("s.yaml", []byte(past)) }) -
		testing.AllocsPerRun(1, func() { Parse("s.yaml", []byte(listed)) })) / maxErrors
	if perProblem > 50 {
		t.Errorf("%.0f allocations for each problem past maxErrors, want at most 50", perProblem)
	}
}

// A schema error quotes at most maxListed of an enum's values, and a
// pattern shortened, in an example's problem and a default's, while the
// extractor's problem, and Check's, names them all: a 283 KB schema of an
// enum of 1,000 values of 250 bytes and 1,000 examples outside it wrote
// 256 MB of errors.
func TestSchemaErrorQuotesEnumBriefly(t *testing.T) {
	values := make([]string, 1000)
	for i := range values {
		values[i] = fmt.Sprintf("v%03d%s", i, strings.Repeat("x", 246))
	}
	pattern := "^(" + strings.Join(values, "|") + ")$"
	src := "version: 1\npackage: x\ntypes:\n  Kind: {type: enum, values: [" + strings.Join(values, ", ") + "]}\n" +
		"messages:\n  A:\n    versions:\n      1:\n        fields:\n" +
		"          e: {type: Kind}\n" +
		"          s: {type: string, pattern: '" + pattern + "'}\n" +
		"        examples:\n" +
		"          - body: {e: nope}\n" +
		"          - body: {e: " + values[0] + ", s: nope}\n" +
		"  B: {versions: {1: {fields: {d: {type: Kind, default: nope}}}}}\n"
	f, err := Parse("s.yaml", []byte(src))
	first := strings.Join(shortened(values[:maxListed]), ", ") + " and 980 more"
	want := "s.yaml:13:23: example 1 of AV1 breaks the schema: field e: not one of " + first + " [BAD-EXAMPLE]\n" +
		"s.yaml:14:278: example 2 of AV1 breaks the schema: field s: does not match " + shorten(pattern) + " [BAD-EXAMPLE]\n" +
		"s.yaml:15:56: default nope breaks the field's own bounds: not one of " + first + " [BAD-DEFAULT]"
	if err == nil || err.Error() != want {
		t.Errorf("Parse, %d bytes of errors: %.1500v\nwant %d bytes: %s", len(fmt.Sprint(err)), err, len(want), want)
	}
	if f != nil {
		t.Fatalf("Parse returned a file beside its errors")
	}
	// The extractor's words, which Check keeps.
	e := &Field{Type: Enum, Values: values}
	if got := checkScalar(e, "nope", false); got != "not one of "+strings.Join(values, ", ") {
		t.Errorf("Check's problem is %.100s..., want every value", got)
	}
}

func shortened(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = shorten(n)
	}
	return out
}

// A message read in many envelopes, which lilygen writes no producers of,
// is refused a publish with at most maxListed of their names: the error
// named each of them, one per queue that reads it in its own.
func TestPublishOfManyEnvelopesIsBrief(t *testing.T) {
	const n = 1000
	var s strings.Builder
	s.WriteString("version: 1\npackage: x\nenvelopes:\n")
	for i := range n {
		fmt.Fprintf(&s, "  e%04d%s: {kind: headers, type: {header: t%d}, version: {fixed: 1}}\n", i, strings.Repeat("x", 35), i)
	}
	s.WriteString("messages:\n  A: {publish: {exchange: x, routing_key: k}, versions: {1: {}}}\nexchanges: {x: {type: topic}}\nqueues:\n")
	for i := range n {
		fmt.Fprintf(&s, "  q%d: {envelope: e%04d%s, consumes: [{message: A}]}\n", i, i, strings.Repeat("x", 35))
	}
	_, err := Parse("s.yaml", []byte(s.String()))
	names := make([]string, maxListed)
	for i := range names {
		names[i] = shorten(fmt.Sprintf("e%04d%s", i, strings.Repeat("x", 35)))
	}
	want := fmt.Sprintf("s.yaml:%d:7: lilygen writes no producers of A to publish it with: it is read in envelopes %s and %d more, and a producer writes one (read it in one envelope, or remove publish:) [BAD-PUBLISH]",
		n+5, strings.Join(names, ", "), n-maxListed)
	if err == nil || err.Error() != want {
		t.Errorf("Parse, %d bytes of errors: %.1000v\nwant %d bytes: %s", len(fmt.Sprint(err)), err, len(want), want)
	}
}

// A message consumed again by an entry without versions:, which takes
// every version, is reported once, and costs about what its YAML takes to
// read: it walked each version of the message, and reported each, so that
// repeating `- {message: A}` for a message of many versions cost time of
// their product.
func TestRepeatedConsumeCostsItsEntry(t *testing.T) {
	schema := func(repeats int) string {
		return ofVersions(1000, "      - {message: A, versions: [7]}\n"+strings.Repeat("      - {message: A}\n", repeats))
	}
	_, err := Parse("s.yaml", []byte(schema(2)))
	want := "s.yaml:1010:19: A is consumed twice (first at line 1009): an entry without versions: takes every version of it (merge the entries, or give each the versions: it takes) [DUPLICATE]\n" +
		"s.yaml:1011:19: A is consumed twice (first at line 1009): an entry without versions: takes every version of it (merge the entries, or give each the versions: it takes) [DUPLICATE]"
	if err == nil || err.Error() != want {
		t.Errorf("Parse, %d bytes of errors: %.500v\nwant %s", len(fmt.Sprint(err)), err, want)
	}
	const n = 100
	once, more := schema(1), schema(1+n)
	perEntry := (testing.AllocsPerRun(1, func() { Parse("s.yaml", []byte(more)) }) -
		testing.AllocsPerRun(1, func() { Parse("s.yaml", []byte(once)) })) / n
	if perEntry > 50 {
		t.Errorf("%.0f allocations for each repeated entry, want at most 50", perEntry)
	}
}

// ofVersions is a schema of a message A of n empty versions (1 to n, a line
// each from line 6) and a queue q whose consumes: entries are consumes.
func ofVersions(n int, consumes string) string {
	var s strings.Builder
	s.WriteString("version: 1\npackage: x\nmessages:\n  A:\n    versions:\n")
	for i := range n {
		fmt.Fprintf(&s, "      %d: {}\n", i+1)
	}
	s.WriteString("queues:\n  q:\n    consumes:\n" + consumes)
	return s.String()
}

// Following publishes to the queues their keys reach costs at most
// maxRouteSteps steps: a message of 1,000 versions, each published with a
// key of its own to a topic exchange that binds a queue by many patterns,
// tried each pattern against each key: each pattern more cost an attempt
// per version.
func TestPublishRoutesAreBounded(t *testing.T) {
	schema := func(patterns int) string {
		s := ofVersions(1000, "      - {message: B}\n    bindings:\n      - exchange: x\n        routing_keys:\n")
		s = strings.Replace(s, "    versions:\n", "    publish: {exchange: x, routing_key: \"a.v{version}\"}\n    versions:\n", 1)
		s = strings.Replace(s, "queues:\n", "  B: {versions: {1: {}}}\nexchanges: {x: {type: topic}}\nqueues:\n", 1)
		var b strings.Builder
		b.WriteString(s)
		for i := range patterns {
			fmt.Fprintf(&b, "          - p%d.#\n", i)
		}
		return b.String()
	}
	const n = 2000
	few, many := schema(n), schema(2*n)
	if _, err := Parse("s.yaml", []byte(few)); err != nil {
		t.Fatal(err)
	}
	perPattern := (testing.AllocsPerRun(1, func() { Parse("s.yaml", []byte(many)) }) -
		testing.AllocsPerRun(1, func() { Parse("s.yaml", []byte(few)) })) / n
	if perPattern > 100 {
		t.Errorf("%.0f allocations for each pattern more, want at most 100", perPattern)
	}
}
