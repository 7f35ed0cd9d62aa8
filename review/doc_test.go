package review

import (
	"strings"
	"testing"
	"unicode"
)

// A name in the review page stays whole in its code span: a backtick gets a
// longer fence, padded when it is at an end, and a pipe is escaped in a
// table cell alone.
func TestCodeSpanHoldsAnyName(t *testing.T) {
	for name, want := range map[string]string{
		"orders":              "`orders`",
		"a|b":                 "`a|b`",
		"a`b":                 "``a`b``",
		"`edge":               "`` `edge ``",
		"two``ticks`":         "``` two``ticks` ```",
		"line\nbreaker":       "`line\\nbreaker`",
		"line\r\nbreaker":     "`line\\r\\nbreaker`",
		" spaced ":            "`  spaced  `",
		" lead":               "` lead`",
		"   ":                 "`   `",
		"\nbroken\n":          "`\\nbroken\\n`",
		"q\u202eevil\x1b[31m": "`q\\u202eevil\\x1b[31m`",
	} {
		if got := code(name); got != want {
			t.Errorf("code(%q) = %s, want %s", name, got, want)
		}
	}
	if got, want := codeCell("a|b|`c"), "``a\\|b\\|`c``"; got != want {
		t.Errorf("codeCell(%q) = %s, want %s", "a|b|`c", got, want)
	}
}

// A pipe a schema wrote shows as written on the rendered page: GFM takes
// the backslash of an escaped pipe away in a table row alone, so a code
// span escapes its pipes there and nowhere else.
func TestPagePipesInCodeSpans(t *testing.T) {
	f := parse(t, "schema.lily.yaml", `version: 1
package: cardmsg
types:
  CardBrand: {type: enum, values: ["visa|debit", mastercard]}
messages:
  CardIssued:
    versions:
      1:
        fields:
          brand: {type: CardBrand}
          kind: {type: enum, values: ["a|b", c]}
          pan: {type: string, pattern: "^(4|5)[0-9|]+$", default: "4|0"}
`)
	var b strings.Builder
	if err := WritePage(&b, NewPage(f, nil, "")); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, want := range []string{
		"One of `visa|debit`, `mastercard`.",
		"one of `a\\|b`, `c`",
		"matches `^(4\\|5)[0-9\\|]+$`; default `4\\|0`",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %s:\n%s", want, page)
		}
	}
	for _, line := range strings.Split(page, "\n") {
		spans := strings.Join(codeSpans(line), " ")
		if table := strings.HasPrefix(line, "|"); table && strings.Contains(strings.ReplaceAll(spans, `\|`, ""), "|") {
			t.Errorf("a pipe unescaped in a code span of a table row: %s", line)
		} else if !table && strings.Contains(spans, `\|`) {
			t.Errorf("an escaped pipe in a code span outside a table, which shows its backslash: %s", line)
		}
	}
}

