package mongoinbox

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/lily-mq/lily/runtime"
)

// A live lease defers the claim, unless a majority already holds the
// marker: then the lease is a committed claim's that outlived its commit (a
// crash before its release, an ambiguous commit that landed), and waiting
// for it to expire proves nothing more.
func TestLiveLeaseOfACommittedClaim(t *testing.T) {
	for _, c := range []struct {
		name   string
		marker bson.D // the find's answer
		want   string // duplicate, or what the deferral says
	}{
		{"the marker committed", cursor(bson.D{{Key: "_id", Value: 1}}), "duplicate"},
		{"no marker", cursor(), "another worker holds the lease"},
		{"the marker's read fails", failure(codeUnauthorized, "Unauthorized", "not authorized on lily to execute command find"), "the inbox is misconfigured"},
	} {
		t.Run(c.name, func(t *testing.T) {
			db, conn := scriptedDB(t, "mongodb://127.0.0.1:27017", func(cmd command) bson.D {
				switch cmd.Name {
				case "update":
					return ok(bson.E{Key: "n", Value: 0}, bson.E{Key: "writeErrors", Value: bson.A{
						bson.D{{Key: "index", Value: 0}, {Key: "code", Value: 11000}, {Key: "errmsg", Value: "E11000 duplicate key error"}},
					}})
				case "find":
					return c.marker
				}
				return nil
			})
			in, err := New(db, Options{})
			if err != nil {
				t.Fatal(err)
			}
			_, err = in.Begin(context.Background(), "c", "m1")
			switch {
			case err == nil:
				t.Fatalf("Begin under a live lease succeeded; sent %v", conn.commands())
			case c.want == "duplicate" && !errors.Is(err, runtime.ErrDuplicate):
				t.Fatalf("Begin = %v; sent %v; want a duplicate", err, conn.commands())
			case c.want != "duplicate" && (errors.Is(err, runtime.ErrDuplicate) || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("Begin = %v; sent %v; want a deferral saying %q", err, conn.commands(), c.want)
			}
			if n := markerReadsOutside(t, conn); n != 1 {
				t.Errorf("sent %v: the marker was read %d times outside a transaction, want once", conn.commands(), n)
			}
			if len(conn.find("insert")) != 0 {
				t.Errorf("sent %v: a claim under a live lease inserted its marker", conn.commands())
			}
		})
	}
}
