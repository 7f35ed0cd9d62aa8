package mongoinbox

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/lily-mq/lily/runtime"
)

// markerServer scripts a server that keeps the claim's marker in the
// transaction that inserted it, as MongoDB does: a find of the marker
// returns it within that transaction (by the txnNumber the driver sends),
// not once that transaction was aborted, and anywhere once it committed.
func markerServer() script {
	var mu sync.Mutex
	var markerTxn int64 = -1
	committed := false
	return func(cmd command) bson.D {
		mu.Lock()
		defer mu.Unlock()
		txn, inTxn := cmd.Doc.Lookup("txnNumber").Int64OK()
		switch cmd.Name {
		case "update":
			return ok(bson.E{Key: "n", Value: 1})
		case "insert":
			if cmd.Doc.Lookup("insert").StringValue() == DefaultMarkers {
				markerTxn = txn
			}
			return ok(bson.E{Key: "n", Value: 1})
		case "abortTransaction":
			if txn == markerTxn {
				markerTxn = -1
			}
		case "commitTransaction":
			if txn == markerTxn && markerTxn >= 0 {
				committed = true
			}
		case "find":
			if cmd.Doc.Lookup("find").StringValue() == DefaultMarkers && (committed || inTxn && txn == markerTxn && markerTxn >= 0) {
				filter := cmd.Doc.Lookup("filter").Document()
				return cursor(bson.D{{Key: "_id", Value: filter.Lookup("_id")}, {Key: "owner", Value: filter.Lookup("owner")}})
			}
			return cursor()
		}
		return nil
	}
}

// Commit commits only a transaction that holds the claim's marker. A
// handler that aborted the claim's transaction and started another would
// otherwise have its writes committed with no marker: the redelivery after
// a lost ACK would run it again.
func TestCommitRefusesATransactionWithoutTheMarker(t *testing.T) {
	for _, c := range []struct {
		name    string
		handler func(ctx context.Context, sess *mongo.Session, orders *mongo.Collection) error
		want    string // committed or failed
	}{
		{"the handler writes", func(ctx context.Context, _ *mongo.Session, orders *mongo.Collection) error {
			_, err := orders.InsertOne(ctx, bson.D{{Key: "n", Value: 1}})
			return err
		}, "committed"},
		{"the handler aborts, starts another transaction and writes", func(ctx context.Context, sess *mongo.Session, orders *mongo.Collection) error {
			if err := sess.AbortTransaction(ctx); err != nil {
				return err
			}
			if err := sess.StartTransaction(); err != nil {
				return err
			}
			_, err := orders.InsertOne(ctx, bson.D{{Key: "n", Value: 1}})
			return err
		}, "failed"},
		{"the handler aborts and starts another transaction", func(ctx context.Context, sess *mongo.Session, _ *mongo.Collection) error {
			if err := sess.AbortTransaction(ctx); err != nil {
				return err
			}
			return sess.StartTransaction()
		}, "failed"},
		{"the handler aborts", func(ctx context.Context, sess *mongo.Session, _ *mongo.Collection) error {
			return sess.AbortTransaction(ctx)
		}, "failed"},
		// The handler ended the claim's transaction itself, and the driver's
		// state no longer tells which transaction it ended: Commit reads the
		// marker from the server, outside the session.
		{"the handler commits", func(ctx context.Context, sess *mongo.Session, _ *mongo.Collection) error {
			return sess.CommitTransaction(ctx)
		}, "committed"},
		{"the handler commits, then reads", func(ctx context.Context, sess *mongo.Session, orders *mongo.Collection) error {
			if err := sess.CommitTransaction(ctx); err != nil {
				return err
			}
			if err := orders.FindOne(ctx, bson.D{{Key: "n", Value: 1}}).Err(); !errors.Is(err, mongo.ErrNoDocuments) {
				return err
			}
			return nil
		}, "committed"},
		{"the handler aborts, starts another transaction and commits it, with no op between", func(ctx context.Context, sess *mongo.Session, _ *mongo.Collection) error {
			if err := sess.AbortTransaction(ctx); err != nil {
				return err
			}
			if err := sess.StartTransaction(); err != nil {
				return err
			}
			return sess.CommitTransaction(ctx)
		}, "failed"},
		{"the handler aborts, starts another transaction, writes and commits it", func(ctx context.Context, sess *mongo.Session, orders *mongo.Collection) error {
			if err := sess.AbortTransaction(ctx); err != nil {
				return err
			}
			if err := sess.StartTransaction(); err != nil {
				return err
			}
			if _, err := orders.InsertOne(ctx, bson.D{{Key: "n", Value: 1}}); err != nil {
				return err
			}
			return sess.CommitTransaction(ctx)
		}, "failed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			db, conn := scriptedDB(t, "mongodb://127.0.0.1:27017", markerServer())
			ctx := context.Background()
			tx := begun(t, db)
			hctx := tx.Bind(ctx)
			sess, _ := Session(hctx)
			if err := c.handler(hctx, sess, db.Collection("orders")); err != nil {
				t.Fatalf("handler: %v", err)
			}
			byHandler := len(conn.find("commitTransaction"))
			ended := !sess.TransactionRunning()
			err := tx.Commit(ctx)
			if got := said(err); got != c.want {
				t.Fatalf("Commit = %s (%v); sent %v; want %s", got, err, conn.commands(), c.want)
			}
			commits := len(conn.find("commitTransaction")) - byHandler
			if byHandler == 0 && c.want == "failed" && commits != 0 {
				t.Errorf("sent %v: commitTransaction sent for a transaction without the marker", conn.commands())
			}
			if byHandler == 0 && c.want == "committed" && commits != 1 {
				t.Errorf("sent %v, want one commitTransaction", conn.commands())
			}
			if byHandler > 0 && commits != 0 {
				t.Errorf("sent %v: Commit sent commitTransaction after the handler's own", conn.commands())
			}
			if ended && c.want == "failed" && !strings.Contains(err.Error(), "the handler ended the claim's transaction") {
				t.Errorf("Commit = %v, want it to name the handler's misuse", err)
			}
			if outside := markerReadsOutside(t, conn); ended && outside == 0 {
				t.Errorf("sent %v: the handler ended the transaction, and Commit did not read the marker from the server", conn.commands())
			}
			if len(conn.find("delete")) != 1 {
				t.Errorf("sent %v: the lease was not released", conn.commands())
			}
		})
	}
}

