package mongoinbox

import (
	"context"
	"sync"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/address"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/description"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/drivertest"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/mnet"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/wiremessage"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/xoptions"

	"github.com/lily-mq/lily/runtime"
)

// No MongoDB server runs where this is built. A scripted server stands in:
// the real driver, given a deployment of the driver's own test kit
// (drivertest, internal to the driver and pinned by go.mod), sends its
// commands here, and each is answered by the test's script. It shows what
// the driver sends and how the adapter reads the answers, not what a real
// server answers: the answers are the test's, written from MongoDB's
// documentation.

// command is one command the driver sent.
type command struct {
	Name string
	Doc  bson.Raw
}

// script answers a command; nil answers {ok: 1}.
type script func(c command) bson.D

type scripted struct {
	*drivertest.MockDeployment
	conn *scriptedConn
}

func (s *scripted) SelectServer(context.Context, description.ServerSelector) (driver.Server, error) {
	return s, nil
}

func (s *scripted) Connection(context.Context) (*mnet.Connection, error) {
	return mnet.NewConnection(s.conn), nil
}

type scriptedConn struct {
	mu      sync.Mutex
	answer  script
	sent    []command
	replies [][]byte
}

func (c *scriptedConn) Write(_ context.Context, wm []byte) error {
	_, reqID, _, _, rem, _ := wiremessage.ReadHeader(wm)
	_, rem, _ = wiremessage.ReadMsgFlags(rem)
	_, rem, _ = wiremessage.ReadMsgSectionType(rem) // the command's body comes first
	doc, _, _ := wiremessage.ReadMsgSectionSingleDocument(rem)
	cmd := command{Name: doc.Index(0).Key(), Doc: bson.Raw(append([]byte(nil), doc...))}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sent = append(c.sent, cmd)
	reply := c.answer(cmd)
	if reply == nil {
		reply = bson.D{{Key: "ok", Value: 1}}
	}
	body, err := bson.Marshal(reply)
	if err != nil {
		return err
	}
	i, dst := wiremessage.AppendHeaderStart(nil, wiremessage.NextRequestID(), reqID, wiremessage.OpMsg)
	dst = wiremessage.AppendMsgFlags(dst, 0)
	dst = wiremessage.AppendMsgSectionType(dst, wiremessage.SingleDocument)
	dst = append(dst, body...)
	c.replies = append(c.replies, bsoncore.UpdateLength(dst, i, int32(len(dst[i:]))))
	return nil
}

func (c *scriptedConn) Read(context.Context) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.replies[0]
	c.replies = c.replies[1:]
	return r, nil
}

func (c *scriptedConn) commands() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var names []string
	for _, s := range c.sent {
		names = append(names, s.Name)
	}
	return names
}

func (c *scriptedConn) find(name string) []command {
	c.mu.Lock()
	defer c.mu.Unlock()
	var found []command
	for _, s := range c.sent {
		if s.Name == name {
			found = append(found, s)
		}
	}
	return found
}

func (*scriptedConn) Description() description.Server { return drivertest.MockDescription }
func (*scriptedConn) Close() error                    { return nil }
func (*scriptedConn) ID() string                      { return "scripted" }
func (*scriptedConn) DriverConnectionID() int64       { return 0 }
func (*scriptedConn) ServerConnectionID() *int64      { id := int64(1); return &id }
func (*scriptedConn) Address() address.Address        { return "127.0.0.1:27017" }
func (*scriptedConn) Stale() bool                     { return false }
func (*scriptedConn) OIDCTokenGenID() uint64          { return 0 }
func (*scriptedConn) SetOIDCTokenGenID(uint64)        {}

// scriptedDB connects a client, with the options uri gives, to a scripted
// server answering by answer.
func scriptedDB(t *testing.T, uri string, answer script) (*mongo.Database, *scriptedConn) {
	conn := &scriptedConn{answer: answer}
	d := &scripted{MockDeployment: drivertest.NewMockDeployment(), conn: conn}
	opts := options.Client().ApplyURI(uri)
	if err := xoptions.SetInternalClientOptions(opts, "deployment", d); err != nil {
		t.Fatal(err)
	}
	client, err := mongo.Connect(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	return client.Database("lily"), conn
}

// begun is the claim of message m1 of consumer c by an inbox on db.
func begun(t *testing.T, db *mongo.Database) runtime.InboxTx {
	in, err := New(db, Options{})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := in.Begin(context.Background(), "c", "m1")
	if err != nil {
		t.Fatal(err)
	}
	return tx
}

// ok is the answer of a command that succeeded.
func ok(fields ...bson.E) bson.D {
	return append(bson.D{{Key: "ok", Value: 1}}, fields...)
}

// failure is the answer of a command that failed with code.
func failure(code int32, name, msg string) bson.D {
	return bson.D{{Key: "ok", Value: 0}, {Key: "code", Value: code}, {Key: "codeName", Value: name}, {Key: "errmsg", Value: msg}}
}

// cursor is a find's answer.
func cursor(docs ...bson.D) bson.D {
	batch := bson.A{}
	for _, d := range docs {
		batch = append(batch, d)
	}
	return ok(bson.E{Key: "cursor", Value: bson.D{{Key: "id", Value: int64(0)}, {Key: "ns", Value: "lily.x"}, {Key: "firstBatch", Value: batch}}})
}
