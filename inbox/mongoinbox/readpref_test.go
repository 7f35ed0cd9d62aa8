package mongoinbox

import (
	"context"
	"errors"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"

	"github.com/lily-mq/lily/runtime"
)

// The claim's transaction reads from the primary whatever the client's read
// preference, with snapshot read concern and majority write concern.
func TestTransactionOptions(t *testing.T) {
	var o options.TransactionOptions
	for _, set := range txOptions().List() {
		if err := set(&o); err != nil {
			t.Fatal(err)
		}
	}
	if o.ReadPreference == nil || o.ReadPreference.Mode() != readpref.PrimaryMode {
		t.Errorf("read preference %v, want primary", o.ReadPreference)
	}
	if o.ReadConcern == nil || o.ReadConcern.Level != "snapshot" {
		t.Errorf("read concern %v, want snapshot", o.ReadConcern)
	}
	if o.WriteConcern == nil || o.WriteConcern.W != "majority" {
		t.Errorf("write concern %v, want majority", o.WriteConcern)
	}
}

// A handler's read in the claim's transaction works on a client whose read
// preference is not primary; with the client's, the driver refuses it.
func TestHandlerReadsOnASecondaryPreferredClient(t *testing.T) {
	db, _ := scriptedDB(t, "mongodb://127.0.0.1:27017/?readPreference=secondaryPreferred", func(cmd command) bson.D {
		switch cmd.Name {
		case "update", "insert":
			return ok(bson.E{Key: "n", Value: 1})
		case "find":
			return cursor(bson.D{{Key: "_id", Value: 1}})
		}
		return nil
	})
	ctx := context.Background()
	tx := begun(t, db)
	defer tx.Rollback(ctx)
	if err := db.Collection("orders").FindOne(tx.Bind(ctx), bson.D{{Key: "_id", Value: 1}}).Err(); err != nil {
		t.Fatalf("a read in the claim's transaction: %v", err)
	}
}

// A marker insert that collided is a duplicate when a majority holds the
// marker, and only the primary can say so: on a secondaryPreferred client
// the read would go to a secondary, which may lag, and the claim would
// defer on every redelivery while it does. The script answers as a lagging
// secondary to a read that allows one.
func TestDuplicateReadsTheMarkerFromThePrimary(t *testing.T) {
	db, conn := scriptedDB(t, "mongodb://127.0.0.1:27017/?readPreference=secondaryPreferred", func(cmd command) bson.D {
		switch cmd.Name {
		case "update":
			return ok(bson.E{Key: "n", Value: 1})
		case "insert":
			return ok(bson.E{Key: "n", Value: 0}, bson.E{Key: "writeErrors", Value: bson.A{
				bson.D{{Key: "index", Value: 0}, {Key: "code", Value: 11000}, {Key: "errmsg", Value: "E11000 duplicate key error"}},
			}})
		case "find":
			if onSecondary(cmd) {
				return cursor()
			}
			return cursor(bson.D{{Key: "_id", Value: 1}})
		}
		return nil
	})
	in, err := New(db, Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = in.Begin(context.Background(), "c", "m1")
	if !errors.Is(err, runtime.ErrDuplicate) {
		t.Fatalf("Begin = %v; sent %v; want a duplicate", err, conn.find("find"))
	}
}

// onSecondary tells a command the client lets a secondary answer. To a
// single server, the scripted deployment's, the driver sends read
// preference primary as primaryPreferred; to a replica set, none.
func onSecondary(cmd command) bool {
	mode, _ := cmd.Doc.Lookup("$readPreference", "mode").StringValueOK()
	return mode != "" && mode != "primaryPreferred"
}