// A schema's strings show on the review page as written: an enum value that
// opens an HTML comment cannot hide the values after it, in the field table,
// the shared type or a breaking change, and no other Markdown in them
// renders.
func TestPageShowsSchemaStringsAsWritten(t *testing.T) {
	src := func(values string) string {
		return `version: 1
package: rolemsg
types:
  Role: {type: enum, values: [` + values + `]}
messages:
  RoleGranted:
    versions:
      1:
        fields:
          role: {type: enum, values: [` + values + `]}
          shared: {type: Role}
          note: {type: string, pattern: "^.*` + "`" + `?.*$", default: "*x* [y](z) <b>"}
queues:
  roles:
    consumes:
      - message: RoleGranted
        versions: [1]
`
	}
	old := parse(t, "old.lily.yaml", src(`viewer, admin`))
	f := parse(t, "schema.lily.yaml", src(`viewer, "editor<!--", admin, "x-->", "<img src=a>", "[l](u)", "a`+"`"+`b", "_u_"`))
	var b strings.Builder
	if err := WritePage(&b, NewPage(f, old, "old.lily.yaml")); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	if !strings.Contains(page, "BOUND-WIDENED") {
		t.Fatalf("no BOUND-WIDENED row:\n%s", page)
	}
	prose := outsideCodeSpans(page)
	for _, raw := range []string{"<", "[", "*x*", " _u_"} {
		if strings.Contains(strings.ReplaceAll(prose, `\`+raw[:1], ""), raw) {
			t.Errorf("the page holds %q unescaped outside code spans:\n%s", raw, prose)
		}
	}
	for _, want := range []string{
		"one of `viewer`, `editor<!--`, `admin`, `x-->`, `<img src=a>`, `[l](u)`, ``a`b``, `_u_`",
		"One of `viewer`, `editor<!--`, `admin`",
		"matches ``^.*`?.*$``",
		"default `*x* [y](z) <b>`",
		`editor\<!--, admin`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %s:\n%s", want, page)
		}
	}
}

// outsideCodeSpans is page without its code spans.
func outsideCodeSpans(page string) string {
	outside, _ := splitCodeSpans(page)
	return outside
}

// codeSpans are the code spans of page, fences and all.
func codeSpans(page string) []string {
	_, spans := splitCodeSpans(page)
	return spans
}

// splitCodeSpans parts page into what is outside its code spans and the
// spans: each opened by a run of backticks and closed by the next run as
// long.
func splitCodeSpans(page string) (outside string, spans []string) {
	var b strings.Builder
	for {
		i := strings.Index(page, "`")
		if i < 0 {
			return b.String() + page, spans
		}
		b.WriteString(page[:i])
		fence := page[i : i+len(page[i:])-len(strings.TrimLeft(page[i:], "`"))]
		rest := page[i+len(fence):]
		end := -1
		for j := 0; j < len(rest); {
			k := strings.Index(rest[j:], fence)
			if k < 0 {
				break
			}
			k += j
			run := len(rest[k:]) - len(strings.TrimLeft(rest[k:], "`"))
			if run == len(fence) {
				end = k
				break
			}
			j = k + run
		}
		if end < 0 {
			b.WriteString(fence)
			page = rest
			continue
		}
		spans = append(spans, fence+rest[:end+len(fence)])
		page = rest[end+len(fence):]
	}
}

// Lily's own words in a breaking change read on the page as written: the
// page escapes a finding's message and migration whole, as they hold what
// the schema names, so Lily writes them without Markdown (a backtick of
// hers would show escaped) and names lilygen topology in words.
func TestPageBreakingInLilysWords(t *testing.T) {
	policy := "    type: quorum\n    lily_arguments: policy\n    max_body_bytes"
	for name, revisions := range map[string][2]string{
		"dlq and delivery limit by policy": {
			edit(t, "    max_body_bytes", policy),
			edit(t, "    max_body_bytes", "    dlq: orders.dead\n    delivery_limit: 5\n"+policy),
		},
		"retry delays by policy": {
			edit(t, "    max_body_bytes", policy),
			edit(t, "    max_body_bytes", policy, "[1s, 5s]", "[1s, 10s]"),
		},
		"arguments moved": {base, edit(t, "    max_body_bytes", "    lily_arguments: policy\n    max_body_bytes")},
		"ownership":       {base, edit(t, "    max_body_bytes", "    ownership: external\n    max_body_bytes")},
	} {
		t.Run(name, func(t *testing.T) {
			old := parse(t, "old.lily.yaml", revisions[0])
			var b strings.Builder
			if err := WritePage(&b, NewPage(parse(t, "new.lily.yaml", revisions[1]), old, "old.lily.yaml")); err != nil {
				t.Fatal(err)
			}
			page := b.String()
			if strings.Contains(page, "\\`") || !strings.Contains(page, "apply the policies lilygen topology writes") {
				t.Errorf("the page shows the migration's Markdown:\n%s", page)
			}
		})
	}
}

// Prose from a schema links nothing by itself and notifies no one when the
// page is posted as a pull request comment: GitHub links a bare URL or an
// e-mail address, and an @mention notifies its user or team, backslash
// escapes or not, but never within a code span.
func TestTextLinksNoURLOrMention(t *testing.T) {
	got := text("see https://x.example/a_b, WWW.example.com|(www.x.org) mail ops@example.com or @lily-mq/ops, @bob_ *now*")
	want := "see `https://x.example/a_b,` `WWW.example.com`\\|`(www.x.org)` mail `ops@example.com` or `@lily-mq/ops,` `@bob_` \\*now\\*"
	if got != want {
		t.Errorf("text:\n%s\nwant\n%s", got, want)
	}
	prose := outsideCodeSpans(got)
	for _, raw := range []string{"@", "://", "www."} {
		if strings.Contains(strings.ToLower(prose), raw) {
			t.Errorf("%q outside code spans: %s", raw, prose)
		}
	}
}

// A character a terminal or a browser would act on or hide shows on the
// page as its Go escape, as text prints it (printable): a bidi override in
// a queue's heading, an escape sequence or an OSC 8 link in an enum value,
// in code spans and in prose alike.
func TestPageShowsCharactersNotPrintable(t *testing.T) {
	src := func(values string) string {
		return `version: 1
package: evilmsg
messages:
  Evil:
    versions:
      1:
        fields:
          e: {type: enum, values: [` + values + `]}
          s: {type: string, default: "d\u202e\u200b"}
queues:
  "q\u202eevil<!--|` + "`x`" + `|@octocat":
    consumes:
      - message: Evil
`
	}
	old := parse(t, "old.lily.yaml", src(`a`))
	f := parse(t, "schema.lily.yaml", src(`a, "\e[31mred", "\e]8;;https://x.example\e\\link\e]8;;\e\\", "line\nbreak"`))
	var b strings.Builder
	if err := WritePage(&b, NewPage(f, old, "old.lily.yaml")); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	if i := strings.IndexFunc(page, func(r rune) bool { return r != '\n' && !unicode.IsPrint(r) }); i >= 0 {
		t.Errorf("the page holds %q as itself:\n%s", []rune(page[i:])[0], page)
	}
	for _, want := range []string{
		"### ``q\\u202eevil<!--|`x`|@octocat``",
		"`\\x1b[31mred`",
		"`\\x1b]8;;https://x.example\\x1b\\link\\x1b]8;;\\x1b\\`",
		"`line\\nbreak`",
		"default `d\\u202e\\u200b`",
		`widens its values from a to a, \\x1b\[31mred`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %s:\n%s", want, page)
		}
	}
}
