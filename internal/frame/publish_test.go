package frame_test

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/internal/frame"
)

// CheckHeaders takes tables and arrays up to the client's bounds, and a CC
// or BCC that is an array, and refuses one past them, saying where.
func TestCheckHeadersBounds(t *testing.T) {
	nest := func(levels int) amqp.Table {
		top := amqp.Table{}
		in := top
		for range levels {
			next := amqp.Table{}
			in["in"] = next
			in = next
		}
		return top
	}
	inArray := amqp.Table{"a": []any{[]any{amqp.Table{}}}} // depths 1, 2, 3
	for _, c := range []struct {
		name    string
		headers amqp.Table
		want    string // "" for accepted
	}{
		{"32 deep", nest(32), ""},
		{"33 deep", nest(33), "nested deeper than 32"},
		{"tables in arrays", inArray, ""},
		{"8192 elements", amqp.Table{"x": make([]any, 8192)}, ""},
		{"8193 elements", amqp.Table{"x": make([]any, 8193)}, "x: 8193 entries, more than the 8192 a client decodes"},
		{"CC array", amqp.Table{"CC": []any{"q"}, "BCC": []any{}}, ""},
		{"CC string", amqp.Table{"CC": "q"}, "CC: not an array of routing keys"},
		{"BCC nil", amqp.Table{"BCC": nil}, "BCC: not an array of routing keys"},
		{"cc in lower case", amqp.Table{"cc": "q"}, ""},
		{"int at the int32 bounds", amqp.Table{"max": int(math.MaxInt32), "min": int(math.MinInt32)}, ""},
		{"int64 past int32", amqp.Table{"n": int64(5_000_000_000)}, ""},
		{"int past int32", amqp.Table{"n": int(5_000_000_000)}, "n: the int 5000000000 is outside the int32 range, and an int is sent as 32 bits: use int64"},
		{"int below int32", amqp.Table{"n": int(math.MinInt32) - 1}, "n: the int -2147483649 is outside the int32 range"},
		{"x-death as the broker writes it", amqp.Table{"x-death": []any{amqp.Table{"count": int64(2), "queue": "q", "reason": "rejected"}}}, ""},
		{"x-death not an array", amqp.Table{"x-death": "x"}, ""},
		{"x-death entry not a table", amqp.Table{"x-death": []any{"x"}}, "x-death: entry 0 is a string, not a table: RabbitMQ's dead-lettering cannot read it, and would crash the queue"},
		{"x-death count a float", amqp.Table{"x-death": []any{amqp.Table{"count": 1.5}}}, "x-death: the count of entry 0 is a float"},
		{"int in an array in a table", amqp.Table{"t": amqp.Table{"a": []any{1, int(math.MaxInt32) + 1}}}, "t: a: [1]: the int 2147483648 is outside"},
	} {
		err := frame.CheckHeaders(c.headers)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v; want accepted", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v; want %q", c.name, err, c.want)
		}
	}
	wide := amqp.Table{}
	for i := range 8193 {
		wide[strconv.Itoa(i)] = true
	}
	if err := frame.CheckHeaders(amqp.Table{"t": wide}); err == nil || !strings.Contains(err.Error(), "t: 8193 entries") {
		t.Errorf("a table of %d entries: %v", len(wide), err)
	}
	// At the top, the publish id the Publisher adds takes one entry.
	top := amqp.Table{}
	for i := range 8191 {
		top[strconv.Itoa(i)] = true
	}
	if err := frame.CheckHeaders(top); err != nil {
		t.Errorf("8,191 headers: %v", err)
	}
	top["8191"] = true
	if err := frame.CheckHeaders(top); err == nil || !strings.Contains(err.Error(), "8192 headers and the publish id") {
		t.Errorf("8,192 headers: %v", err)
	}
}

// CheckPublish refuses a delivery mode other than none, transient and
// persistent: RabbitMQ 3.10.8 closes the channel on any other (406
// "invalid message: {delivery_mode_unknown,3}").
func TestCheckPublishDeliveryMode(t *testing.T) {
	for m := range 256 {
		err := frame.CheckPublish("", "q", amqp.Publishing{DeliveryMode: uint8(m)})
		switch {
		case m <= 2 && err != nil:
			t.Errorf("delivery mode %d: %v; want taken", m, err)
		case m > 2 && (err == nil || !strings.Contains(err.Error(), fmt.Sprintf("delivery_mode: %d, not 1 (transient), 2 (persistent) or 0 (none)", m))):
			t.Errorf("delivery mode %d: %v; want refused", m, err)
		}
	}
}

