package mongodb_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

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
		for _, c := range []string{name, name + "_claims"} {
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
