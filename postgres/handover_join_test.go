package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/postgres"
)

type joinedOrder struct{ N int }

func (joinedOrder) MessageName() string { return "postgres.join.order" }

// cuttingStore ends the connection of every claim idle in its transaction
// (on the test's own application_name) before the first delete: the claim
// rolls back, after its rows were handed over.
type cuttingStore struct {
	*postgres.Persistence
	pool   *pgxpool.Pool
	app    string
	noJoin bool
	cut    atomic.Bool
	ended  atomic.Int64
}

func (s *cuttingStore) JoinsHandOver(t bus.Transport) bool {
	return !s.noJoin && s.Persistence.JoinsHandOver(t)
}

func (s *cuttingStore) DeleteOutgoing(ctx context.Context, claims []bus.Claim) (int, error) {
	if s.cut.CompareAndSwap(false, true) {
		var n int64
		err := s.pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE application_name = $1 AND state = 'idle in transaction'`, s.app).Scan(&n)
		if err != nil {
			return 0, err
		}
		s.ended.Store(n)
	}
	return s.Persistence.DeleteOutgoing(ctx, claims)
}

// With the PostgreSQL transport on the store's database, a due row is
// handed over in its claim's transaction: when that transaction is lost
// after the hand-over and before its commit, the message goes with it and
// the row is handed over again, so every message arrives exactly once.
// With the hand-over outside the claim (the control), the same cut sends
// the claim's messages twice.
func TestHandOverJoinsTheClaimsTransaction(t *testing.T) {
	t.Parallel()
	testPool(t)
	for _, tc := range []struct {
		name   string
		noJoin bool
	}{{"Joined", false}, {"Control", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var b [4]byte
			_, _ = rand.Read(b[:])
			app := "pbjoin_" + hex.EncodeToString(b[:])
			cfg, err := pgxpool.ParseConfig(testURL())
			if err != nil {
				t.Fatal(err)
			}
			cfg.MaxConns = 10
			cfg.ConnConfig.RuntimeParams["application_name"] = app
			pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
			if err != nil {
				serverUnavailable(t, err)
			}
			t.Cleanup(pool.Close)
			schema := freshSchema(t, pool)
			store := &cuttingStore{Persistence: newStore(t, pool, postgres.Options{Schema: schema}), pool: testPool(t), app: app, noJoin: tc.noJoin}
			tr := newTransport(t, pool, schema, postgres.TransportOptions{})
			in := bustest.NewRecorder[joinedOrder]()
			bb := bustest.StartBus(t, bus.Config{Endpoint: "join-" + tc.name, Transport: tr, Persistence: store,
				Dispatcher: bus.DispatcherConfig{Lease: 6 * time.Second}},
				func(b *bus.Bus) { _ = bus.Handle(b, in.Handler) })
			const n = 10
			var batch bus.Batch
			for i := range n {
				batch.Send(joinedOrder{N: i}, bus.To("join-"+tc.name), bus.DeliverAfter(300*time.Millisecond))
			}
			if err := bb.SendBatch(t.Context(), &batch); err != nil {
				t.Fatal(err)
			}
			in.WaitFor(t, n)
			time.Sleep(2 * time.Second) // a second hand-over would arrive by now
			seen := map[int]int{}
			for _, m := range in.Messages() {
				seen[m.N]++
			}
			if store.ended.Load() == 0 {
				t.Fatal("no claim transaction was cut: the test proves nothing")
			}
			dups := 0
			for i := range n {
				switch c := seen[i]; {
				case c == 0:
					t.Errorf("message %d never arrived", i)
				case c > 1:
					dups += c - 1
				}
			}
			switch {
			case !tc.noJoin && dups > 0:
				t.Errorf("%d duplicates: the hand-over committed apart from its row's delete", dups)
			case tc.noJoin && dups == 0:
				t.Errorf("control: no duplicate although the claim was cut after its hand-over")
			}
		})
	}
}
