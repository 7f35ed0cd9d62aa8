package queue

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lily-mq/lily/topology"

	// Every test package takes -update, so that `go test ./... -update` runs.
	_ "github.com/lily-mq/lily/internal/update"
)

// With Lily's arguments declared, each queue carries them beside its type
// and its team's; by policy, the declarations keep only the type and the
// team's, and one policy per queue carries the rest, keyed as policies are.
func TestDeclarationsAndPolicies(t *testing.T) {
	base := Topology{
		Name: "pay", BrokerMajor: 3,
		Queue: topology.Queue{
			Type: Quorum, DeadLetterQueue: "pay.dlq", RetryDelays: []time.Duration{time.Second},
			Arguments: map[string]any{"x-single-active-consumer": true},
		},
	}
	declared := Declarations(base)
	want := []Declaration{
		{Name: "pay.dlq", Args: map[string]any{"x-queue-type": Quorum}, KeepTypeAndLimit: true},
		{Name: "pay.retry.1s", Args: map[string]any{
			"x-queue-type": Quorum, "x-message-ttl": int64(1000), "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "pay",
			"x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish",
		}},
		{Name: "pay", Args: map[string]any{
			"x-queue-type": Quorum, "x-single-active-consumer": true, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "pay.dlq",
			"x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish", "x-delivery-limit": int64(DefaultDeliveryLimit),
		}},
	}
	if diff := cmp.Diff(want, declared); diff != "" {
		t.Errorf("declared (-want +got):\n%s", diff)
	}
	if p := Policies(base); p != nil {
		t.Errorf("policies of a queue that declares its arguments: %v", p)
	}

	byPolicy := base
	byPolicy.ByPolicy = true
	want = []Declaration{
		{Name: "pay.dlq", Args: map[string]any{"x-queue-type": Quorum}, KeepTypeAndLimit: true},
		{Name: "pay.retry.1s", Args: map[string]any{"x-queue-type": Quorum}},
		{Name: "pay", Args: map[string]any{"x-queue-type": Quorum, "x-single-active-consumer": true}},
	}
	if diff := cmp.Diff(want, Declarations(byPolicy)); diff != "" {
		t.Errorf("declared by policy (-want +got):\n%s", diff)
	}
	wantPolicies := []Policy{
		{Name: "lily pay.retry.1s", Pattern: `^pay\.retry\.1s$`, Queue: "pay.retry.1s", Definition: map[string]any{
			"message-ttl": int64(1000), "dead-letter-exchange": "", "dead-letter-routing-key": "pay",
			"dead-letter-strategy": "at-least-once", "overflow": "reject-publish",
		}},
		{Name: "lily pay", Pattern: `^pay$`, Queue: "pay", Definition: map[string]any{
			"dead-letter-exchange": "", "dead-letter-routing-key": "pay.dlq",
			"dead-letter-strategy": "at-least-once", "overflow": "reject-publish", "delivery-limit": int64(DefaultDeliveryLimit),
		}},
	}
	if diff := cmp.Diff(wantPolicies, Policies(byPolicy)); diff != "" {
		t.Errorf("policies (-want +got):\n%s", diff)
	}

	// On RabbitMQ 4 the quorum DLQ's "no limit" is an argument a policy
	// carries too; an external main queue is only checked, before Lily
	// declares the queues named after it.
	external := byPolicy
	external.External, external.BrokerMajor = true, 4
	want = []Declaration{
		{Name: "pay", Args: map[string]any{"x-queue-type": Quorum, "x-single-active-consumer": true}, Passive: true},
		{Name: "pay.dlq", Args: map[string]any{"x-queue-type": Quorum}, KeepTypeAndLimit: true},
		{Name: "pay.retry.1s", Args: map[string]any{"x-queue-type": Quorum}},
	}
	if diff := cmp.Diff(want, Declarations(external)); diff != "" {
		t.Errorf("declared for an external queue (-want +got):\n%s", diff)
	}
	if p := Policies(external); len(p) != 3 || p[0].Name != "lily pay.dlq" || p[0].Definition["delivery-limit"] != int64(NoDeliveryLimit) {
		t.Errorf("policies on RabbitMQ 4: %+v", p)
	}
}

// Every argument Lily's declarations set on a main queue, its type too, is
// one a team's arguments may not hold with another value, whatever the
// type, the broker and the limit: LilysArgument knows them all.
func TestLilysArgumentsCoverTheDeclarations(t *testing.T) {
	for _, typ := range []string{Classic, Quorum} {
		for _, major := range []int{3, 4} {
			for _, limit := range []int{0, NoDeliveryLimit, 5} {
				if typ == Classic && limit != 0 {
					continue
				}
				top := Topology{Name: "pay", BrokerMajor: major, Queue: topology.Queue{
					Type: typ, DeadLetterQueue: "pay.dlq", RetryDelays: []time.Duration{time.Second}, DeliveryLimit: limit,
				}}
				qs := top.queues()
				main := qs[len(qs)-1].all()
				for key := range main {
					if LilysArgument(typ, key, "another") == "" {
						t.Errorf("%s, RabbitMQ %d, limit %d: Lily declares %s: %v, and a team may set it too", typ, major, limit, key, main[key])
					}
				}
			}
		}
	}
}
