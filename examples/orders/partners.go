package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/examples/orders/ordersmsg"
	"github.com/lily-mq/lily/runtime"
)

// partners handles the partners' messages: payments from a CloudEvents
// emitter, shipments from a Spring AMQP service. Each arrives typed, in
// whatever envelope its producer uses.
type partners struct{ log *slog.Logger }

func (p partners) HandlePaymentAuthorizedV1(_ context.Context, msg *ordersmsg.PaymentAuthorizedV1, d runtime.RawDelivery) error {
	// A CloudEvent's attributes read as headers, in either content mode.
	source, _ := d.Header("cloudEvents_source")
	p.log.Info("payment authorized", "order_id", msg.OrderID, "amount_cents", msg.AmountCents, "event", d.MessageID(), "source", source)
	return nil
}

func (p partners) HandleOrderShippedV1(_ context.Context, msg *ordersmsg.OrderShippedV1, d runtime.RawDelivery) error {
	if msg.OrderID == "order-late" && d.Attempt() == 1 {
		return runtime.Retryable(errors.New("order not in the ledger yet"))
	}
	p.log.Info("order shipped", "order_id", msg.OrderID, "type", d.Type())
	return nil
}

const paymentsSource = "https://payments.acme.example/v1"

// cloudEventBinary is a payment as the CloudEvents emitter publishes it in
// binary content mode: attributes in cloudEvents_ headers, the data the body.
func cloudEventBinary(id, data string) runtime.Publishing {
	return runtime.Publishing{
		ContentType:  "application/json",
		DeliveryMode: amqp.Persistent,
		Headers: amqp.Table{
			"cloudEvents_specversion": "1.0",
			"cloudEvents_id":          id,
			"cloudEvents_source":      paymentsSource,
			"cloudEvents_type":        "com.acme.payment.authorized.v1",
			"cloudEvents_time":        time.Now().UTC().Format(time.RFC3339),
		},
		Body: []byte(data),
	}
}

// cloudEventStructured is one in structured content mode: the whole event,
// its data a member, in the body.
func cloudEventStructured(id, data string) runtime.Publishing {
	return runtime.Publishing{
		ContentType:  "application/cloudevents+json",
		DeliveryMode: amqp.Persistent,
		Body: fmt.Appendf(nil, `{"specversion":"1.0","id":%q,"source":%q,"type":"com.acme.payment.authorized.v1","datacontenttype":"application/json","data":%s}`,
			id, paymentsSource, data),
	}
}

// springMessage is a shipment as Spring AMQP's Jackson2JsonMessageConverter
// sends it, message ids switched on (setCreateMessageIds).
func springMessage(id, data string) runtime.Publishing {
	return runtime.Publishing{
		ContentType:     "application/json",
		ContentEncoding: "UTF-8",
		DeliveryMode:    amqp.Persistent,
		MessageId:       id,
		Headers:         amqp.Table{"__TypeId__": "com.acme.warehouse.OrderShipped"},
		Body:            []byte(data),
	}
}

// partnerMessages are built by hand, exactly as those producers publish:
// no Lily code runs on their side.
func partnerMessages() []demoMessage {
	return []demoMessage{
		{shows: "a CloudEvent, binary mode: succeeds", msg: cloudEventBinary("evt-1", `{"payment_id":"pay-1","order_id":"order-ok","amount_cents":4200}`)},
		{shows: "a CloudEvent, structured mode: breaks a bound", msg: cloudEventStructured("evt-2", `{"payment_id":"pay-2","order_id":"order-zero","amount_cents":0}`)},
		{shows: "a Spring message: succeeds", msg: springMessage("7d1f0c9e-ship-1", `{"orderId":"order-ok","carrier":"DHL"}`)},
		{shows: "a Spring message: fails once, succeeds on retry", msg: springMessage("7d1f0c9e-ship-2", `{"orderId":"order-late"}`)},
		{shows: "a CloudEvents batch: not supported", msg: runtime.Publishing{ContentType: "application/cloudevents-batch+json", Body: []byte(`[]`)}},
	}
}

// runPartners consumes the partners' messages from spec's queue (the
// demo's is orders.partners) and prints where each went; the DLQ copies keep
// their producer's envelope. The consumer is the one the generated
// NewOrdersPartnersConsumer builds, on spec's queues.
func runPartners(url string, spec runtime.QueueSpec) error {
	if err := resetQueues(url, spec); err != nil {
		return err
	}
	msgs := partnerMessages()
	fmt.Printf("\nOther teams' producers, consumed as they publish, on queue %q:\n", spec.Name)
	for _, m := range msgs {
		fmt.Printf("published %s\n", m.shows)
	}
	if err := publishTo(url, "", spec.Name, msgs); err != nil {
		return err
	}
	fmt.Println("\nwhere each delivery went:")
	settled := make(chan struct{}, len(msgs)*2)
	observe := func(rec runtime.Record) {
		// A delivery is named by its inbox key: a CloudEvent's source and
		// id, a header profile's name, type and id.
		fmt.Printf("  %-56s attempt %d  %-36s %s\n", cmp.Or(rec.MessageID, "(no message id)"), rec.Attempt, describe(spec, rec), rec.Reason)
		if rec.Path != runtime.PathRetried {
			settled <- struct{}{}
		}
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	c, err := runtime.NewConsumer(spec, ordersmsg.OrdersPartnersRoutes(partners{log: quiet}), runtime.Config{URLs: []string{url}, Logger: quiet, Observe: observe})
	if err != nil {
		return err
	}
	ctx, stop := context.WithCancel(context.Background())
	type result struct {
		report *runtime.Report
		err    error
	}
	ran := make(chan result, 1)
	go func() {
		report, err := c.Run(ctx)
		ran <- result{report, err}
	}()
	// One deadline for them all; a Run that ends first (it could not
	// connect, say) ends the wait with its error.
	timeout := time.After(30 * time.Second)
	var res result
	ended := false
wait:
	for range msgs {
		select {
		case <-settled:
		case res = <-ran:
			ended = true
			break wait
		case <-timeout:
			fmt.Println("  (gave up waiting after 30 s)")
			break wait
		}
	}
	stop()
	if !ended {
		res = <-ran
	}
	if res.err != nil {
		return res.err
	}
	fmt.Printf("\nshutdown report: %s\n", res.report)
	return printPartnerDLQ(url, spec)
}

// printPartnerDLQ shows the DLQ copies: each keeps the envelope its
// producer sent, so it can be read, and re-driven, as it was.
func printPartnerDLQ(url string, spec runtime.QueueSpec) error {
	return withChannel(url, func(ch *amqp.Channel) error {
		fmt.Printf("in %s:\n", spec.Topology.DeadLetterQueue)
		for {
			d, ok, err := ch.Get(spec.Topology.DeadLetterQueue, false)
			if err != nil || !ok {
				return err
			}
			why, _ := d.Headers["x-lily-failure-reason"].(string)
			fmt.Printf("  %s, %d bytes as sent: %s\n", d.ContentType, len(d.Body), why)
		}
	})
}
