package asyncapi

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/runtime/lilytest"
	"github.com/lily-mq/lily/schema"
	"github.com/lily-mq/lily/topology"
)

// Each structured CloudEvent example of the edge cases' document, delivered
// as the document shows it (its content type, its headers, the event as the
// body), passes the runtime's guard and reaches its route: the document
// says all the runtime reads of such an event, wherever the profile keeps
// the version.
func TestStructuredExamplesReachTheirRoute(t *testing.T) {
	f, err := schema.Load(filepath.Join("testdata", "edges.lily.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := Document(f, "1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	var read struct {
		Components struct {
			Messages map[string]struct {
				ContentType string `yaml:"contentType"`
				Examples    []struct {
					Headers map[string]any
					Payload any
				}
			}
		}
	}
	if err := yaml.Unmarshal(doc, &read); err != nil {
		t.Fatal(err)
	}
	vs, _ := variants(f)
	checked := 0
	for _, va := range vs {
		if !va.structured {
			continue
		}
		msg := read.Components.Messages[va.id]
		if len(msg.Examples) == 0 {
			t.Fatalf("%s has no example", va.id)
		}
		spec := runtime.QueueSpec{
			Name:           "structured",
			Topology:       topology.Queue{Type: "classic", DeadLetterQueue: "structured.dlq"},
			Prefetch:       1,
			Concurrency:    1,
			MaxAttempts:    1,
			MaxBodyBytes:   1 << 16,
			HandlerTimeout: time.Second,
			Messages:       []envelope.Message{{Type: va.m.Type, Profile: va.env.Profile, Inbox: envelope.InboxNone}},
		}
		reached := 0
		routes := runtime.Routes{{Type: va.m.Type, Version: va.v.Number, ContentType: schema.DefaultContentType}: func(context.Context, runtime.RawDelivery) error {
			reached++
			return nil
		}}
		h, err := lilytest.New(spec, routes, runtime.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		for i, ex := range msg.Examples {
			body, err := json.Marshal(ex.Payload)
			if err != nil {
				t.Fatal(err)
			}
			headers := map[string]any{}
			for k, v := range ex.Headers {
				if n, ok := v.(int); ok {
					v = int64(n) // as an AMQP table holds an integer
				}
				headers[k] = v
			}
			res := h.Deliver(runtime.Publishing{ContentType: msg.ContentType, MessageId: "example", Headers: headers, Body: body})
			if res.Path != runtime.PathAcked || reached != i+1 {
				t.Errorf("%s: example %d: %s %s: %s", va.id, i+1, res.Path, res.Rejection, res.Reason)
			}
		}
		h.Close()
		checked++
	}
	if checked < 2 {
		t.Errorf("%d structured messages checked, want those of both edge profiles", checked)
	}
}
