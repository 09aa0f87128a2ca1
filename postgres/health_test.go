package postgres_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/postgres"
)

type healthReminder struct{ N int }

func (healthReminder) MessageName() string { return "postgres_test.HealthReminder" }

// readyz asks h for /readyz and returns the status code, the names of the
// failed checks and the raw body.
func readyz(t *testing.T, h http.Handler) (int, []string, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	var body struct {
		Checks []struct {
			Name string `json:"name"`
			OK   bool   `json:"ok"`
		} `json:"checks"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("readyz: %d %q: %v", rec.Code, rec.Body.String(), err)
	}
	var failed []string
	for _, c := range body.Checks {
		if !c.OK {
			failed = append(failed, c.Name)
		}
	}
	return rec.Code, failed, rec.Body.String()
}

// With the database cut off from the bus (a fault proxy between them),
// /readyz answers 503 naming the store, without the connection string,
// and 200 again once the database is back.
func TestHealthReadyzFollowsTheDatabaseThroughACut(t *testing.T) {
	t.Parallel()
	pool, proxy := proxiedPool(t, 6)
	store := newStore(t, pool, postgres.Options{})
	b := bustest.StartBus(t, bus.Config{Endpoint: bustest.Namespace() + "-health", Persistence: store,
		Dispatcher: bus.DispatcherConfig{PollInterval: 100 * time.Millisecond}}, nil)
	h := bus.HealthHandler(b, bus.HealthOptions{Timeout: 3 * time.Second})
	if code, failed, raw := readyz(t, h); code != http.StatusOK {
		t.Fatalf("readyz with the database up: %d %v %s", code, failed, raw)
	}
	if r := b.Health(t.Context()); r.Store.Status != bus.Reachable {
		t.Fatalf("store %+v; want reachable", r.Store)
	}

	proxy.Cut()
	code, failed, raw := readyz(t, h)
	if code != http.StatusServiceUnavailable || !slices.Contains(failed, "store") || slices.Contains(failed, "transport") {
		t.Fatalf("readyz with the database cut off: %d failed %v; want 503 naming the store: %s", code, failed, raw)
	}
	for _, secret := range []string{"127.0.0.1", "postgres://", "user="} {
		if strings.Contains(raw, secret) {
			t.Fatalf("readyz shows %q: %s", secret, raw)
		}
	}
	if r := b.Health(t.Context()); r.Store.Status != bus.Unreachable || r.Store.Err == nil {
		t.Fatalf("store %+v; want unreachable with the ping's error", r.Store)
	}

	proxy.Restore()
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, failed, raw := readyz(t, h)
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("readyz 30 s after the database came back: %d %v %s", code, failed, raw)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The dispatch lag on PostgreSQL is measured on the database's clock: a
// row due a second ago that no dispatcher claims is a second late.
func TestHealthDispatchLagOnTheDatabaseClock(t *testing.T) {
	t.Parallel()
	store := newStore(t, newPool(t, 4), postgres.Options{})
	b := bustest.StartBus(t, bus.Config{Endpoint: bustest.Namespace() + "-lag", Persistence: store,
		Dispatcher: bus.DispatcherConfig{Disabled: true}}, func(b *bus.Bus) {
		_ = bus.Route[healthReminder](b, "elsewhere")
	})
	ctx := ctxTimeout(t, time.Minute)
	if err := b.Send(ctx, healthReminder{}, bus.DeliverAfter(500*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if r := b.Health(ctx); r.DispatchLag != 0 || r.DispatchLagErr != nil || r.Dispatching {
		t.Fatalf("not due yet: %+v", r)
	}
	time.Sleep(1500 * time.Millisecond)
	r := b.Health(ctx)
	// Due 1 s ago; the bound above is generous for a loaded machine.
	if r.DispatchLagErr != nil || r.DispatchLag < 900*time.Millisecond || r.DispatchLag > 30*time.Second {
		t.Fatalf("due a second ago: lag %v (%v)", r.DispatchLag, r.DispatchLagErr)
	}
}

// The PostgreSQL transport answers its ping through its pool, and fails it
// when the pool's database is cut off.
func TestTransportPingFollowsTheDatabase(t *testing.T) {
	t.Parallel()
	pool, proxy := proxiedPool(t, 4)
	tr := newTransport(t, pool, freshSchema(t, testPool(t)), postgres.TransportOptions{})
	ctx := ctxTimeout(t, time.Minute)
	if err := tr.Ping(ctx); err != nil {
		t.Fatalf("ping with the database up: %v", err)
	}
	proxy.Cut()
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := tr.Ping(pctx); err == nil {
		t.Fatal("ping with the database cut off succeeded")
	}
	proxy.Restore()
	waitFor(t, func() bool { return tr.Ping(ctx) == nil })
}
