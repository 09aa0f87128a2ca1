package bus_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
)

// joinKey marks the context a joining store hands its claims' rows over in.
type joinKey struct{}

// joiningStore is a memory store that joins every transport to its claims,
// as the PostgreSQL store does for a transport on its database.
type joiningStore struct {
	*bus.MemoryPersistence
	mu     sync.Mutex
	ahead  int
	tokens map[string]bool // tokens of the claims returned
}

func (s *joiningStore) JoinsHandOver(bus.Transport) bool { return true }

func (s *joiningStore) HandOverContext(ctx context.Context, token string) context.Context {
	return context.WithValue(ctx, joinKey{}, token)
}

func (s *joiningStore) ClaimDueOutgoing(ctx context.Context, transport string, now time.Time, limit int, lease time.Duration) ([]bus.OutgoingMessage, error) {
	rows, err := s.MemoryPersistence.ClaimDueOutgoing(ctx, transport, now, limit, lease)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range rows {
		s.tokens[r.Token] = true
	}
	return rows, err
}

func (s *joiningStore) ClaimOutgoingAhead(ctx context.Context, transport string, now time.Time, ahead time.Duration, limit int, lease time.Duration) (bus.AheadClaim, error) {
	s.mu.Lock()
	s.ahead++
	s.mu.Unlock()
	return s.MemoryPersistence.ClaimOutgoingAhead(ctx, transport, now, ahead, limit, lease)
}

// joinRecording records the join value of each hand-over's context.
type joinRecording struct {
	bus.Transport
	mu   sync.Mutex
	seen []any
}

func (t *joinRecording) Send(ctx context.Context, queue string, env *bus.Envelope) error {
	t.mu.Lock()
	t.seen = append(t.seen, ctx.Value(joinKey{}))
	t.mu.Unlock()
	return t.Transport.Send(ctx, queue, env)
}

// A store that joins the transport to its claims gets every row handed
// over in the context of the claim that holds it, and is never claimed
// ahead: a joined message is visible only once its claim commits.
func TestJoiningStoreHandsEachRowOverInItsClaimsContext(t *testing.T) {
	t.Parallel()
	store := &joiningStore{MemoryPersistence: bus.NewMemoryPersistence(), tokens: map[string]bool{}}
	tr := &joinRecording{Transport: bus.NewMemoryTransport()}
	in := bustest.NewRecorder[PlaceOrder]()
	b := bustest.StartBus(t, bus.Config{Endpoint: "sales", Transport: tr, Persistence: store},
		func(b *bus.Bus) { _ = bus.Handle(b, in.Handler) })
	const n = 20
	for range n {
		must(t, b.Send(ctxT(t), PlaceOrder{}, bus.To("sales"), bus.DeliverAfter(20*time.Millisecond)))
	}
	in.WaitFor(t, n)
	tr.mu.Lock()
	defer tr.mu.Unlock()
	store.mu.Lock()
	defer store.mu.Unlock()
	if len(tr.seen) != n {
		t.Fatalf("%d hand-overs, want %d", len(tr.seen), n)
	}
	for i, v := range tr.seen {
		token, _ := v.(string)
		if !store.tokens[token] {
			t.Errorf("hand-over %d carried %v, not the token of a claim", i, v)
		}
	}
	if store.ahead != 0 {
		t.Errorf("%d look-ahead claims on a joining store, want 0", store.ahead)
	}
}
