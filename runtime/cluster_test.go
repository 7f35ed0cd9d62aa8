package runtime_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/internal/queue"
	"github.com/lily-mq/lily/internal/services"
	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/runtime/internal/fixture"
	"github.com/lily-mq/lily/topology"
)

// clusterScript runs .ci/cluster with args and returns the last line it
// printed.
func clusterScript(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("../.ci/cluster", args...).CombinedOutput()
	if err != nil {
		t.Fatalf(".ci/cluster %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}

// The node holding a quorum queue's leader, and the Publisher's connection,
// is killed. The Publisher connects to another node at once, and opens its
// channel there while the queue elects a new leader: RabbitMQ 3.10 nacks
// every publish on such a channel for 5 to 15 s, sometimes until the killed
// node is back, while a channel opened after the election publishes at
// once. The nacked channel is retired and the next Sends go on a new one:
// they are confirmed again while the killed node is still down.
func TestClusterPublisherSendsAgainWhileTheLeadersNodeIsDown(t *testing.T) {
	urls := services.Cluster(t)
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "lilytest.cluster.nack." + hex.EncodeToString(b[:])
	conn, err := amqp.Dial(urls[0])
	if err != nil {
		t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(name, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close()
	leader, err := strconv.Atoi(clusterScript(t, "leader", name))
	if err != nil || leader < 1 || leader > len(urls) {
		t.Fatalf("leader of %s: node %d (%v)", name, leader, err)
	}
	t.Cleanup(func() {
		clusterScript(t, "start", strconv.Itoa(leader))
		for _, u := range urls {
			if conn, err := amqp.Dial(u); err == nil {
				if ch, err := conn.Channel(); err == nil {
					_, _ = ch.QueueDelete(name, false, false, false)
				}
				_ = conn.Close()
				return
			}
		}
	})
	// The leader's node first: the Publisher connects there.
	ordered := append([]string{urls[leader-1]}, urls[:leader-1]...)
	ordered = append(ordered, urls[leader:]...)
	p, err := runtime.NewPublisher(runtime.Config{URLs: ordered, StepTimeout: 2 * time.Second, ReconnectMax: 500 * time.Millisecond}, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	send := func(id string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		return p.Send(ctx, message(t, "", name, id))
	}
	if err := send("before"); err != nil {
		t.Fatal(err)
	}
	if n, _ := strconv.Atoi(clusterScript(t, "node-of", "lily publisher publish")); n != leader {
		t.Fatalf("the publisher is on node %d, the leader on node %d", n, leader)
	}

	type answer struct {
		at  time.Time
		err error
	}
	var mu sync.Mutex
	var answers []answer
	stop := make(chan struct{})
	var sending sync.WaitGroup
	sending.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			err := send("during-" + strconv.Itoa(i))
			mu.Lock()
			answers = append(answers, answer{time.Now(), err})
			mu.Unlock()
		}
	})
	defer func() {
		close(stop)
		sending.Wait()
	}()
	killed := time.Now()
	clusterScript(t, "kill", strconv.Itoa(leader))
	gone := time.Now()
	// Ten Sends in a row confirmed after a nacked one, each answered once
	// the node was gone: on a new connection, the node still down. (One
	// answered while the kill was under way may be the old connection's.)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		mu.Lock()
		nacked, run, back := 0, 0, time.Time{}
		for _, a := range answers {
			switch {
			case a.at.Before(killed):
			case a.err == nil:
				if a.at.Before(gone) {
					continue
				}
				if run == 0 {
					back = a.at
				}
				run++
			case errors.Is(a.err, runtime.ErrNacked):
				nacked++
				run = 0
			default:
				run = 0
			}
		}
		mu.Unlock()
		if run >= 10 {
			t.Logf("Sends confirmed again %v after the kill began; %d nacked", back.Sub(killed).Round(time.Millisecond), nacked)
			if nacked == 0 {
				// The new connection's channel opened after the election:
				// nothing to retire, and this run did not test that.
				t.Log("no Send was nacked: this run did not meet the election's nacks")
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a minute after node %d was killed, %d Sends nacked and no ten in a row confirmed", leader, nacked)
		}
	}
}

// A consumer consumes on one node and hands its retry copies off on
// another, the node of the retry bucket's leader, which is killed while
// every delivery fails retryably and is handed off. The handoff connection
// dials a surviving node at once and opens its channel while the bucket
// elects a new leader; RabbitMQ 3.10 nacks every publish on that channel
// for a minute or more. Each nacked handoff is a handoff failure (the
// original requeued), and the nack retires the channel: the handoffs after
// it go on a new one, and are confirmed again while the node is still down.
// At the end every message is in one place: its copy in the bucket
// (attempt 2), or the message still in the source queue.
func TestClusterHandoffsConfirmAgainWhileTheLeadersNodeIsDown(t *testing.T) {
	urls := services.Cluster(t)
	var b [4]byte
	_, _ = rand.Read(b[:])
	q := fixture.LilytestQueueSpec()
	q.Name = "lilytest.cluster.handoff." + hex.EncodeToString(b[:])
	q.Topology.Type = topology.Quorum
	q.Topology.DeadLetterQueue = q.Name + ".dlq"
	// An hour: no copy comes back from its bucket during the test.
	q.Topology.RetryDelays = []time.Duration{time.Hour}
	// No delivery limit: a message whose handoff is nacked again and again
	// (for a minute, before the nack retired the channel) keeps being handed
	// to its bucket, not to the DLQ after 20 deliveries.
	q.Topology.DeliveryLimit = queue.NoDeliveryLimit
	// Slots to spare: the deliveries whose handoffs fail as the node dies
	// hold theirs for a pause before their requeue, while the next ones'
	// handoffs open the new channel during the election.
	q.Prefetch, q.Concurrency = 32, 16
	dest := bucket(q, time.Hour)

	// The bucket's leader on node leader, the source queue's (and the
	// DLQ's) on node source: RabbitMQ 3.10 puts a new quorum queue's leader
	// on the node of the connection that declares it. The whole topology is
	// declared on leader's node, then the source queue and the DLQ again on
	// source's.
	leader := 1 + int(b[0])%len(urls)
	source := 1 + leader%len(urls)
	t.Cleanup(func() {
		clusterScript(t, "start", strconv.Itoa(leader))
		conn, err := amqp.Dial(urls[source-1])
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		defer conn.Close()
		for _, name := range []string{q.Name, q.Topology.DeadLetterQueue, dest} {
			ch, err := conn.Channel()
			if err == nil {
				_, err = ch.QueueDelete(name, false, false, false)
				_ = ch.Close()
			}
			if err != nil {
				t.Errorf("cleanup: delete %s: %v", name, err)
			}
		}
	})
	onLeader := dialCluster(t, urls[leader-1])
	if err := runtime.DeclareTopology(onLeader, q); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{q.Name, q.Topology.DeadLetterQueue} {
		ch := channel(t, onLeader)
		if _, err := ch.QueueDelete(name, false, false, false); err != nil {
			t.Fatal(err)
		}
		_ = ch.Close()
	}
	_ = onLeader.Close()
	onSource := dialCluster(t, urls[source-1])
	if err := runtime.DeclareTopology(onSource, q); err != nil {
		t.Fatal(err)
	}
	if n, _ := strconv.Atoi(clusterScript(t, "leader", dest)); n != leader {
		t.Fatalf("the bucket's leader is on node %d, not on node %d, whose connection declared it", n, leader)
	}

	type record struct {
		at time.Time
		runtime.Record
	}
	var mu sync.Mutex
	var records []record
	recorded := func() []record {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(records)
	}
	var events eventLog
	// The source's node first: the consumer consumes there.
	ordered := []string{urls[source-1]}
	for n := range urls {
		if n != source-1 {
			ordered = append(ordered, urls[n])
		}
	}
	cfg := runtime.Config{
		URLs: ordered, StepTimeout: 2 * time.Second, ReconnectMax: 500 * time.Millisecond,
		ShutdownGrace: 5 * time.Second, ForceWindow: time.Second, Logger: slog.New(&events),
		Observe: func(rec runtime.Record) {
			mu.Lock()
			records = append(records, record{time.Now(), rec})
			mu.Unlock()
		},
	}
	h := handler(func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error {
		return runtime.Retryable(errors.New("fails, to be retried"))
	})
	c, err := runtime.NewConsumer(q, fixture.LilytestRoutes(h), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() {
		_, err := c.Run(ctx)
		ran <- err
	}()
	stopConsumer := sync.OnceFunc(func() {
		cancel()
		if err := <-ran; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	defer stopConsumer()
	eventually(t, 2*time.Minute, "a consumer on "+q.Name, func() bool {
		ch, err := onSource.Channel()
		if err != nil {
			return false
		}
		defer ch.Close()
		state, err := ch.QueueDeclarePassive(q.Name, true, false, false, false, nil)
		return err == nil && state.Consumers > 0
	})
	// The handoff connection, dialed at the first handoff, on the
	// bucket's leader's node; the consuming connection stays where it is.
	c.DialFrom(slices.Index(ordered, urls[leader-1]))

	// A message every 20 ms into the source queue, on its leader's node.
	var published []string
	var publishErr error
	stopPublishing := make(chan struct{})
	var publishing sync.WaitGroup
	ch := channel(t, onSource)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	publishing.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stopPublishing:
				return
			case <-time.After(20 * time.Millisecond):
			}
			id := "m-" + strconv.Itoa(i)
			msg, err := fixture.NewOrderPlacedV1(id, &fixture.OrderPlacedV1{OrderID: id})
			if err == nil {
				var dc *amqp.DeferredConfirmation
				if dc, err = ch.PublishWithDeferredConfirm("", q.Name, true, false, msg); err == nil && !dc.Wait() {
					err = errors.New("nacked")
				}
			}
			if err != nil {
				publishErr = fmt.Errorf("publish %s to %s: %w", id, q.Name, err)
				return
			}
			published = append(published, id)
		}
	})
	stopProducer := sync.OnceFunc(func() {
		close(stopPublishing)
		publishing.Wait()
		if publishErr != nil {
			t.Error(publishErr)
		}
	})
	defer stopProducer()

	eventually(t, 2*time.Minute, "a first retry handoff", func() bool {
		return slices.ContainsFunc(recorded(), func(r record) bool { return r.Path == runtime.PathRetried })
	})
	if n, _ := strconv.Atoi(clusterScript(t, "node-of", "lily "+q.Name+" handoff")); n != leader {
		t.Fatalf("the handoff connection is on node %d, the bucket's leader on node %d", n, leader)
	}

	killed := time.Now()
	clusterScript(t, "kill", strconv.Itoa(leader))
	gone := time.Now()
	// Ten handoffs in a row confirmed after the last that failed, each
	// recorded once the node was gone: on a new connection, the node still
	// down.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		failed, nacked, run, back := 0, 0, 0, time.Time{}
		for _, r := range recorded() {
			switch {
			case r.at.Before(killed):
			case r.Path == runtime.PathRetried:
				if r.at.Before(gone) {
					continue
				}
				if run == 0 {
					back = r.at
				}
				run++
			default:
				failed++
				if r.Handoff == "nacked" {
					nacked++
				}
				run = 0
			}
		}
		if run >= 10 {
			t.Logf("handoffs confirmed again %v after the kill began; %d failed (%d nacked)", back.Sub(killed).Round(time.Millisecond), failed, nacked)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("30 s after node %d was killed, %d handoffs failed (%d nacked) and no ten in a row confirmed", leader, failed, nacked)
		}
	}
	stopProducer()
	// Every message handed off, or given up waiting for: the accounting
	// below finds the rest in the source queue.
	waitFor := time.Now().Add(20 * time.Second)
	for time.Now().Before(waitFor) {
		retried := map[string]bool{}
		for _, r := range recorded() {
			if r.Path == runtime.PathRetried {
				retried[r.MessageID] = true
			}
		}
		if len(retried) == len(published) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	stopConsumer()
	if n := sessions(&events); n != 1 {
		t.Errorf("the consumer opened %d consuming sessions; its one connection, on a surviving node, should have served them all", n)
	}

	// Where every message is. A failed handoff is requeued, so a retried
	// record, one per message at most, is the only ACK, and each came after
	// its copy was confirmed. A handoff that failed unconfirmed (in flight
	// as its node died) may have left a copy too; a nacked one, refused by
	// its only queue, none: no more copies than handoffs not nacked.
	retried, handoffs, evidence := map[string]int{}, map[string]int{}, map[string][]string{}
	failed := 0
	for _, r := range recorded() {
		switch {
		case r.Path == runtime.PathRetried && r.Handoff == "confirmed" && r.Destination == dest:
			retried[r.MessageID]++
		case r.Path == runtime.PathRequeued && r.Handoff != "" && r.Handoff != "confirmed" && r.Destination == dest:
			failed++
		case r.Path == runtime.PathNotStarted && r.Handoff == "":
			continue // requeued at the stop before it started
		default:
			t.Errorf("record of %s: path %s, handoff %q to %q (%s)", r.MessageID, r.Path, r.Handoff, r.Destination, r.Reason)
			continue
		}
		if r.Handoff != "nacked" {
			handoffs[r.MessageID]++
		}
		evidence[r.MessageID] = append(evidence[r.MessageID], r.Handoff)
	}
	copies, inSource := map[string]int{}, map[string]int{}
	for _, d := range drainOn(t, onSource, dest) {
		copies[d.MessageId]++
		if a, f := fmt.Sprint(d.Headers["x-lily-attempt"]), fmt.Sprint(d.Headers["x-lily-failure-attempt"]); a != "2" || f != "1" {
			t.Errorf("copy of %s: attempt %s, failure attempt %s; want 2 and 1", d.MessageId, a, f)
		}
	}
	for _, d := range drainOn(t, onSource, q.Name) {
		inSource[d.MessageId]++
	}
	duplicates, left := 0, 0
	for _, id := range published {
		switch {
		case copies[id]+inSource[id] == 0:
			t.Errorf("message %s is lost: no copy in %s, not in %s (handoffs %v)", id, dest, q.Name, evidence[id])
		case retried[id] > 1:
			t.Errorf("message %s was acked %d times", id, retried[id])
		case retried[id] == 1 && (copies[id] == 0 || inSource[id] != 0):
			t.Errorf("message %s was acked after a confirmed handoff, but has %d copies, and is %d times in the source queue", id, copies[id], inSource[id])
		case retried[id] == 0 && inSource[id] != 1:
			t.Errorf("message %s was never acked, but is %d times in the source queue", id, inSource[id])
		case copies[id] > handoffs[id] || inSource[id] > 1:
			t.Errorf("message %s: %d copies from handoffs %v, %d times in the source queue", id, copies[id], evidence[id], inSource[id])
		}
		if copies[id] > 1 {
			duplicates += copies[id] - 1
			t.Logf("message %s: %d copies from handoffs %v", id, copies[id], evidence[id])
		}
		left += inSource[id]
		delete(copies, id)
		delete(inSource, id)
	}
	if len(copies) != 0 || len(inSource) != 0 {
		t.Errorf("messages never published: copies %v, in the source queue %v", copies, inSource)
	}
	t.Logf("%d messages: %d handed off, %d handoffs failed, %d extra copies (each of a handoff that failed unconfirmed), %d left in the source queue", len(published), len(retried), failed, duplicates, left)
}

// sessions counts the consuming sessions a consumer logged opening.
func sessions(events *eventLog) int {
	n := 0
	for _, ev := range events.all() {
		if ev.stage == "connected" {
			n++
		}
	}
	return n
}

// dialCluster connects to one node of the cluster, the connection closed
// when the test ends.
func dialCluster(t *testing.T, url string) *amqp.Connection {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}
