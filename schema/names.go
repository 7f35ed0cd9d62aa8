package schema

import (
	"strings"
	"unicode"
)

// initialisms are written in capitals inside Go names, as Go's own style asks.
var initialisms = map[string]bool{
	"ACL": true, "API": true, "ASCII": true, "CPU": true, "CSS": true, "DNS": true,
	"EOF": true, "GUID": true, "HTML": true, "HTTP": true, "HTTPS": true, "ID": true,
	"IP": true, "JSON": true, "QPS": true, "RAM": true, "RPC": true, "SKU": true,
	"SLA": true, "SMTP": true, "SQL": true, "SSH": true, "TCP": true, "TLS": true,
	"TTL": true, "UDP": true, "UI": true, "UID": true, "URI": true, "URL": true,
	"UTC": true, "UTF8": true, "UUID": true, "VM": true, "XML": true,
}

// GoName turns a JSON key or queue name into an exported Go name: words split
// at any character that is not a letter or digit and where a lower-case letter
// meets an upper-case one; each word is capitalised, initialisms in full, also
// in the plural and before digits, as Go's style (and staticcheck's ST1003)
// writes them. "order_id" and "orderId" give OrderID; "sku_ids" gives SKUIDs;
// "id2" gives ID2; "billing.payments-v2" gives BillingPaymentsV2. The result
// is "" when there are no words.
func GoName(s string) string {
	var b strings.Builder
	for _, word := range words(s) {
		b.WriteString(goWord(word))
	}
	return b.String()
}

// LocalName is GoName's name for a local variable: its first word's leading
// capitals lowered, an initialism whole with its plural s or digits.
// "order_id" gives orderID; "url_path" urlPath; "sku_ids" skuIDs; "ids" ids;
// "id2" id2; "HTTPServer" httpServer.
func LocalName(s string) string {
	var b strings.Builder
	for i, word := range words(s) {
		if i == 0 {
			b.WriteString(lowerLead(goWord(word)))
			continue
		}
		b.WriteString(goWord(word))
	}
	return b.String()
}

// lowerLead lowers word's leading capitals, but for the last of them when a
// word goes on after it in lower case (HTTPServer gives httpServer), not
// when that is an initialism's plural s (IDs gives ids).
func lowerLead(word string) string {
	r := []rune(word)
	upper := 0
	for upper < len(r) && unicode.IsUpper(r[upper]) {
		upper++
	}
	plural := upper < len(r) && r[upper] == 's' && (upper+1 == len(r) || !unicode.IsLower(r[upper+1]))
	if upper > 1 && upper < len(r) && unicode.IsLower(r[upper]) && !plural {
		upper--
	}
	for i := range upper {
		r[i] = unicode.ToLower(r[i])
	}
	return string(r)
}

// goWord capitalises word, an initialism in full: alone (UTF8), before
// digits (ID2) or in the plural (IDs, URLs2).
func goWord(word string) string {
	up := strings.ToUpper(word)
	if initialisms[up] {
		return up
	}
	letters := strings.TrimRightFunc(up, unicode.IsDigit)
	digits := up[len(letters):]
	if initialisms[letters] {
		return up
	}
	if single, ok := strings.CutSuffix(letters, "S"); ok && initialisms[single] {
		return single + "s" + digits
	}
	r := []rune(word)
	r[0] = unicode.ToUpper(r[0])
	return string(r)
}

func words(s string) []string {
	var out []string
	start := -1
	var prev rune
	for i, r := range s {
		alnum := unicode.IsLetter(r) || unicode.IsDigit(r)
		switch {
		case !alnum:
			if start >= 0 {
				out = append(out, s[start:i])
			}
			start = -1
		case start < 0:
			start = i
		case unicode.IsLower(prev) && unicode.IsUpper(r):
			out = append(out, s[start:i])
			start = i
		}
		prev = r
	}
	if start >= 0 {
		out = append(out, s[start:])
	}
	return out
}

// isIdent reports whether s is an ASCII Go identifier whose first letter is
// upper case (upper) or lower case (!upper). Underscores are not allowed.
func isIdent(s string, upper bool) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case r >= 'a' && r <= 'z':
			if i == 0 && upper {
				return false
			}
		case r >= 'A' && r <= 'Z':
			if i == 0 && !upper {
				return false
			}
		case r >= '0' && r <= '9':
			if i == 0 {
				return false
			}
		default:
			return false
		}
	}
	return true
}
