package ledger

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/inbox/pginbox"
	"github.com/lily-mq/lily/internal/faults"
	"github.com/lily-mq/lily/internal/queue"
	"github.com/lily-mq/lily/runtime"
)

func (r *run) declare() error {
	err := faults.OnConnection(r.cfg.BrokerURL, func(conn *amqp.Connection) error { return runtime.DeclareTopology(conn, r.spec) })
	if err != nil {
		return fmt.Errorf("declare on RabbitMQ at %s: %w", r.cfg.BrokerURL, err)
	}
	return nil
}

func (r *run) deleteQueues() {
	conn, err := amqp.Dial(r.cfg.BrokerURL)
	if err != nil {
		return
	}
	defer conn.Close()
	for _, d := range declarations(r.spec) {
		for _, q := range []string{d.Name, d.Name + ".faults-aside"} {
			if ch, err := conn.Channel(); err == nil {
				_, _ = ch.QueueDelete(q, false, false, false)
				_ = ch.Close()
			}
		}
	}
}

// openDB opens the run's pool, the inbox's table and the run's business
// table with its slow-commit trigger; when it fails, it leaves none of
// them behind (closeDB).
func (r *run) openDB(ctx context.Context, suffix string) (err error) {
	r.app = "lily-ledger-" + suffix
	r.table = "lily_ledger_" + suffix
	pool, err := pgxpool.New(ctx, r.cfg.PostgresDSN+" application_name="+r.app+" pool_max_conns=40")
	if err != nil {
		return err
	}
	r.pool = pool
	defer func() {
		if err != nil {
			r.closeDB()
			r.pool = nil
		}
	}()
	if err := pginbox.Migrate(ctx, pool); err != nil {
		return fmt.Errorf("PostgreSQL at %s: %w", r.cfg.PostgresDSN, err)
	}
	_, err = pool.Exec(ctx, "CREATE TABLE "+r.table+" (message_id text NOT NULL, attempt int NOT NULL, slow bool NOT NULL)")
	if err == nil {
		_, err = faults.Psql(ctx, r.cfg.PostgresDSN, faults.SlowCommitSQL(r.table, 2*time.Second, "NEW.slow"))
	}
	return err
}

func (r *run) closeDB() {
	ctx := context.Background()
	_, _ = r.pool.Exec(ctx, "DROP TABLE IF EXISTS "+r.table)
	_, _ = r.pool.Exec(ctx, "DROP FUNCTION IF EXISTS "+r.table+"_faults_slow_commit()")
	_, _ = r.pool.Exec(ctx, "DELETE FROM lily_inbox WHERE consumer = $1", r.spec.Name)
	r.pool.Close()
}

// declarations lists the queues of spec's topology, as the runtime declares them.
func declarations(spec runtime.QueueSpec) []queue.Declaration {
	return queue.Declarations(queue.Topology{Name: spec.Name, Queue: spec.Topology})
}
