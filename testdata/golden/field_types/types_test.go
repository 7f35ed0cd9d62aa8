package types

import (
	"strings"
	"testing"
)

// encoding/json would send a map key or value that is not UTF-8 with U+FFFD
// for each bad byte: the producer refuses it, naming the entry, the least
// key's of those that fail, whatever order the map is walked in.
func TestNewInvoiceV1NotUTF8(t *testing.T) {
	valid := func() *InvoiceV1 {
		return &InvoiceV1{
			InvoiceID: "INV-000001", Status: InvoiceV1StatusDraft, Priority: InvoiceV1PriorityNormal, Currency: "EUR", Copies: 1,
			Signature: []byte(strings.Repeat("s", 64)),
			Labels:    map[string]string{"team": "ops"},
			Lines:     map[string]InvoiceV1LinesItem{"1": {Qty: 1, Taxes: map[string]float64{"vat": 0.2}}},
		}
	}
	if _, err := NewInvoiceV1("m-1", valid()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		change func(*InvoiceV1)
		want   string
	}{
		{"label value", func(m *InvoiceV1) { m.Labels["team"] = "o\xffps" }, `field labels["team"]: not UTF-8`},
		{"label key", func(m *InvoiceV1) { m.Labels["te\xffam"] = "ops" }, `field labels["te\xffam"]: key not UTF-8`},
		{"the least of several keys", func(m *InvoiceV1) {
			for _, k := range []string{"z\xff", "b\xff", "m", "c\xff", "a"} {
				m.Labels[k] = "x\xfe"
			}
		}, `field labels["a"]: not UTF-8`},
		{"a key in a map of a map's value", func(m *InvoiceV1) {
			m.Lines["2"] = InvoiceV1LinesItem{Qty: 1, Taxes: map[string]float64{"v\xe0": 0.2, "\xe1": 0.1}}
		}, `field lines["2"].taxes["v\xe0"]: key not UTF-8`},
		{"a value in a map of maps, the least outer key's", func(m *InvoiceV1) {
			m.Texts = map[string]map[string]string{"fr": {"ti\xfftle": "Facture"}, "de": {"title": "R\xffechnung"}}
		}, `field texts["de"]["title"]: not UTF-8`},
		{"a key in a map of maps", func(m *InvoiceV1) {
			m.Texts = map[string]map[string]string{"fr": {"title": "Facture", "b\xff": "x", "a\xff": "y"}}
		}, `field texts["fr"]["a\xff"]: key not UTF-8`},
		{"a key of a map of maps", func(m *InvoiceV1) {
			m.Texts = map[string]map[string]string{"f\xffr": {"title": "Facture"}}
		}, `field texts["f\xffr"]: key not UTF-8`},
		{"a nullable object", func(m *InvoiceV1) { m.Approver = &InvoiceV1Approver{Email: "\xffboss@example.com"} }, "field approver.email: not UTF-8"},
		{"a nullable string", func(m *InvoiceV1) { note := "\xc0"; m.CustomerNote = &note }, "field customer_note: not UTF-8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for range 10 { // maps are walked in a new order each time
				msg := valid()
				tc.change(msg)
				if _, err := NewInvoiceV1("m-1", msg); err == nil || err.Error() != tc.want {
					t.Fatalf("got %v, want %s", err, tc.want)
				}
			}
		})
	}
}
