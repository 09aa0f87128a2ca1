package console_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/postbus/bus"
	"github.com/postbus/bus/console"
)

func TestBodyIsEscaped(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	ctx := context.Background()
	env := failedEnv("evil-failed", "Evil", `<img src=x onerror=alert(1)> "reason"`, f.now)
	env.Body = []byte(`<script>alert("pwned")</script>`)
	env.Headers["x-note"] = `<b>bold</b>`
	if err := f.store.StoreFailed(ctx, []bus.FailedMessage{bus.FailedFromEnvelope(env, f.now)}); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/scheduled/xss", "/failed/evil-failed", "/failed", "/"} {
		_, body := f.get(t, path)
		for _, bad := range []string{"<script>alert", "<img src=x", "<b>bold</b>"} {
			if strings.Contains(body, bad) {
				t.Errorf("%s renders %q unescaped", path, bad)
			}
		}
	}
	_, body := f.get(t, "/scheduled/xss")
	mustContain(t, body, "&lt;script&gt;alert(1)&lt;/script&gt;")
	_, body = f.get(t, "/failed/evil-failed")
	mustContain(t, body, "&lt;script&gt;alert(&#34;pwned&#34;)&lt;/script&gt;", "&lt;b&gt;bold&lt;/b&gt;")
}

// serve runs one request through the handler with the given client address
// and Host.
func serve(t *testing.T, h http.Handler, method, target, remote, host string) int {
	t.Helper()
	r := httptest.NewRequest(method, target, nil)
	r.RemoteAddr, r.Host = remote, host
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code
}

func TestLoopbackOnlyWithoutAuthorize(t *testing.T) {
	t.Parallel()
	store := bus.NewMemoryPersistence()
	h, err := console.Handler(console.Options{Scheduled: store, Failed: store})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		remote, host string
		want         int
	}{
		{"127.0.0.1:5000", "127.0.0.1:8080", http.StatusOK},
		{"[::1]:5000", "[::1]:8080", http.StatusOK},
		{"127.0.0.1:5000", "localhost:8080", http.StatusOK},
		{"192.0.2.7:5000", "127.0.0.1:8080", http.StatusForbidden},      // a remote client
		{"10.0.0.2:5000", "console.example:8080", http.StatusForbidden}, // a remote client
		{"127.0.0.1:5000", "evil.example:8080", http.StatusForbidden},   // forged Host (DNS rebinding)
		{"127.0.0.1:5000", "127.0.0.1.evil.example", http.StatusForbidden},
		{"127.0.0.1:5000", "", http.StatusForbidden},
	}
	for _, c := range cases {
		if got := serve(t, h, http.MethodGet, "/", c.remote, c.host); got != c.want {
			t.Errorf("from %s to Host %q: %d, want %d", c.remote, c.host, got, c.want)
		}
	}
}

func TestAuthorizeDecides(t *testing.T) {
	t.Parallel()
	store := bus.NewMemoryPersistence()
	h, err := console.Handler(console.Options{Scheduled: store, Failed: store,
		Authorize: func(r *http.Request) bool { return r.Header.Get("X-User") == "ops" }})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr, r.Host = "192.0.2.7:5000", "console.example"
	r.Header.Set("X-User", "ops")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusOK {
		t.Errorf("authorized remote request: %d", w.Code)
	}
	if got := serve(t, h, http.MethodGet, "/", "127.0.0.1:1", "127.0.0.1"); got != http.StatusForbidden {
		t.Errorf("unauthorized loopback request: %d, want 403 (Authorize decides alone)", got)
	}
}

func TestPostWithoutCSRFIsRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	ctx := context.Background()
	f.get(t, "/") // sets the cookie
	for _, form := range []url.Values{{}, {"csrf": {"00ff"}}} {
		form.Set("id", "fail-a-01")
		if code, _ := f.postRaw(t, "/failed/delete", form); code != http.StatusForbidden {
			t.Errorf("delete with token %q: %d, want 403", form.Get("csrf"), code)
		}
		if code, _ := f.postRaw(t, "/scheduled/sched-01/cancel", form); code != http.StatusForbidden {
			t.Errorf("cancel with token %q: %d, want 403", form.Get("csrf"), code)
		}
	}
	// A token from another browser's cookie does not fit this one's.
	other := newFixture(t, nil)
	_, page := other.get(t, "/scheduled")
	tok := csrfRE.FindStringSubmatch(page)[1]
	if code, _ := f.postRaw(t, "/scheduled/sched-01/cancel", url.Values{"csrf": {tok}}); code != http.StatusForbidden {
		t.Errorf("foreign token: %d", code)
	}
	if _, ok, _ := f.store.GetScheduled(ctx, "sched-01"); !ok {
		t.Error("a refused cancel removed the row")
	}
	if n, _ := f.store.CountFailed(ctx, bus.FailedQuery{}); n != 33 {
		t.Errorf("a refused delete changed the store: %d", n)
	}
}

func TestReadOnlyRefusesEveryPost(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(o *console.Options) { o.ReadOnly = true })
	ctx := context.Background()
	for _, path := range []string{"/", "/scheduled", "/failed", "/scheduled/sched-01", "/failed/fail-a-01"} {
		code, body := f.get(t, path)
		if code != http.StatusOK {
			t.Errorf("%s: %d", path, code)
		}
		if strings.Contains(body, "<form class=\"inline\" method=\"post\"") || strings.Contains(body, `name="csrf"`) {
			t.Errorf("%s shows an action in read-only mode", path)
		}
	}
	for _, path := range []string{"/scheduled/sched-01/cancel", "/scheduled/sched-01/send-now", "/failed/retry", "/failed/delete"} {
		if code, _ := f.postRaw(t, path, url.Values{"id": {"fail-a-01"}, "all": {"1"}}); code != http.StatusForbidden {
			t.Errorf("POST %s: %d, want 403", path, code)
		}
	}
	if _, ok, _ := f.store.GetScheduled(ctx, "sched-01"); !ok {
		t.Error("read-only console cancelled a row")
	}
	if n, _ := f.store.CountFailed(ctx, bus.FailedQuery{}); n != 33 {
		t.Errorf("read-only console changed failures: %d", n)
	}
}

func TestOtherMethodsRefused(t *testing.T) {
	t.Parallel()
	store := bus.NewMemoryPersistence()
	h, _ := console.Handler(console.Options{Scheduled: store})
	for _, m := range []string{http.MethodPut, http.MethodDelete, http.MethodPatch} {
		if got := serve(t, h, m, "/failed/delete", "127.0.0.1:1", "127.0.0.1"); got != http.StatusMethodNotAllowed {
			t.Errorf("%s: %d", m, got)
		}
	}
}

func TestMountedUnderPrefix(t *testing.T) {
	t.Parallel()
	store := bus.NewMemoryPersistence()
	h, _ := console.Handler(console.Options{Scheduled: store, Failed: store})
	mux := http.NewServeMux()
	mux.Handle("/ops/", http.StripPrefix("/ops", h))
	r := httptest.NewRequest(http.MethodGet, "/ops/", nil)
	r.RemoteAddr, r.Host = "127.0.0.1:1", "127.0.0.1"
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, r)
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `href="/ops/scheduled"`) {
		t.Errorf("mounted: %d, links not prefixed", w.Code)
	}
}

func TestOnlyOneStore(t *testing.T) {
	t.Parallel()
	store := bus.NewMemoryPersistence()
	for _, o := range []console.Options{{Scheduled: store}, {Failed: store}} {
		h, err := console.Handler(o)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"/", "/scheduled", "/failed"} {
			if got := serve(t, h, http.MethodGet, p, "127.0.0.1:1", "127.0.0.1"); got != http.StatusOK {
				t.Errorf("%+v %s: %d", o.Scheduled != nil, p, got)
			}
		}
	}
}