// When the handler ended the claim's transaction and the marker cannot be
// read, whether it committed is unknown: ambiguous, its lease kept.
func TestCommitAfterTheHandlerCommittedWithoutAnAnswer(t *testing.T) {
	db, conn := scriptedDB(t, "mongodb://127.0.0.1:27017", func(cmd command) bson.D {
		switch cmd.Name {
		case "update", "insert":
			return ok(bson.E{Key: "n", Value: 1})
		case "find":
			return failure(91, "ShutdownInProgress", "the server is shutting down")
		}
		return nil
	})
	ctx := context.Background()
	tx := begun(t, db)
	sess, _ := Session(tx.Bind(ctx))
	if err := sess.CommitTransaction(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); said(err) != "ambiguous" {
		t.Fatalf("Commit = %s (%v), want ambiguous", said(err), err)
	}
	if len(conn.find("delete")) != 0 {
		t.Errorf("sent %v: the lease of an ambiguous commit was released", conn.commands())
	}
}

// markerReadsOutside counts the reads of the marker outside any
// transaction, and checks that each asks for what a majority holds.
func markerReadsOutside(t *testing.T, conn *scriptedConn) int {
	t.Helper()
	n := 0
	for _, f := range conn.find("find") {
		if f.Doc.Lookup("find").StringValue() != DefaultMarkers {
			continue
		}
		if _, inTxn := f.Doc.Lookup("txnNumber").Int64OK(); inTxn {
			continue
		}
		n++
		if level, _ := f.Doc.Lookup("readConcern", "level").StringValueOK(); level != "majority" {
			t.Errorf("the marker read outside the transaction asks read concern %q, want majority: %v", level, f.Doc)
		}
	}
	return n
}

func TestMarkerVerdict(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, "committed"},
		{mongo.ErrNoDocuments, "failed"},
		{context.DeadlineExceeded, "failed"}, // no commitTransaction sent: nothing can commit
		{mongo.CommandError{Name: "NoSuchTransaction", Labels: []string{"TransientTransactionError"}}, "failed"},
	} {
		err := markerVerdict(c.err)
		if got := said(err); got != c.want {
			t.Errorf("markerVerdict(%v) = %s (%v), want %s", c.err, got, err, c.want)
		}
		if c.err != nil && errors.Is(err, runtime.ErrCommitAmbiguous) {
			t.Errorf("markerVerdict(%v) is ambiguous: no commit was sent", c.err)
		}
	}
	if err := markerVerdict(mongo.ErrNoDocuments); !strings.Contains(err.Error(), "marker is not in the transaction") {
		t.Errorf("markerVerdict(no documents) = %v, want it to say the marker is missing", err)
	}
}
