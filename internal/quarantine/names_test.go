package quarantine

import (
	"strings"
	"testing"
)

// A table that names an entry twice, at any depth, is quarantined when
// asked; the same name in two tables is not a repeat. Every header the
// catalogue says the client decodes passes, but for those that repeat a key.
func TestRepeated(t *testing.T) {
	cases := []struct {
		name    string
		headers []byte
		refused string
	}{
		{"distinct names", table(entry("a", str("1")), entry("b", str("2"))), ""},
		{"one name in two tables", table(entry("a", table(entry("a", str("1")))), entry("b", table(entry("a", str("2"))))), ""},
		{"a name twice", table(entry("a", str("1")), entry("b", str("x")), entry("a", str("2"))), `names "a" twice`},
		{"an empty name twice", table(entry("", str("1")), entry("", str("2"))), `names "" twice`},
		{"a name twice in a nested table", table(entry("a", table(entry("n", str("1")), entry("n", []byte{'V'})))), `names "n" twice`},
		{"a name twice in a table in an array", table(entry("a", array(str("x"), table(entry("k", str("1")), entry("k", str("2")))))), `names "k" twice`},
		{"a long unprintable name twice", table(entry("\x1b[31m"+strings.Repeat("n", 200), str("1")), entry("\x1b[31m"+strings.Repeat("n", 200), str("2"))), `names "\x1b[31mnnnnnnnnnnnnnnnnnnn..." twice`},
		{"9000 entries of one key", repeating(1, 8999), `names "k0" twice`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			payload := payloadOf(contentHeader(1, 3, props(tc.headers)))
			if v := check(payload); v.why != "" {
				t.Fatalf("check refused it: %s", v.why)
			}
			v := repeated(payload)
			switch {
			case tc.refused == "" && v.why != "":
				t.Fatalf("refused: %s", v.why)
			case tc.refused != "" && (!strings.Contains(v.why, tc.refused) || !v.spliceable || len(v.why) > 120):
				t.Fatalf("verdict %+v, want a spliceable refusal saying %q, at most 120 bytes", v, tc.refused)
			}
		})
	}
	for _, tc := range headerCases() {
		payload := payloadOf(contentHeader(1, 3, props(tc.headers)))
		if tc.refused != "" || strings.Contains(tc.name, "one key") || strings.Contains(tc.name, "repeated") {
			continue
		}
		if v := repeated(payload); v.why != "" {
			t.Errorf("%s: refused: %s", tc.name, v.why)
		}
	}
	// A header without a table, or with an empty one.
	for _, properties := range [][]byte{u16(0), append(u16(0x8000|flagHeaders), append(shortstr("text/plain"), u32(0)...)...)} {
		if v := repeated(payloadOf(contentHeader(1, 3, properties))); v.why != "" {
			t.Errorf("refused %v: %s", properties, v.why)
		}
	}
}

// Asked to, a Conn quarantines a table that names an entry twice, keeping
// the other properties; not asked, as the runtime's, it hands it to the
// client, which keeps the last value.
func TestRepeatedNames(t *testing.T) {
	twice := props(table(entry("a", str("first")), entry("a", str("second"))))
	for _, asked := range []bool{true, false} {
		var setup []func(*Conn)
		if asked {
			setup = append(setup, (*Conn).RepeatedNames)
		}
		c := connect(t, true, setup...)
		sent := make(chan error, 1)
		go func() {
			sent <- c.broker.send(0, append(message(1, twice, []byte("x")), message(2, props(table(entry("a", str("1")))), []byte("ok"))...)...)
		}()
		d, err := c.next(t)
		if err != nil {
			t.Fatalf("asked %t: the client closed: %v", asked, err)
		}
		why, held := quarantinedWhy(c.filter, d.Headers)
		switch {
		case asked && (!held || !strings.Contains(why, `names "a" twice`) || len(d.Headers) != 1 || d.MessageId != "id-1" || d.Type != "OrderPlaced"):
			t.Errorf("asked: held %v %q, delivery %+v", held, why, d)
		case !asked && (held || len(d.Headers) != 1 || d.Headers["a"] != "second"):
			t.Errorf("not asked: held %v %q, headers %v", held, why, d.Headers)
		}
		next, err := c.next(t)
		if _, held := c.filter.Quarantined(next.Headers); err != nil || held || next.Headers["a"] != "1" {
			t.Errorf("asked %t: the delivery behind it: %v, held %v, headers %v", asked, err, held, next.Headers)
		}
		if err := <-sent; err != nil {
			t.Fatal(err)
		}
	}
}

// FuzzRepeated: whatever content header check passes, repeated reads it
// without fault, and its replacement is one the client decodes, with no
// name twice.
func FuzzRepeated(f *testing.F) {
	seeds(f)
	f.Add(props(table(entry("a", str("1")), entry("a", array(table(entry("k", str("1")), entry("k", []byte{'V'})))))), uint16(0))
	f.Fuzz(func(t *testing.T, properties []byte, _ uint16) {
		payload := payloadOf(contentHeader(1, 7, properties))
		if check(payload).why != "" {
			return
		}
		v := repeated(payload)
		if v.why == "" {
			return
		}
		if !v.spliceable || len(v.why) > 120 {
			t.Fatalf("verdict %+v", v)
		}
		r := filter{clientMax: testFrameMax, frameMax: testFrameMax, seal: testSeal}
		r.replace(1, payload, v)
		if out := payloadOf(r.repl); check(out).why != "" || repeated(out).why != "" {
			t.Fatalf("the replacement %x is refused", out)
		}
	})
}
