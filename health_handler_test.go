package bus_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
)

// probeBody is the JSON a probe answers with.
type probeBody struct {
	Status string `json:"status"`
	Checks []struct {
		Name   string `json:"name"`
		OK     bool   `json:"ok"`
		Detail string `json:"detail"`
	} `json:"checks"`
	DispatchLagSeconds  *float64 `json:"dispatch_lag_seconds"`
	RecurringLagSeconds *float64 `json:"recurring_lag_seconds"`
	LastClaim           string   `json:"last_claim"`
}

// failed returns the names of the checks that failed.
func (p probeBody) failed() []string {
	var out []string
	for _, c := range p.Checks {
		if !c.OK {
			out = append(out, c.Name)
		}
	}
	return out
}

// probe requests path from h and decodes the answer.
func probe(t *testing.T, h http.Handler, path string) (int, probeBody, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	var body probeBody
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("%s: %d %q: %v", path, rec.Code, rec.Body.String(), err)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%s: Content-Type %q", path, ct)
	}
	if (rec.Code == http.StatusOK) != (body.Status == "ok") {
		t.Fatalf("%s: code %d with status %q", path, rec.Code, body.Status)
	}
	return rec.Code, body, rec.Body.String()
}

// livez answers 200 until the bus is stopped; readyz only while it is
// started.
func TestHealthHandlerFollowsTheBusState(t *testing.T) {
	t.Parallel()
	b := newHealthBus(t, bus.Config{})
	h := bus.HealthHandler(b, bus.HealthOptions{})
	if code, _, raw := probe(t, h, "/livez"); code != http.StatusOK {
		t.Fatalf("livez before Start: %d %s", code, raw)
	}
	if code, body, raw := probe(t, h, "/readyz"); code != http.StatusServiceUnavailable || strings.Join(body.failed(), ",") != "started" {
		t.Fatalf("readyz before Start: %d %s; want 503 failing started only", code, raw)
	}
	if err := b.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	code, body, raw := probe(t, h, "/readyz")
	if code != http.StatusOK || len(body.Checks) != 5 || body.DispatchLagSeconds == nil || body.RecurringLagSeconds == nil {
		t.Fatalf("readyz started: %d %s", code, raw)
	}
	if code, _, raw := probe(t, h, "/health/livez"); code != http.StatusOK {
		t.Fatalf("livez under a prefix: %d %s", code, raw)
	}
	if err := b.Stop(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if code, _, raw := probe(t, h, "/livez"); code != http.StatusServiceUnavailable {
		t.Fatalf("livez after Stop: %d %s", code, raw)
	}
	if code, _, raw := probe(t, h, "/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("readyz after Stop: %d %s", code, raw)
	}
}

// readyz fails on a dispatch lag above MaxDispatchLag, passes below it
// and when the check is disabled.
func TestHealthHandlerDispatchLagThreshold(t *testing.T) {
	t.Parallel()
	clock := bustest.NewFakeClock(healthT0)
	b := newHealthBus(t, bus.Config{Clock: clock, Persistence: stuckClaims{bus.NewMemoryPersistence()}})
	if err := bus.Route[healthPing](b, "elsewhere"); err != nil {
		t.Fatal(err)
	}
	if err := b.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := b.Send(ctxT(t), healthPing{}, bus.DeliverAt(healthT0.Add(time.Second))); err != nil {
		t.Fatal(err)
	}
	clock.Advance(91 * time.Second) // due 90 s ago
	code, body, raw := probe(t, bus.HealthHandler(b, bus.HealthOptions{}), "/readyz")
	if code != http.StatusServiceUnavailable || strings.Join(body.failed(), ",") != "dispatch_lag" ||
		body.DispatchLagSeconds == nil || *body.DispatchLagSeconds != 90 {
		t.Fatalf("90 s behind, default threshold of a minute: %d %s", code, raw)
	}
	if code, _, raw := probe(t, bus.HealthHandler(b, bus.HealthOptions{MaxDispatchLag: 2 * time.Minute}), "/readyz"); code != http.StatusOK {
		t.Fatalf("90 s behind, threshold 2m: %d %s", code, raw)
	}
	if code, _, raw := probe(t, bus.HealthHandler(b, bus.HealthOptions{MaxDispatchLag: -1}), "/readyz"); code != http.StatusOK {
		t.Fatalf("90 s behind, check disabled: %d %s", code, raw)
	}
	if code, _, raw := probe(t, bus.HealthHandler(b, bus.HealthOptions{}), "/livez"); code != http.StatusOK {
		t.Fatalf("livez does not judge the lag: %d %s", code, raw)
	}
}

// readyz fails on a recurring lag above MaxRecurringLag.
func TestHealthHandlerRecurringLagThreshold(t *testing.T) {
	t.Parallel()
	clock := bustest.NewFakeClock(healthT0)
	store := &refusingSteps{MemoryPersistence: bus.NewMemoryPersistence()}
	b := newHealthBus(t, bus.Config{Clock: clock, Persistence: store, Dispatcher: bus.DispatcherConfig{Disabled: true}})
	err := b.AddRecurring(bus.Recurring{Name: "minutely", Schedule: bus.Every(time.Minute),
		Message: func(time.Time) any { return healthPing{} }, Options: []bus.Option{bus.To("elsewhere")}})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	store.refuse.Store(true)
	clock.Advance(5 * time.Minute) // the 12:03 tick passed 2m30s ago unstored
	code, body, raw := probe(t, bus.HealthHandler(b, bus.HealthOptions{}), "/readyz")
	if code != http.StatusServiceUnavailable || strings.Join(body.failed(), ",") != "recurring_lag" ||
		body.RecurringLagSeconds == nil || *body.RecurringLagSeconds != 150 {
		t.Fatalf("2m30s behind, default threshold: %d %s", code, raw)
	}
	if code, _, raw := probe(t, bus.HealthHandler(b, bus.HealthOptions{MaxRecurringLag: 5 * time.Minute}), "/readyz"); code != http.StatusOK {
		t.Fatalf("2m30s behind, threshold 5m: %d %s", code, raw)
	}
}

// A backend that does not answer its ping fails readyz, and the answer
// shows none of its error's text (an address, a user, a password).
func TestHealthHandlerShowsNoSecrets(t *testing.T) {
	t.Parallel()
	b := newHealthBus(t, bus.Config{Transport: failingPing{bus.NewMemoryTransport()}})
	if err := b.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	code, body, raw := probe(t, bus.HealthHandler(b, bus.HealthOptions{}), "/readyz")
	if code != http.StatusServiceUnavailable || strings.Join(body.failed(), ",") != "transport" {
		t.Fatalf("transport down: %d %s", code, raw)
	}
	for _, secret := range []string{"s3cret", "admin", "db.internal", "postgres://", "refused"} {
		if strings.Contains(raw, secret) {
			t.Fatalf("readyz shows %q: %s", secret, raw)
		}
	}
}

// A check that outlives HealthOptions.Timeout fails readyz in time.
func TestHealthHandlerTimesOutASlowPing(t *testing.T) {
	t.Parallel()
	b := newHealthBus(t, bus.Config{Transport: hangingPing{bus.NewMemoryTransport()}})
	if err := b.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	code, body, raw := probe(t, bus.HealthHandler(b, bus.HealthOptions{Timeout: 50 * time.Millisecond}), "/readyz")
	if code != http.StatusServiceUnavailable || strings.Join(body.failed(), ",") != "transport" || !strings.Contains(raw, "no answer in time") {
		t.Fatalf("transport hangs: %d %s", code, raw)
	}
	if took := time.Since(began); took > 10*time.Second {
		t.Fatalf("readyz took %v with a timeout of 50ms", took)
	}
}

// Other paths are not found; other methods are not allowed; HEAD has the
// status without a body.
func TestHealthHandlerRoutes(t *testing.T) {
	t.Parallel()
	h := bus.HealthHandler(newHealthBus(t, bus.Config{}), bus.HealthOptions{})
	for _, c := range []struct {
		method, path string
		code         int
	}{
		{http.MethodGet, "/", http.StatusNotFound},
		{http.MethodGet, "/healthz", http.StatusNotFound},
		{http.MethodPost, "/livez", http.StatusMethodNotAllowed},
		{http.MethodHead, "/livez", http.StatusOK},
		{http.MethodHead, "/readyz", http.StatusServiceUnavailable},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(c.method, c.path, nil))
		if rec.Code != c.code || c.method == http.MethodHead && rec.Body.Len() != 0 {
			t.Errorf("%s %s: %d %q; want %d", c.method, c.path, rec.Code, rec.Body.String(), c.code)
		}
	}
}

// hangingPing is a memory transport whose Ping waits for its ctx.
type hangingPing struct{ *bus.MemoryTransport }

func (hangingPing) Ping(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}
