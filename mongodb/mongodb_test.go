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
		if ix.Name == "postbus_available_at" {
			found = len(ix.Key) == 2 && ix.Key[0].Key == "available_at" && ix.Key[1].Key == "_id"
		}
	}
	if !found {
		t.Fatalf("no (available_at, _id) index named postbus_available_at among %+v", idx)
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
	_, err := p.ClaimDueOutgoing(testCtx(t), time.Now(), 10, 0)
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
	got, err := p.ClaimDueOutgoing(ctx, time.Now().Add(time.Hour), 10, time.Minute)
	if err != nil || len(got) != 0 {
		t.Fatalf("claim with a fast client clock = %d rows, %v; want none", len(got), err)
	}
	if err := p.DeleteOutgoing(ctx, []string{"later"}); err != nil {
		t.Fatal(err)
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
	if got, err := p.ClaimDueOutgoing(ctx, time.Now(), 10, time.Hour); err != nil || len(got) != 1 {
		t.Fatalf("claim = %d, %v; want 1", len(got), err)
	}
	if err := p.StoreOutgoing(ctx, []bus.OutgoingMessage{m}); err != nil {
		t.Fatalf("store again: %v", err)
	}
	if got, err := p.ClaimDueOutgoing(ctx, time.Now(), 10, time.Hour); err != nil || len(got) != 0 {
		t.Fatalf("claim after re-store = %d, %v; want none", len(got), err)
	}
	if err := p.DeleteOutgoing(ctx, []string{m.ID}); err != nil {
		t.Fatal(err)
	}
}

// Two processes (two clients, several claimers each) claiming one store at
// once claim every message exactly once.
func TestConcurrentClaimsAcrossClients(t *testing.T) {
	t.Parallel()
	a := newStore(t, newClient(t))
	b := storeOn(t, newClient(t), a.Collection().Name())
	bustest.ClaimConcurrently(t, 1000, a, b, a, b, a, b)
	if _, ok, err := a.NextDueOutgoing(testCtx(t)); ok || err != nil {
		t.Errorf("store not empty: %v, %v", ok, err)
	}
}

func outgoing(id string, due time.Time) bus.OutgoingMessage {
	env := &bus.Envelope{ID: id, Type: "test.Msg", Kind: bus.KindCommand, Body: []byte(`{}`), DueAt: due}
	return bus.OutgoingMessage{ID: id, Kind: bus.KindCommand, Envelope: bus.MarshalEnvelope(env), DueAt: due}
}

// A claimer that dies after winning its tickets and before leasing leaves
// the messages claimable-looking but ticketed: they must come back once the
// tickets' lease passes, exactly once, and not before.
func TestCrashedClaimerDelaysByOneLease(t *testing.T) {
	t.Parallel()
	p := newStore(t, testEnv.client)
	ctx := testCtx(t)
	due := time.Now().Add(-time.Second)
	msgs := []bus.OutgoingMessage{outgoing("x1", due), outgoing("x2", due), outgoing("x3", due)}
	if err := p.StoreOutgoing(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	const lease = 600 * time.Millisecond
	crashed := time.Now()
	if n, err := p.CrashAfterTickets(ctx, 10, lease); err != nil || n != 3 {
		t.Fatalf("crashed claimer won %d tickets, %v; want 3", n, err)
	}
	if got, err := p.ClaimDueOutgoing(ctx, time.Now(), 10, time.Hour); err != nil || len(got) != 0 {
		t.Fatalf("claim while the dead claimer's tickets hold = %d, %v; want none", len(got), err)
	}
	var got []bus.OutgoingMessage
	for len(got) < 3 && time.Since(crashed) < 30*time.Second {
		time.Sleep(20 * time.Millisecond)
		more, err := p.ClaimDueOutgoing(ctx, time.Now(), 10, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, more...)
	}
	if len(got) != 3 {
		t.Fatalf("recovered %d messages, want 3", len(got))
	}
	if el := time.Since(crashed); el < lease-20*time.Millisecond {
		t.Errorf("messages reclaimed after %v, before the dead claimer's %v lease passed", el, lease)
	}
	if again, err := p.ClaimDueOutgoing(ctx, time.Now(), 10, time.Hour); err != nil || len(again) != 0 {
		t.Fatalf("claim after recovery = %d, %v; want none (leased)", len(again), err)
	}
	if err := p.DeleteOutgoing(ctx, []string{"x1", "x2", "x3"}); err != nil {
		t.Fatal(err)
	}
}
