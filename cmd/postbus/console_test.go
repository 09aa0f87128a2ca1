package main

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/postbus/bus"
	"github.com/postbus/bus/console"
)

var csrfRE = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// consoleClient drives a console served by httptest like a browser with
// JavaScript off: cookies kept, redirects not followed.
type consoleClient struct {
	t   *testing.T
	srv *httptest.Server
	c   *http.Client
}

func newConsoleClient(t *testing.T, h http.Handler) *consoleClient {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	jar, _ := cookiejar.New(nil)
	return &consoleClient{t, srv, &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (cc *consoleClient) get(path string) (int, string) {
	cc.t.Helper()
	resp, err := cc.c.Get(cc.srv.URL + path)
	if err != nil {
		cc.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (cc *consoleClient) post(path string, form url.Values) (int, string) {
	cc.t.Helper()
	_, page := cc.get("/scheduled")
	if m := csrfRE.FindStringSubmatch(page); m != nil {
		form.Set("csrf", m[1])
	}
	resp, err := cc.c.PostForm(cc.srv.URL+path, form)
	if err != nil {
		cc.t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Location")
}

// Every page and action of the console against PostgreSQL.
func TestConsolePostgres(t *testing.T) {
	t.Parallel()
	p, _ := postgresFixture(t)
	ctx := context.Background()
	tr := bus.NewMemoryTransport()
	h, err := console.Handler(console.Options{Scheduled: p, Failed: p, Transport: tr, Now: fixedNow})
	if err != nil {
		t.Fatal(err)
	}
	cc := newConsoleClient(t, h)
	pages := map[string][]string{
		"/":                               {`id="backlog">5<`, `id="failed-total">5<`, "<svg", "billing.ChargeCard", "card &lt;n&gt; declined"},
		"/scheduled":                      {"0190f5d6-0000-7000-8000-000000000000", "orders.Reminder"},
		"/scheduled?type=orders.Reminder": {"0190f5d6-0000-7000-8000-000000000003"},
		"/scheduled?id=0190f5d6-0000-7000-8000-000000000002": {"0190f5d6-0000-7000-8000-000000000002"},
		"/scheduled/0190f5d6-0000-7000-8000-000000000001":    {"tenant", "{&#34;order&#34;:&#34;o-1&#34;}"},
		"/failed":                     {`id="count">5<`, "timeout after &lt;n&gt;s"},
		"/failed?type=billing.Refund": {`id="count">1<`},
		"/failed/0190f5d6-0000-7000-9000-000000000001": {"card 1001 declined", bus.HeaderFailureQueue},
	}
	for path, wants := range pages {
		code, body := cc.get(path)
		if code != http.StatusOK {
			t.Errorf("GET %s: %d", path, code)
		}
		for _, w := range wants {
			if !strings.Contains(body, w) {
				t.Errorf("GET %s lacks %q", path, w)
			}
		}
	}
	if _, body := cc.get("/scheduled?type=orders.Reminder"); strings.Contains(body, "0190f5d6-0000-7000-8000-000000000002") {
		t.Error("type filter not applied")
	}

	if _, loc := cc.post("/scheduled/0190f5d6-0000-7000-8000-000000000000/cancel", url.Values{}); !strings.Contains(loc, "cancelled") {
		t.Errorf("cancel: %s", loc)
	}
	if _, ok, _ := p.GetScheduled(ctx, "0190f5d6-0000-7000-8000-000000000000"); ok {
		t.Error("cancel left the row")
	}
	if _, loc := cc.post("/scheduled/0190f5d6-0000-7000-8000-000000000001/send-now", url.Values{}); !strings.Contains(loc, "due+now") {
		t.Errorf("send now: %s", loc)
	}
	group := bus.FailureGroup("billing.ChargeCard", "billing", "card 1 declined")
	if _, loc := cc.post("/failed/retry", url.Values{"group": {group}}); !strings.Contains(loc, "retried+4+of+4") {
		t.Errorf("retry group: %s", loc)
	}
	if _, loc := cc.post("/failed/delete", url.Values{"id": {"0190f5d6-0000-7000-9000-000000000009"}}); !strings.Contains(loc, "deleted+1+of+1") {
		t.Errorf("delete one: %s", loc)
	}
	if n, _ := p.CountFailed(ctx, bus.FailedQuery{}); n != 0 {
		t.Errorf("%d failed messages left", n)
	}
	// The retried messages wait in their queue: drain them, once each.
	got := map[string]int{}
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = tr.Receive(rctx, "billing", bus.ReceiveOptions{Concurrency: 1}, func(_ context.Context, env *bus.Envelope) error {
			got[env.ID]++
			if len(got) == 4 {
				stop()
			}
			return nil
		})
	}()
	<-done
	if len(got) != 4 {
		t.Errorf("received %v", got)
	}
}