// CheckProperties refuses a reply_to of the bare direct reply-to
// pseudo-queue, on which the broker closes a channel that does not consume
// it, and takes a reply-to address, and other names, as they are: the
// broker does too (3.10.8).
func TestCheckPropertiesReplyTo(t *testing.T) {
	for _, c := range []struct {
		replyTo, want string // want "" for accepted
	}{
		{"amq.rabbitmq.reply-to", `reply_to: "amq.rabbitmq.reply-to" is taken only from a channel that consumes it`},
		{"amq.rabbitmq.reply-to.g1h2AA1yZXBseUA.aSZ4+Xw10wM9gs+xPWCdKg==", ""},
		{"amq.rabbitmq.reply-to.", ""},
		{"AMQ.RABBITMQ.REPLY-TO", ""},
		{"replies", ""},
		{"", ""},
	} {
		err := frame.CheckProperties(amqp.Publishing{ReplyTo: c.replyTo})
		switch {
		case c.want == "" && err != nil:
			t.Errorf("reply_to %q: %v; want accepted", c.replyTo, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("reply_to %q: %v; want %q", c.replyTo, err, c.want)
		}
	}
}

// expirations are what RabbitMQ 3.10.8 does with each as a publish's
// expiration: take it (and deliver it as written) or close the channel
// (406). lilytest's TestBrokerTakesWhatDeliveryTakes asks the broker
// again, of the delivery it may then carry.
var expirations = []struct {
	expiration string
	taken      bool
}{
	{"", true}, {"0", true}, {"5000", true}, {"0005", true}, {"4294967295", true},
	{"+5000", true}, {"+0", true}, {"-0", true}, {"-000", true}, {"4294967296", true},
	{"315360000000", true}, {"+315360000000", true},
	{"315360000001", false}, {"18446744073709551616", false}, {"-5", false}, {"+", false},
	{"-", false}, {"--5", false}, {"+-5", false}, {" 5", false}, {"5 ", false}, {"\t5", false},
	{"5.0", false}, {"1_000", false}, {"1e3", false}, {"soon", false}, {"\u0665", false},
}

// CheckProperties refuses an expiration as the broker does, which a
// delivery may then carry; CheckPublish, a Publisher's, takes only plain digits
// within 32 bits of what the broker takes.
func TestExpirationAsTheBrokerReadsIt(t *testing.T) {
	for _, c := range expirations {
		p := amqp.Publishing{Expiration: c.expiration}
		if err := frame.CheckProperties(p); (err == nil) != c.taken {
			t.Errorf("CheckProperties of expiration %q: %v, want taken %v", c.expiration, err, c.taken)
		}
		_, plain := strconv.ParseUint(c.expiration, 10, 32)
		sent := c.expiration == "" || plain == nil
		if err := frame.CheckPublish("", "q", p); (err == nil) != sent || (sent && !c.taken) {
			t.Errorf("CheckPublish of expiration %q: %v, want sent %v", c.expiration, err, sent)
		}
	}
}

// CheckPublish refuses CC and BCC on a reply to a direct reply-to address alone:
// it goes without mandatory, so a copy that reaches no queue would be
// dropped unreported; elsewhere the copies go mandatory, and are checked.
func TestCheckDirectReplyCopies(t *testing.T) {
	copies := amqp.Table{"CC": []any{"audit"}}
	for _, c := range []struct {
		exchange, key string
		headers       amqp.Table
		refused       bool
	}{
		{"", "amq.rabbitmq.reply-to.g1h2AA1yZXBseUA", copies, true},
		{"", "amq.rabbitmq.reply-to.g1h2AA1yZXBseUA", amqp.Table{"BCC": []any{"audit"}}, true},
		{"", "amq.rabbitmq.reply-to.g1h2AA1yZXBseUA", amqp.Table{"tenant": "a"}, false},
		{"", "amq.rabbitmq.reply-to.g1h2AA1yZXBseUA", nil, false},
		{"", "replies", copies, false},
		{"replies", "amq.rabbitmq.reply-to.g1h2AA1yZXBseUA", copies, false},
	} {
		err := frame.CheckPublish(c.exchange, c.key, amqp.Publishing{Headers: c.headers})
		if refused := err != nil && strings.Contains(err.Error(), "CC or BCC on a reply to a direct reply-to address"); refused != c.refused || (!refused && err != nil) {
			t.Errorf("exchange %q, key %q, headers %v: %v; want refused %v", c.exchange, c.key, c.headers, err, c.refused)
		}
	}
}

// A header name in a refusal is bounded and sanitized: a producer's name
// may hold ESC, a bidi override and up to 255 bytes (or, when its value's
// type is what AMQP has no word for, any length), and the error reaches a
// log line or a test's output. Whichever check refuses, at whatever depth,
// a Publisher's publish check (CheckPublish) says so.
func TestCheckPublishSanitizesHeaderNames(t *testing.T) {
	hostile := "x-\x1b[31mred\u202e" + strings.Repeat("n", 240)
	long := hostile + strings.Repeat("n", 1000)
	for name, headers := range map[string]amqp.Table{
		"NaN":              {hostile: math.NaN()},
		"int":              {hostile: 1 << 40},
		"nested NaN":       {hostile: amqp.Table{hostile: math.NaN()}},
		"in an array":      {hostile: []any{1 << 40}},
		"nested too deep":  {hostile: amqp.Table{hostile: make([]any, 8193)}},
		"unsupported type": {long: amqp.Table{long: uint64(1)}},
	} {
		err := frame.CheckPublish("", "q", amqp.Publishing{Headers: headers})
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if msg := err.Error(); strings.ContainsAny(msg, "\x1b\u202e") || len(msg) > 400 {
			t.Errorf("%s: %d bytes, unsanitized or unbounded: %q", name, len(msg), msg)
		}
	}
}
