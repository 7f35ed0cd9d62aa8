package ledger

import (
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/internal/faults"
	"github.com/lily-mq/lily/runtime"
)

// publish sends every message, confirmed, straight to the main queue, spread
// over PublishOver.
func (r *run) publish() error {
	return faults.OnChannel(r.cfg.BrokerURL, r.publishOn)
}

func (r *run) publishOn(ch *amqp.Channel) error {
	start := time.Now()
	if err := ch.Confirm(false); err != nil {
		return err
	}
	var window []*amqp.DeferredConfirmation
	flush := func() error {
		for _, dc := range window {
			if !dc.Wait() {
				return errors.New("ledger: a publish was nacked")
			}
		}
		window = window[:0]
		return nil
	}
	for i, id := range r.ids {
		if r.cfg.PublishOver > 0 {
			time.Sleep(time.Until(start.Add(r.cfg.PublishOver * time.Duration(i) / time.Duration(len(r.ids)))))
		}
		dc, err := ch.PublishWithDeferredConfirm("", r.spec.Name, true, false,
			runtime.NewPublishing(envelope.Message{Type: messageTyp}, 1, id, fmt.Appendf(nil, `{"n":%d}`, i)))
		if err != nil {
			return err
		}
		if window = append(window, dc); len(window) == 1000 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}
