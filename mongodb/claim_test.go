package mongodb_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/mongodb"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// A message cancelled and stored again between a claim's find and its
// lease is either claimed as stored again or not claimed by that round:
// never returned with the cancelled copy's envelope. (The claim used to
// lease by _id alone and return the document it had read before.)
func TestClaimNeverReturnsAStaleDocument(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name        string
		claimedOnce bool // the first copy was claimed and released before
	}{{"NeverClaimed", false}, {"ClaimedAndReleased", true}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p := newStore(t, testEnv.client)
			due := time.Now().Add(-time.Second)
			mustStore(t, p, outgoingBody("restored", due, `{"copy":1}`))
			if c.claimedOnce {
				got := mustClaim(t, p, 10, time.Hour)
				if n, err := p.ReleaseOutgoing(testCtx(t), []bus.Claim{got[0].Claim()}); err != nil || n != 1 {
					t.Fatalf("ReleaseOutgoing = %d, %v", n, err)
				}
			}
			fresh := outgoingBody("restored", due, `{"copy":2}`)
			var once sync.Once
			mongodb.SetAfterFind(p, func(ctx context.Context) {
				once.Do(func() {
					if ok, err := p.CancelOutgoing(ctx, "restored"); err != nil || !ok {
						t.Errorf("CancelOutgoing = %v, %v; want true", ok, err)
					}
					if err := p.StoreOutgoing(ctx, []bus.OutgoingMessage{fresh}); err != nil {
						t.Errorf("StoreOutgoing: %v", err)
					}
				})
			})
			got := mustClaim(t, p, 10, time.Hour)
			if len(got) != 1 || string(got[0].Envelope) != string(fresh.Envelope) {
				for _, m := range got {
					env, _ := bus.UnmarshalEnvelope(m.Envelope)
					t.Logf("claimed %s with body %s", m.ID, env.Body)
				}
				t.Fatalf("claimed %d rows; want the copy stored again, once", len(got))
			}
			mustDelete(t, p, got)
		})
	}
}

// A document another claimer leased between this claim's find and its
// update is not leased again: the update is conditional on the token the
// document was found with.
func TestClaimSkipsADocumentClaimedSinceItWasFound(t *testing.T) {
	t.Parallel()
	p := newStore(t, testEnv.client)
	other := storeOn(t, newClient(t), p.Collection().Name())
	mustStore(t, p, outgoing("contested", time.Now().Add(-time.Second)))
	var theirs []bus.OutgoingMessage
	var once sync.Once
	mongodb.SetAfterFind(p, func(ctx context.Context) {
		once.Do(func() {
			var err error
			theirs, err = other.ClaimDueOutgoing(ctx, testTransport, time.Now(), 10, time.Hour)
			if err != nil || len(theirs) != 1 {
				t.Errorf("the other claimer got %d rows, %v; want 1", len(theirs), err)
			}
		})
	})
	if mine := mustClaim(t, p, 10, time.Hour); len(mine) != 0 {
		t.Fatalf("claimed %s again while another claim holds it", mine[0].ID)
	}
	mustDelete(t, other, theirs)
}

// A claimer that dies after winning its tickets and before leasing leaves
// the messages claimable-looking but ticketed: they must come back once the
// tickets' lease passes, exactly once, and not before.
func TestCrashedClaimerDelaysByOneLease(t *testing.T) {
	t.Parallel()
	p := newStore(t, testEnv.client)
	ctx := testCtx(t)
	due := time.Now().Add(-time.Second)
	mustStore(t, p, outgoing("x1", due), outgoing("x2", due), outgoing("x3", due))
	const lease = 600 * time.Millisecond
	crashed := time.Now()
	if n, err := p.CrashAfterTickets(ctx, testTransport, 10, lease); err != nil || n != 3 {
		t.Fatalf("crashed claimer won %d tickets, %v; want 3", n, err)
	}
	if got := mustClaim(t, p, 10, time.Hour); len(got) != 0 {
		t.Fatalf("claim while the dead claimer's tickets hold = %d rows; want none", len(got))
	}
	var got []bus.OutgoingMessage
	for len(got) < 3 && time.Since(crashed) < 30*time.Second {
		time.Sleep(20 * time.Millisecond)
		got = append(got, mustClaim(t, p, 10, time.Hour)...)
	}
	if len(got) != 3 {
		t.Fatalf("recovered %d messages, want 3", len(got))
	}
	if el := time.Since(crashed); el < lease-20*time.Millisecond {
		t.Errorf("messages reclaimed after %v, before the dead claimer's %v lease passed", el, lease)
	}
	if again := mustClaim(t, p, 10, time.Hour); len(again) != 0 {
		t.Fatalf("claim after recovery = %d rows; want none (leased)", len(again))
	}
	mustDelete(t, p, got)
}

// Documents stored by earlier versions (no transport, no token, a claims
// counter, the lease_until of a lapsed claim) are claimed by a dispatcher of
// any transport and settle like new ones.
func TestDocumentsOfEarlierVersionsAreClaimed(t *testing.T) {
	t.Parallel()
	p := newStore(t, testEnv.client)
	ctx := testCtx(t)
	due := time.Now().Add(-time.Minute)
	old := outgoing("v1-doc", due)
	lapsed := due.Add(30 * time.Second).Truncate(time.Millisecond)
	_, err := p.Collection().InsertOne(ctx, bson.D{
		{Key: "_id", Value: old.ID}, {Key: "kind", Value: int32(old.Kind)}, {Key: "envelope", Value: old.Envelope},
		{Key: "due_at", Value: due.UnixNano()}, {Key: "available_at", Value: lapsed}, {Key: "lease_until", Value: lapsed},
		{Key: "failures", Value: int32(1)}, {Key: "last_error", Value: "boom"}, {Key: "created_at", Value: due},
		{Key: "claims", Value: int64(3)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Setup(ctx); err != nil {
		t.Fatalf("Setup over an earlier version's documents: %v", err)
	}
	if next, ok, err := p.NextDueOutgoing(ctx, "any-transport"); err != nil || !ok || !next.Equal(lapsed) {
		t.Fatalf("NextDueOutgoing = %v, %v, %v; want %v", next, ok, err, lapsed)
	}
	got, err := p.ClaimDueOutgoing(ctx, "any-transport", time.Now(), 10, time.Hour)
	if err != nil || len(got) != 1 {
		t.Fatalf("claimed %d, %v; want the earlier version's document", len(got), err)
	}
	if g := got[0]; g.Token == "" || g.Failures != 1 || g.LastError != "boom" || string(g.Envelope) != string(old.Envelope) {
		t.Errorf("claimed %+v, want the stored fields and a token", g)
	}
	mustDelete(t, p, got)
}
