package postgres_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/faultproxy"
	"github.com/postbus/bus/postgres"
)

type cutReminder struct{ N int }

func (cutReminder) MessageName() string { return "postgres_test.CutReminder" }

// proxiedPool opens a pool of the test's own whose connections go through
// a fault proxy to the test server, and returns both.
func proxiedPool(t *testing.T, maxConns int32) (*pgxpool.Pool, *faultproxy.Proxy) {
	t.Helper()
	testPool(t) // skips when the server is down
	cfg, err := pgxpool.ParseConfig(testURL())
	if err != nil {
		t.Fatal(err)
	}
	p, err := faultproxy.Listen(net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	host, port, _ := net.SplitHostPort(p.Addr())
	n, _ := strconv.Atoi(port)
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = host, uint16(n)
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, p
}

// When the transport's connections are cut while scheduled messages are
// being handed over, every failed hand-over records its failure (or
// releases its row) at once, however many batches fail in a second: the
// rows come back after their backoff, not after the 60 s lease.
func TestDispatchFailedHandOverInCutIsRetriedBeforeTheLease(t *testing.T) {
	t.Parallel()
	for _, lookAhead := range []time.Duration{0, -1} {
		t.Run(fmt.Sprintf("lookahead=%v", lookAhead), func(t *testing.T) {
			t.Parallel()
			const n = 60
			transportPool, proxy := proxiedPool(t, 8)
			storePool := newPool(t, 6)
			schema := freshSchema(t, storePool)
			store, err := postgres.New(storePool, postgres.Options{Schema: schema})
			if err != nil {
				t.Fatal(err)
			}
			tr := newTransport(t, transportPool, schema, postgres.TransportOptions{PollInterval: 100 * time.Millisecond})
			var mu sync.Mutex
			arrived := map[int]time.Time{}
			b := bustest.StartBus(t, bus.Config{Endpoint: bustest.Namespace() + "-cut", Transport: tr, Persistence: store,
				Dispatcher: bus.DispatcherConfig{Lease: time.Minute, BatchSize: 10, RetryBackoff: 200 * time.Millisecond, LookAhead: lookAhead}},
				func(b *bus.Bus) {
					_ = bus.Handle(b, func(ctx context.Context, m cutReminder) error {
						mu.Lock()
						defer mu.Unlock()
						if _, ok := arrived[m.N]; !ok {
							arrived[m.N] = time.Now()
						}
						return nil
					})
				})
			bus.Route[cutReminder](b, b.Endpoint())
			ctx := ctxTimeout(t, 2*time.Minute)
			due := time.Now().Add(2 * time.Second)
			for i := range n {
				if err := b.Send(ctx, cutReminder{N: i}, bus.DeliverAt(due)); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(time.Until(due) - 20*time.Millisecond)
			proxy.Cut()
			time.Sleep(3 * time.Second)
			proxy.Restore()
			// Well before the lease: the cut, a few backoffs and a loaded
			// machine fit in 20 s, a lease of 60 s does not.
			deadline := due.Add(20 * time.Second)
			for time.Now().Before(deadline) {
				mu.Lock()
				got := len(arrived)
				mu.Unlock()
				if got == n {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			mu.Lock()
			defer mu.Unlock()
			var late []int
			for i := range n {
				if _, ok := arrived[i]; !ok {
					late = append(late, i)
				}
			}
			if len(late) > 0 {
				rows, err := storePool.Query(ctx, `SELECT failures, available_at - now(), coalesce(lease_until - now(), '0'), count(*)::text FROM `+store.Table()+` GROUP BY 1,2,3`)
				for err == nil && rows.Next() {
					var f int
					var a, l time.Duration
					var c string
					_ = rows.Scan(&f, &a, &l, &c)
					t.Logf("%s rows with %d failures, claimable in %v, leased for %v", c, f, a, l)
				}
				if err == nil {
					rows.Close()
				}
				rows, err = storePool.Query(ctx, `SELECT deliveries, available_at - now(), count(*)::text FROM `+tr.MessagesTable()+` GROUP BY 1,2`)
				for err == nil && rows.Next() {
					var d int
					var a time.Duration
					var c string
					_ = rows.Scan(&d, &a, &c)
					t.Logf("%s transport rows delivered %d times, claimable in %v", c, d, a)
				}
				if err == nil {
					rows.Close()
				}
				t.Errorf("%d of %d messages had not arrived 20 s after they fell due (lease 60 s): %v", len(late), n, late)
			}
		})
	}
}
