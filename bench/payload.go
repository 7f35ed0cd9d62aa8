package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/examples/orders/ordersmsg"
)

// bodyBytes is the size of every message body: the 1 KiB.
const bodyBytes = 1024

// orderIDDigits is the width of the sequence number in an order id. A fixed
// width keeps every body exactly bodyBytes long, so the fill can rewrite the
// digits in place instead of encoding a new body per message.
const orderIDDigits = 10

// template is a valid OrderPlaced v2 publishing built by the generated
// producer (so the schema checked it), padded to bodyBytes. idAt is where the
// order id's digits start in the body.
type template struct {
	msg  amqp.Publishing
	idAt int
}

func newTemplate() (template, error) {
	idPrefix := "order-"
	id := idPrefix + strings.Repeat("0", orderIDDigits)
	// More items and a longer note pad the body; the first item count whose
	// body, with an empty note, is within the note's 200 characters of
	// bodyBytes gets the rest as note.
	for items := 1; items <= 50; items++ {
		msg := &ordersmsg.OrderPlacedV2{
			OrderID:     id,
			AmountCents: 4200,
			Customer:    ordersmsg.OrderPlacedV2Customer{Email: "ada@example.com", Name: ptr("Ada Lovelace")},
			PlacedAt:    time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC),
			Channel:     ordersmsg.OrderPlacedV2ChannelWeb,
			Note:        ptr(""),
			Headers:     ordersmsg.OrderPlacedV2Headers{XTenant: "acme", XTraceID: ptr("4bf92f3577b34da6a3ce929d0e0e4736")},
		}
		for i := range items {
			msg.Items = append(msg.Items, ordersmsg.OrderPlacedV2ItemsItem{SKU: fmt.Sprintf("LILY-%04d", i), Qty: int64(i%9 + 1)})
		}
		p, err := ordersmsg.NewOrderPlacedV2(id, msg)
		if err != nil {
			return template{}, err
		}
		pad := bodyBytes - len(p.Body)
		if pad < 0 || pad > 200 {
			continue
		}
		*msg.Note = strings.Repeat("n", pad)
		if p, err = ordersmsg.NewOrderPlacedV2(id, msg); err != nil {
			return template{}, err
		}
		at := strings.Index(string(p.Body), `"`+id+`"`)
		if len(p.Body) != bodyBytes || at < 0 {
			return template{}, fmt.Errorf("template body of %d bytes, order id at %d", len(p.Body), at)
		}
		return template{msg: p, idAt: at + 1 + len(idPrefix)}, nil
	}
	return template{}, fmt.Errorf("no item count pads the body to %d bytes", bodyBytes)
}

func ptr[T any](v T) *T { return &v }

// stamp makes t's publishing message seq, published at now: the order id's
// digits in the body, and a message id that carries the publish time, which
// every consumer under test can read without decoding the body (the latency
// clock starts there). The body buffer is reused: amqp091 has written it to
// the socket by the time Publish returns.
func (t *template) stamp(seq int, now time.Time) amqp.Publishing {
	digits := strconv.Itoa(seq)
	copy(t.msg.Body[t.idAt:t.idAt+orderIDDigits], strings.Repeat("0", orderIDDigits-len(digits))+digits)
	p := t.msg
	p.MessageId = "o-" + digits + "-" + strconv.FormatInt(now.UnixNano(), 10)
	p.Timestamp = now.UTC().Truncate(time.Second)
	return p
}

// publishedAt reads the publish time back from a message id made by stamp.
func publishedAt(messageID string) (time.Time, bool) {
	i := strings.LastIndexByte(messageID, '-')
	ns, err := strconv.ParseInt(messageID[i+1:], 10, 64)
	if i < 0 || err != nil {
		return time.Time{}, false
	}
	return time.Unix(0, ns), true
}
