package mongoinbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/lily-mq/lily/runtime"
)

const notReplicaSet = "Transaction numbers are only allowed on a replica set member or mongos"

// Migrate refuses a server on which no transaction can run, before it
// creates anything, and accepts a replica set member or a mongos.
func TestMigrateRefusesAStandaloneServer(t *testing.T) {
	for _, c := range []struct {
		name  string
		hello bson.D
		want  string // "" for accepted
	}{
		{"standalone", ok(bson.E{Key: "isWritablePrimary", Value: true}), "the inbox is misconfigured: the server is neither a replica set member nor a mongos"},
		{"replica set member", ok(bson.E{Key: "isWritablePrimary", Value: true}, bson.E{Key: "setName", Value: "rs0"}), ""},
		{"secondary", ok(bson.E{Key: "secondary", Value: true}, bson.E{Key: "setName", Value: "rs0"}), ""},
		{"mongos", ok(bson.E{Key: "isWritablePrimary", Value: true}, bson.E{Key: "msg", Value: "isdbgrid"}), ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			db, conn := scriptedDB(t, "mongodb://127.0.0.1:27017", func(cmd command) bson.D {
				if cmd.Name == "hello" {
					return c.hello
				}
				return nil
			})
			in, err := New(db, Options{})
			if err != nil {
				t.Fatal(err)
			}
			err = in.Migrate(context.Background())
			sent := conn.commands()
			if c.want == "" {
				if err != nil {
					t.Fatalf("Migrate = %v, want nil", err)
				}
				if !slices.Contains(sent, "create") || !slices.Contains(sent, "createIndexes") {
					t.Fatalf("sent %v: the collections and the index were not created", sent)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Migrate = %v, want an error saying %q", err, c.want)
			}
			if slices.Contains(sent, "create") {
				t.Errorf("sent %v: created collections on a server it refused", sent)
			}
		})
	}
}

// Servers before 4.4.2 know no hello; Migrate asks isMaster then.
func TestMigrateFallsBackToIsMaster(t *testing.T) {
	db, conn := scriptedDB(t, "mongodb://127.0.0.1:27017", func(cmd command) bson.D {
		switch cmd.Name {
		case "hello":
			return failure(codeCommandNotFound, "CommandNotFound", "no such command: 'hello'")
		case "isMaster":
			return ok(bson.E{Key: "ismaster", Value: true})
		}
		return nil
	})
	in, err := New(db, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Migrate(context.Background()); err == nil || !strings.Contains(err.Error(), "the inbox is misconfigured") {
		t.Fatalf("Migrate on a standalone answering isMaster = %v, want misconfigured", err)
	}
	if sent := conn.commands(); !slices.Equal(sent, []string{"hello", "isMaster"}) {
		t.Errorf("sent %v, want hello then isMaster", sent)
	}
}

// A claim that no redelivery can mend (a standalone server, a user without
// the privileges) defers, as any claim that fails does, but says the inbox
// is misconfigured: the text to alert on.
func TestMisconfiguredInboxSaysSo(t *testing.T) {
	for _, c := range []struct {
		name                string
		lease, marker       bson.D
		misconfigured       bool
		wantInTheErrorsText string
	}{
		{"standalone server", ok(bson.E{Key: "n", Value: 1}), failure(codeIllegalOperation, "IllegalOperation", notReplicaSet), true, notReplicaSet},
		{"no privilege on the leases", failure(codeUnauthorized, "Unauthorized", "not authorized on lily to execute command { update: \"lily_inbox_leases\" }"), nil, true, "not authorized"},
		{"no privilege on the markers", ok(bson.E{Key: "n", Value: 1}), failure(codeUnauthorized, "Unauthorized", "not authorized on lily to execute command { insert: \"lily_inbox\" }"), true, "not authorized"},
		{"another failure", ok(bson.E{Key: "n", Value: 1}), failure(2, "BadValue", "something else"), false, "mongoinbox: claim: "},
	} {
		t.Run(c.name, func(t *testing.T) {
			db, conn := scriptedDB(t, "mongodb://127.0.0.1:27017", func(cmd command) bson.D {
				switch cmd.Name {
				case "update":
					return c.lease
				case "insert":
					return c.marker
				}
				return nil
			})
			in, err := New(db, Options{})
			if err != nil {
				t.Fatal(err)
			}
			tx, err := in.Begin(context.Background(), "c", "m1")
			if tx != nil || err == nil || errors.Is(err, runtime.ErrDuplicate) {
				t.Fatalf("Begin = %v, %v; want deferred", tx, err)
			}
			if said := strings.Contains(err.Error(), "mongoinbox: the inbox is misconfigured, every claim defers until it is mended: "); said != c.misconfigured {
				t.Errorf("Begin's error %q says misconfigured: %t, want %t", err, said, c.misconfigured)
			}
			if !strings.Contains(err.Error(), c.wantInTheErrorsText) {
				t.Errorf("Begin's error %q lost %q", err, c.wantInTheErrorsText)
			}
			if c.marker != nil && len(conn.find("delete")) != 1 {
				t.Errorf("sent %v: the lease was not released", conn.commands())
			}
		})
	}
}

func TestMisconfiguredReadsWrappedErrors(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("x: %w", mongo.CommandError{Code: codeIllegalOperation}), true},
		{fmt.Errorf("x: %w", mongo.CommandError{Code: codeUnauthorized}), true},
		{mongo.WriteException{WriteErrors: []mongo.WriteError{{Code: codeUnauthorized}}}, true},
		{mongo.CommandError{Code: 112, Labels: []string{"TransientTransactionError"}}, false},
		{context.DeadlineExceeded, false},
		{nil, false},
	} {
		if got := misconfigured(c.err); got != c.want {
			t.Errorf("misconfigured(%#v) = %t, want %t", c.err, got, c.want)
		}
	}
}
