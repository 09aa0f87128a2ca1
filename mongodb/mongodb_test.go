package mongodb_test

import (
	"errors"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/mongodb"
	"go.mongodb.org/mongo-driver/v2/bson"
)

func TestScheduledMessageConformance(t *testing.T) {
	t.Parallel()
	bustest.ScheduledMessageTests(t, func(t *testing.T) bus.ScheduledStore {
		return newStore(t, testEnv.client)
	})
}

func TestDurable(t *testing.T) {
	t.Parallel()
	if !newStore(t, testEnv.client).Durable() {
		t.Fatal("Durable() = false, want true")
	}
}

func TestSetupIsIdempotent(t *testing.T) {
	t.Parallel()
	p := newStore(t, testEnv.client) // ran Setup once
	for range 2 {
		if err := p.Setup(testCtx(t)); err != nil {
			t.Fatalf("Setup again: %v", err)
		}
	}
	cur, err := p.Collection().Indexes().List(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	var idx []struct {
		Name string `bson:"name"`
		Key  bson.D `bson:"key"`
	}
	if err := cur.All(testCtx(t), &idx); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, ix := range idx {
		switch ix.Name {
		case "postbus_transport_available_due":
			found = len(ix.Key) == 4 && ix.Key[0].Key == "transport" && ix.Key[1].Key == "available_at" && ix.Key[2].Key == "due_at" && ix.Key[3].Key == "_id"
		case "postbus_transport_available_at":
			t.Errorf("the index of earlier versions, %s, is still there", ix.Name)
		}
	}
	if !found {
		t.Fatalf("no (transport, available_at, due_at, _id) index named postbus_transport_available_due among %+v", idx)
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	t.Parallel()
	db := testEnv.client.Database(testDatabase)
	cases := []struct {
		name  string
		opts  mongodb.Options
		field string
	}{
		{"dollar", mongodb.Options{Collection: "a$b"}, "Collection"},
		{"system", mongodb.Options{Collection: "system.x"}, "Collection"},
		{"same", mongodb.Options{Collection: "x", ClaimsCollection: "x"}, "ClaimsCollection"},
	}
	for _, c := range cases {
		_, err := mongodb.New(db, c.opts)
		var oe *mongodb.OptionsError
		if !errors.As(err, &oe) || oe.Field != c.field || !errors.Is(err, mongodb.ErrInvalidOptions) {
			t.Errorf("%s: New = %v, want *OptionsError on %s", c.name, err, c.field)
		}
	}
	if _, err := mongodb.New(nil, mongodb.Options{}); !errors.Is(err, mongodb.ErrInvalidOptions) {
		t.Errorf("New(nil) = %v, want ErrInvalidOptions", err)
	}
}

func TestClaimRejectsBadLease(t *testing.T) {
	t.Parallel()
	p := newStore(t, testEnv.client)
	_, err := p.ClaimDueOutgoing(testCtx(t), testTransport, time.Now(), 10, 0)
	var ae *mongodb.ArgumentError
	if !errors.As(err, &ae) || ae.Argument != "lease" || !errors.Is(err, mongodb.ErrInvalidArgument) {
		t.Fatalf("ClaimDueOutgoing(lease 0) = %v, want *ArgumentError on lease", err)
	}
	err = p.StoreOutgoing(testCtx(t), []bus.OutgoingMessage{{DueAt: time.Now()}})
	if !errors.Is(err, mongodb.ErrInvalidArgument) {
		t.Fatalf("StoreOutgoing(empty ID) = %v, want ErrInvalidArgument", err)
	}
}

// The client's now is ignored: a client whose clock runs an hour fast must
// not claim a message due in half an hour.
func TestClaimUsesServerClock(t *testing.T) {
	t.Parallel()
	p := newStore(t, testEnv.client)
	ctx := testCtx(t)
	if err := p.StoreOutgoing(ctx, []bus.OutgoingMessage{outgoing("later", time.Now().Add(30*time.Minute))}); err != nil {
		t.Fatal(err)
	}
	got, err := p.ClaimDueOutgoing(ctx, testTransport, time.Now().Add(time.Hour), 10, time.Minute)
	if err != nil || len(got) != 0 {
		t.Fatalf("claim with a fast client clock = %d rows, %v; want none", len(got), err)
	}
	if ok, err := p.CancelOutgoing(ctx, "later"); err != nil || !ok {
		t.Fatalf("CancelOutgoing = %v, %v; want true", ok, err)
	}
}

// A retried store of a message that is leased keeps the lease: the message
// is not claimable twice.
func TestStoreKeepsLeasedDocument(t *testing.T) {
	t.Parallel()
	p := newStore(t, testEnv.client)
	ctx := testCtx(t)
	m := outgoing("leased", time.Now().Add(-time.Second))
	if err := p.StoreOutgoing(ctx, []bus.OutgoingMessage{m}); err != nil {
		t.Fatal(err)
	}
	first, err := p.ClaimDueOutgoing(ctx, testTransport, time.Now(), 10, time.Hour)
	if err != nil || len(first) != 1 {
		t.Fatalf("claim = %d, %v; want 1", len(first), err)
	}
	if err := p.StoreOutgoing(ctx, []bus.OutgoingMessage{m}); err != nil {
		t.Fatalf("store again: %v", err)
	}
	if got, err := p.ClaimDueOutgoing(ctx, testTransport, time.Now(), 10, time.Hour); err != nil || len(got) != 0 {
		t.Fatalf("claim after re-store = %d, %v; want none", len(got), err)
	}
	mustDelete(t, p, first)
}

// Two processes (two clients, several claimers each) claiming one store at
// once claim every message exactly once.
func TestConcurrentClaimsAcrossClients(t *testing.T) {
	t.Parallel()
	a := newStore(t, newClient(t))
	b := storeOn(t, newClient(t), a.Collection().Name())
	bustest.ClaimConcurrently(t, 1000, a, b, a, b, a, b)
	assertNoDocuments(t, a)
}
