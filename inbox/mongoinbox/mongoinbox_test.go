package mongoinbox_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/lily-mq/lily/inbox/inboxtest"
	"github.com/lily-mq/lily/inbox/mongoinbox"
	"github.com/lily-mq/lily/runtime"
)

// database connects to LILY_MONGO_URL and returns a database no earlier run
// used, dropped when the test ends; without the variable the test is skipped.
func database(t *testing.T) (context.Context, *mongo.Database) {
	url := os.Getenv("LILY_MONGO_URL")
	if url == "" {
		t.Skip("no MongoDB server on this machine; set LILY_MONGO_URL to a replica set (transactions need one) to run the inbox conformance suite on MongoDB")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	client, err := mongo.Connect(options.Client().ApplyURI(url))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	db := client.Database(fmt.Sprintf("lily_inbox_test_%d", time.Now().UnixNano()))
	t.Cleanup(func() {
		if err := db.Drop(context.Background()); err != nil {
			t.Error(err)
		}
	})
	if err := db.CreateCollection(ctx, "business"); err != nil {
		t.Fatal(err)
	}
	return ctx, db
}

func newInbox(t *testing.T, ctx context.Context, db *mongo.Database, opts mongoinbox.Options) *mongoinbox.Inbox {
	inbox, err := mongoinbox.New(db, opts)
	if err != nil {
		t.Fatal(err)
	}
	// Twice on purpose: Migrate must be idempotent.
	for range 2 {
		if err := inbox.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return inbox
}

func harness(db *mongo.Database, inbox runtime.Inbox) inboxtest.Harness {
	business := db.Collection("business")
	return inboxtest.Harness{
		Inbox: inbox,
		Write: func(ctx context.Context, key string) error {
			if _, ok := mongoinbox.Session(ctx); !ok {
				return fmt.Errorf("no session in the handler's context")
			}
			_, err := business.InsertOne(ctx, bson.D{{Key: "key", Value: key}})
			return err
		},
		Rows: func(ctx context.Context, key string) (int, error) {
			n, err := business.CountDocuments(ctx, bson.D{{Key: "key", Value: key}})
			return int(n), err
		},
		Claims: func(ctx context.Context, consumer, id string) (int, error) {
			n, err := db.Collection(mongoinbox.DefaultMarkers).CountDocuments(ctx,
				bson.D{{Key: "_id", Value: bson.D{{Key: "c", Value: consumer}, {Key: "m", Value: id}}}})
			return int(n), err
		},
		// A duplicate key aborts the transaction on the server: its
		// commit then fails with NoSuchTransaction.
		Abort: func(ctx context.Context) error {
			if _, ok := mongoinbox.Session(ctx); !ok {
				return fmt.Errorf("no session in the handler's context")
			}
			doc := bson.D{{Key: "_id", Value: bson.NewObjectID()}}
			if _, err := business.InsertOne(ctx, doc); err != nil {
				return err
			}
			if _, err := business.InsertOne(ctx, doc); !mongo.IsDuplicateKeyError(err) {
				return fmt.Errorf("the same _id inserted twice: %v, want a duplicate key error", err)
			}
			return nil
		},
	}
}

func TestConformance(t *testing.T) {
	ctx, db := database(t)
	inboxtest.Run(t, harness(db, newInbox(t, ctx, db, mongoinbox.Options{})))
}

// A lease that expired while its holder's transaction is still open is taken
// over, but the holder's uncommitted marker fences the newcomer off: it
// defers, the holder commits, and the message is then a duplicate.
func TestExpiredLeaseIsFencedByTheMarker(t *testing.T) {
	ctx, db := database(t)
	// A long lease, renewed every 20 minutes: none comes in the test's time.
	inbox := newInbox(t, ctx, db, mongoinbox.Options{Lease: time.Hour, ClaimRetries: 2})
	h := harness(db, inbox)
	first, err := inbox.Begin(ctx, "c", "m1")
	if err != nil {
		t.Fatalf("first claim: %v", err)
	}
	if err := h.Write(first.Bind(ctx), "c/m1"); err != nil {
		t.Fatal(err)
	}
	// The lease runs out while the "handler" runs, as a stalled worker's does.
	_, err = db.Collection(mongoinbox.DefaultLeases).UpdateOne(ctx,
		bson.D{{Key: "_id", Value: bson.D{{Key: "c", Value: "c"}, {Key: "m", Value: "m1"}}}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "claimed_until", Value: time.Now().Add(-time.Second)}}}})
	if err != nil {
		t.Fatal(err)
	}
	if tx, err := inbox.Begin(ctx, "c", "m1"); tx != nil || err == nil || errors.Is(err, runtime.ErrDuplicate) {
		t.Fatalf("claim after the lease expired = %v, %v; want deferred by the open marker", tx, err)
	}
	if err := first.Commit(ctx); err != nil {
		t.Fatalf("the holder's Commit: %v", err)
	}
	if _, err := inbox.Begin(ctx, "c", "m1"); !errors.Is(err, runtime.ErrDuplicate) {
		t.Fatalf("claim after the commit: %v; want duplicate", err)
	}
	rows, err := h.Rows(ctx, "c/m1")
	if err != nil || rows != 1 {
		t.Fatalf("%d business rows (%v), want 1", rows, err)
	}
	claims, err := h.Claims(ctx, "c", "m1")
	if err != nil || claims != 1 {
		t.Fatalf("%d claim markers (%v), want 1", claims, err)
	}
}

// New refuses a renewal no sooner than the lease, which would let the lease
// run out between renewals and another worker take the message over while
// its handler runs. The client connects lazily: no server is needed.
func TestNewRefusesARenewalNoSoonerThanTheLease(t *testing.T) {
	client, err := mongo.Connect(options.Client().ApplyURI("mongodb://127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	db := client.Database("lily_inbox_options")
	for _, c := range []struct {
		opts    mongoinbox.Options
		refused bool
	}{
		{mongoinbox.Options{}, false},
		{mongoinbox.Options{Lease: time.Second, RenewEvery: 999 * time.Millisecond}, false},
		{mongoinbox.Options{Lease: time.Second, RenewEvery: time.Second}, true},
		{mongoinbox.Options{Lease: time.Second, RenewEvery: time.Hour}, true},
		{mongoinbox.Options{RenewEvery: mongoinbox.DefaultLease}, true}, // the default lease
	} {
		in, err := mongoinbox.New(db, c.opts)
		if refused := err != nil; refused != c.refused || (in == nil) != refused ||
			refused && !strings.Contains(err.Error(), "RenewEvery") {
			t.Errorf("New(%+v) = %v, %v; want refused %t, naming RenewEvery", c.opts, in, err, c.refused)
		}
	}
}
