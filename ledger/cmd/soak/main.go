// Command soak runs the ledger (github.com/lily-mq/lily/ledger) at scale:
// by default 100,000 messages of mixed behaviours through the fault harness,
// with a random fault every second on average, then accounts for every id.
// It prints the ledger and exits 1 when a message is lost, a promise
// broke, or a kind of fault never struck (the run did not test it): each is
// a PROBLEM line. It needs RabbitMQ with rabbitmqctl and, unless -pg is empty,
// PostgreSQL.
//
//	go run ./ledger/cmd/soak -n 100000
//
// -restart adds rabbitmqctl stop_app / start_app to the faults: it closes
// every client's connections, so use it only on a broker nothing else uses
// at the time (never while `make test` runs).
//
// -publish-over spreads the publishing over at least that long while the
// faults strike; while a kind of fault has not struck yet, the last 450
// messages trickle out (one every 200 ms at the most) until every kind has,
// or two thirds of -deadline.
//
// -cluster runs it on a RabbitMQ cluster instead, given its nodes' URLs
// (make cluster-up starts three beside the machine's broker; make
// soak-cluster runs this): quorum queues, and the faults are nodes stopped
// and killed with SIGKILL by -cluster-script, and with -restart every node
// restarted in turn.
//
//	go run ./ledger/cmd/soak -n 100000 -cluster "$(.ci/cluster urls)"
//
// -processes runs the process ledger instead (ledger.RunProcesses): three
// consumer processes and the outbox relay, each this command run again,
// while the messages are written into the PostgreSQL outbox (over
// -publish-over, or as fast as they can be) and one of the four is killed
// with SIGKILL about every -fault-every, then started again.
//
//	go run ./ledger/cmd/soak -n 100000 -processes -fault-every 2s
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/lily-mq/lily/ledger"
)

func main() {
	if child, err := ledger.RunChild(); child {
		// A process of the process ledger, which this command started.
		if err != nil {
			fmt.Fprintln(os.Stderr, "soak:", err)
			os.Exit(1)
		}
		return
	}
	var cfg ledger.Config
	flag.IntVar(&cfg.N, "n", 100_000, "messages, each with its own id")
	flag.Uint64Var(&cfg.Seed, "seed", 0, "seed of the behaviours and the fault schedule (0: a random one, printed)")
	flag.StringVar(&cfg.BrokerURL, "amqp", "amqp://guest:guest@127.0.0.1:5672/", "RabbitMQ")
	flag.StringVar(&cfg.PostgresDSN, "pg", "host=127.0.0.1 user=postgres dbname=test sslmode=disable", "PostgreSQL for the inbox-backed behaviour and its fault; empty for none")
	flag.DurationVar(&cfg.FaultEvery, "fault-every", time.Second, "mean pause between faults; 0 for none")
	flag.DurationVar(&cfg.PublishOver, "publish-over", 0, "spread the publishing over at least this long while consuming (the last 450 messages trickle on until every kind of fault struck, up to two thirds of -deadline); 0 publishes everything first")
	flag.BoolVar(&cfg.RestartBroker, "restart", false, "add broker restarts (stop_app, start_app) to the faults: only on a broker no one else uses")
	flag.DurationVar(&cfg.Deadline, "deadline", 30*time.Minute, "shut down by then, whatever is left (its last third is left for the journeys to end after the publishing)")
	cluster := flag.String("cluster", "", "run on a cluster: its nodes' AMQP URLs, comma-separated, in the script's order")
	script := flag.String("cluster-script", ".ci/cluster", "the script that stops, kills and starts the cluster's nodes")
	processes := flag.Bool("processes", false, "run the process ledger: consumers and the outbox relay in processes of their own, killed with SIGKILL")
	flag.Parse()
	if *cluster != "" {
		cfg.Cluster = &ledger.Cluster{URLs: strings.Split(*cluster, ","), Script: *script}
		cfg.BrokerURL = cfg.Cluster.URLs[0]
	}
	if cfg.Seed == 0 {
		cfg.Seed = rand.Uint64() >> 16
	}
	cfg.Progress = os.Stderr
	fmt.Printf("soak: %s\n", strings.Join(os.Args, " "))
	fmt.Printf("soak: seed %d (rerun the schedule with -seed %d)\n", cfg.Seed, cfg.Seed)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	run := ledger.Run
	if *processes {
		run = func(ctx context.Context, cfg ledger.Config) (*ledger.Result, error) {
			return ledger.RunProcesses(ctx, ledger.ProcessConfig{Config: cfg})
		}
	}
	res, err := run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(2)
	}
	fmt.Print(res)
	if res.Fates[ledger.Lost] > 0 || len(res.Problems) > 0 {
		os.Exit(1)
	}
}
