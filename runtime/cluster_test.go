package runtime_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/internal/services"
	"github.com/lily-mq/lily/runtime"
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
	// Ten Sends in a row confirmed after a nacked one, or after the kill.
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		mu.Lock()
		nacked, run, back := 0, 0, time.Time{}
		for _, a := range answers {
			switch {
			case a.at.Before(killed):
			case a.err == nil:
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
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a minute after node %d was killed, %d Sends nacked and no ten in a row confirmed", leader, nacked)
		}
	}
}
