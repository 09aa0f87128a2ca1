package mongodb_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/mongodb"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func randomName(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// newClient connects a client of the test's own, disconnected at cleanup.
func newClient(t testing.TB) *mongo.Client {
	t.Helper()
	c, err := mongo.Connect(options.Client().ApplyURI(testEnv.uri))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
	return c
}

// newStore returns a set-up store on collections of a random name, which
// are checked and dropped when the test ends: no claim tickets may be left
// behind once every message was deleted.
func newStore(t testing.TB, client *mongo.Client) *mongodb.Persistence {
	t.Helper()
	name := randomName("outgoing_")
	p := storeOn(t, client, name)
	if err := p.Setup(testCtx(t)); err != nil {
		t.Fatalf("Setup: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		db := client.Database(testDatabase)
		if n, err := db.Collection(name).CountDocuments(ctx, bson.D{}); err == nil && n == 0 {
			if n, err := db.Collection(name+"_claims").CountDocuments(ctx, bson.D{}); err != nil || n != 0 {
				t.Errorf("claim tickets left behind: %d (err %v)", n, err)
			}
		}
		for _, c := range []string{name, name + "_claims", name + "_failed"} {
			if err := db.Collection(c).Drop(ctx); err != nil {
				t.Errorf("drop %s: %v", c, err)
			}
		}
	})
	return p
}

// storeOn returns a store on an existing collection name, for a second
// process sharing a store.
func storeOn(t testing.TB, client *mongo.Client, name string) *mongodb.Persistence {
	t.Helper()
	p, err := mongodb.New(client.Database(testDatabase), mongodb.Options{Collection: name})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return p
}

// testTransport is the transport identity of the rows these tests store.
const testTransport = "mongodb-test"

// outgoing makes a row of testTransport, due at due.
func outgoing(id string, due time.Time) bus.OutgoingMessage {
	return outgoingBody(id, due, `{}`)
}

// outgoingBody makes a row whose envelope carries body.
func outgoingBody(id string, due time.Time, body string) bus.OutgoingMessage {
	env := &bus.Envelope{ID: id, Type: "test.Msg", Kind: bus.KindCommand, Body: []byte(body), DueAt: due}
	return bus.OutgoingMessage{ID: id, Kind: bus.KindCommand, Envelope: bus.MarshalEnvelope(env), DueAt: due, Transport: testTransport}
}

func mustStore(t testing.TB, p *mongodb.Persistence, msgs ...bus.OutgoingMessage) {
	t.Helper()
	if err := p.StoreOutgoing(testCtx(t), msgs); err != nil {
		t.Fatalf("StoreOutgoing: %v", err)
	}
}

func mustClaim(t testing.TB, p *mongodb.Persistence, limit int, lease time.Duration) []bus.OutgoingMessage {
	t.Helper()
	got, err := p.ClaimDueOutgoing(testCtx(t), testTransport, time.Now(), limit, lease)
	if err != nil {
		t.Fatalf("ClaimDueOutgoing: %v", err)
	}
	return got
}

// mustDelete deletes claimed rows and checks that every one was held.
func mustDelete(t testing.TB, p *mongodb.Persistence, msgs []bus.OutgoingMessage) {
	t.Helper()
	claims := make([]bus.Claim, len(msgs))
	for i := range msgs {
		claims[i] = msgs[i].Claim()
	}
	if n, err := p.DeleteOutgoing(testCtx(t), claims); err != nil || n != len(msgs) {
		t.Fatalf("DeleteOutgoing = %d, %v; want %d, nil", n, err, len(msgs))
	}
}

// assertNoDocuments checks that the store's collection is empty.
func assertNoDocuments(t testing.TB, p *mongodb.Persistence) {
	t.Helper()
	if n, err := p.Collection().CountDocuments(testCtx(t), bson.D{}); err != nil || n != 0 {
		t.Errorf("documents left in %s: %d (err %v)", p.Collection().Name(), n, err)
	}
}

func mustCancel(t testing.TB, p *mongodb.Persistence, id string) {
	t.Helper()
	if ok, err := p.CancelOutgoing(testCtx(t), id); err != nil || !ok {
		t.Fatalf("CancelOutgoing(%s) = %v, %v; want true, nil", id, ok, err)
	}
}
