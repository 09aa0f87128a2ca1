package console_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/console"
)

// fixture is a console over a memory persistence with scheduled rows and
// failures of two groups.
type fixture struct {
	store  *bus.MemoryPersistence
	tr     *bus.MemoryTransport
	srv    *httptest.Server
	client *http.Client
	now    time.Time
}

func envBytes(id, typ string, body string, due time.Time) []byte {
	return bus.MarshalEnvelope(&bus.Envelope{ID: id, Type: typ, Kind: bus.KindCommand, Body: []byte(body),
		ContentType: "application/json", Destination: "billing", DueAt: due, Headers: map[string]string{"tenant": "acme"}})
}

func failedEnv(id, typ, reason string, at time.Time) *bus.Envelope {
	return &bus.Envelope{ID: id, Type: typ, Kind: bus.KindCommand, Body: []byte(`{"n":1}`), Headers: map[string]string{
		bus.HeaderFailureReason: reason, bus.HeaderFailureEndpoint: "billing", bus.HeaderFailureQueue: "billing",
		bus.HeaderFailureKind: "handler", bus.HeaderFailureAttempts: "5", bus.HeaderFailureTime: at.Format(time.RFC3339Nano),
	}}
}

func newFixture(t *testing.T, mod func(*console.Options)) *fixture {
	t.Helper()
	ctx := context.Background()
	now := time.Now().UTC()
	f := &fixture{store: bus.NewMemoryPersistence(), tr: bus.NewMemoryTransport(), now: now}
	var rows []bus.OutgoingMessage
	for i := range 20 {
		due := now.Add(time.Duration(i*4) * time.Minute)
		if i == 0 {
			due = now.Add(-3 * time.Minute) // overdue
		}
		id := fmt.Sprintf("sched-%02d", i)
		rows = append(rows, bus.OutgoingMessage{ID: id, Type: "PlaceOrder", Kind: bus.KindCommand, DueAt: due,
			Envelope: envBytes(id, "PlaceOrder", `{"order":`+fmt.Sprint(i)+`}`, due)})
	}
	rows = append(rows, bus.OutgoingMessage{ID: "xss", Type: "Evil", Kind: bus.KindCommand, DueAt: now.Add(time.Hour),
		Envelope: envBytes("xss", "Evil", `<script>alert(1)</script>`, now.Add(time.Hour))})
	if err := f.store.StoreOutgoing(ctx, rows); err != nil {
		t.Fatal(err)
	}
	var failed []bus.FailedMessage
	for i := range 30 {
		failed = append(failed, bus.FailedFromEnvelope(failedEnv(fmt.Sprintf("fail-a-%02d", i), "ChargeCard", fmt.Sprintf("card %d declined", i), now.Add(-time.Duration(i)*time.Second)), now))
	}
	for i := range 3 {
		failed = append(failed, bus.FailedFromEnvelope(failedEnv(fmt.Sprintf("fail-b-%d", i), "ShipOrder", "timeout", now), now))
	}
	if err := f.store.StoreFailed(ctx, failed); err != nil {
		t.Fatal(err)
	}
	opts := console.Options{Scheduled: f.store, Failed: f.store, Transport: f.tr,
		Metrics: func() bus.Metrics {
			return bus.Metrics{Sent: 7, Dispatched: 3, LatenessP50: 12 * time.Millisecond, LatenessP99: 2 * time.Second}
		}}
	if mod != nil {
		mod(&opts)
	}
	h, err := console.Handler(opts)
	if err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(h)
	t.Cleanup(f.srv.Close)
	jar, _ := cookiejar.New(nil)
	f.client = &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return f
}

func (f *fixture) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := f.client.Get(f.srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// post submits a form with the CSRF token of a page fetched first.
func (f *fixture) post(t *testing.T, path string, form url.Values) (int, string) {
	t.Helper()
	_, page := f.get(t, "/scheduled")
	m := csrfRE.FindStringSubmatch(page)
	if m == nil {
		t.Fatal("no CSRF token on the page")
	}
	form.Set("csrf", m[1])
	return f.postRaw(t, path, form)
}

func (f *fixture) postRaw(t *testing.T, path string, form url.Values) (int, string) {
	t.Helper()
	resp, err := f.client.PostForm(f.srv.URL+path, form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	loc := resp.Header.Get("Location")
	return resp.StatusCode, loc
}

func mustContain(t *testing.T, body string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(body, w) {
			t.Errorf("page lacks %q", w)
		}
	}
}

func TestOverview(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	code, body := f.get(t, "/")
	if code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	mustContain(t, body, `id="backlog">21<`, `id="overdue">1<`, `id="failed-total">33<`, "<svg", "Due in the next hour", "Due in the next day",
		"ChargeCard", "card &lt;n&gt; declined", "ShipOrder", `<td class="num">7</td>`, "12ms / 2s")
	// 30 of group A come before 3 of group B: largest first.
	if strings.Index(body, "ChargeCard") > strings.Index(body, "ShipOrder") {
		t.Error("groups are not largest first")
	}
}

func TestScheduledPages(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	_, body := f.get(t, "/scheduled")
	mustContain(t, body, "sched-00", "sched-19", "overdue", "send now", "cancel")
	_, body = f.get(t, "/scheduled?type=Evil")
	if strings.Contains(body, "sched-01") || !strings.Contains(body, ">xss<") {
		t.Error("type filter not applied")
	}
	_, body = f.get(t, "/scheduled?id=sched-07")
	if !strings.Contains(body, "sched-07") || strings.Contains(body, "sched-08") {
		t.Error("search by ID not applied")
	}
	_, body = f.get(t, "/scheduled?id=nope")
	mustContain(t, body, `id="not-found"`)
	code, body := f.get(t, "/scheduled/sched-03")
	if code != http.StatusOK {
		t.Fatalf("detail status %d", code)
	}
	mustContain(t, body, "PlaceOrder", "tenant", "acme", `{&#34;order&#34;:3}`)
	if code, _ := f.get(t, "/scheduled/missing"); code != http.StatusNotFound {
		t.Errorf("missing row: status %d, want 404", code)
	}
}

func TestScheduledPaging(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	ctx := context.Background()
	var rows []bus.OutgoingMessage
	for i := range 60 {
		id := fmt.Sprintf("page-%02d", i)
		due := f.now.Add(48*time.Hour + time.Duration(i)*time.Second)
		rows = append(rows, bus.OutgoingMessage{ID: id, Type: "Page", DueAt: due, Envelope: envBytes(id, "Page", "{}", due)})
	}
	if err := f.store.StoreOutgoing(ctx, rows); err != nil {
		t.Fatal(err)
	}
	_, body := f.get(t, "/scheduled?type=Page")
	m := regexp.MustCompile(`id="next" href="([^"]+)"`).FindStringSubmatch(body)
	if m == nil || strings.Contains(body, "page-50") {
		t.Fatal("first page: no next link, or too many rows")
	}
	_, body = f.get(t, strings.ReplaceAll(m[1], "&amp;", "&"))
	mustContain(t, body, "page-50", "page-59")
	if strings.Contains(body, "page-49") || strings.Contains(body, `id="next"`) {
		t.Error("second page repeats rows or links further")
	}
}

func TestScheduledActions(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	ctx := context.Background()
	code, loc := f.post(t, "/scheduled/sched-05/cancel", url.Values{})
	if code != http.StatusSeeOther || !strings.Contains(loc, "cancelled") {
		t.Fatalf("cancel: %d %s", code, loc)
	}
	if _, ok, _ := f.store.GetScheduled(ctx, "sched-05"); ok {
		t.Error("row still scheduled after cancel")
	}
	code, loc = f.post(t, "/scheduled/sched-06/send-now", url.Values{})
	if code != http.StatusSeeOther || !strings.Contains(loc, "due+now") {
		t.Fatalf("send now: %d %s", code, loc)
	}
	m, ok, _ := f.store.GetScheduled(ctx, "sched-06")
	if !ok || m.DueAt.After(time.Now()) {
		t.Errorf("send now: row %v due %v", ok, m.DueAt)
	}
	_, loc = f.post(t, "/scheduled/missing/cancel", url.Values{})
	if !strings.Contains(loc, "not+cancelled") {
		t.Errorf("cancel of a missing row: %s", loc)
	}
}

func TestFailedPages(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	_, body := f.get(t, "/failed")
	mustContain(t, body, `id="count">33<`, "fail-a-00", "ShipOrder", "retry all 33")
	g := bus.FailureGroup("ShipOrder", "billing", "timeout")
	_, body = f.get(t, "/failed?group="+g)
	mustContain(t, body, `id="count">3<`, "fail-b-0")
	if strings.Contains(body, `href="/failed/fail-a-00"`) {
		t.Error("group filter not applied")
	}
	_, body = f.get(t, "/failed?id=fail-a-07")
	mustContain(t, body, `id="count">1<`, "fail-a-07")
	code, body := f.get(t, "/failed/fail-a-02")
	if code != http.StatusOK {
		t.Fatalf("detail: %d", code)
	}
	mustContain(t, body, "card 2 declined", bus.HeaderFailureReason, "billing", `{&#34;n&#34;:1}`)
	if code, _ := f.get(t, "/failed/missing"); code != http.StatusNotFound {
		t.Errorf("missing: %d", code)
	}
}

func TestFailedActions(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	ctx := context.Background()
	count := func(q bus.FailedQuery) int64 {
		n, err := f.store.CountFailed(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// One message.
	if code, loc := f.post(t, "/failed/delete", url.Values{"id": {"fail-a-00"}}); code != http.StatusSeeOther || !strings.Contains(loc, "deleted+1+of+1") {
		t.Fatalf("delete one: %d %s", code, loc)
	}
	// A group, retried: each message sent back to its queue once.
	got := make(chan string, 10)
	recv, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = f.tr.Receive(recv, "billing", bus.ReceiveOptions{Concurrency: 1}, func(_ context.Context, env *bus.Envelope) error {
			if env.Header(bus.HeaderFailureReason) != "" {
				t.Error("a retried message kept its failure headers")
			}
			got <- env.ID
			return nil
		})
	}()
	defer func() { stop(); <-done }()
	g := bus.FailureGroup("ShipOrder", "billing", "timeout")
	if _, loc := f.post(t, "/failed/retry", url.Values{"group": {g}}); !strings.Contains(loc, "retried+3+of+3") {
		t.Fatalf("retry group: %s", loc)
	}
	if n := count(bus.FailedQuery{Group: g}); n != 0 {
		t.Errorf("group still has %d", n)
	}
	// One message, retried.
	if _, loc := f.post(t, "/failed/retry", url.Values{"id": {"fail-a-01"}}); !strings.Contains(loc, "retried+1+of+1") {
		t.Fatalf("retry one: %s", loc)
	}
	// Everything matching a filter.
	if _, loc := f.post(t, "/failed/delete", url.Values{"all": {"1"}, "type": {"ChargeCard"}}); !strings.Contains(loc, "deleted+28+of+28") {
		t.Fatalf("delete all: %s", loc)
	}
	if n := count(bus.FailedQuery{}); n != 0 {
		t.Errorf("%d left", n)
	}
	seen := map[string]int{}
	for range 4 {
		select {
		case id := <-got:
			seen[id]++
		case <-time.After(10 * time.Second):
			t.Fatalf("retried messages received: %v, want 4", seen)
		}
	}
	for id, n := range seen {
		if n != 1 || !(strings.HasPrefix(id, "fail-b-") || id == "fail-a-01") {
			t.Errorf("received %s %d times", id, n)
		}
	}
	// Neither ids, group nor all: a bad request.
	if code, _ := f.post(t, "/failed/delete", url.Values{}); code != http.StatusBadRequest {
		t.Errorf("empty action: %d", code)
	}
}

func TestRetryNeedsTransport(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(o *console.Options) { o.Transport = nil })
	_, body := f.get(t, "/failed")
	if strings.Contains(body, "/failed/retry") {
		t.Error("retry offered without a transport")
	}
	if code, _ := f.post(t, "/failed/retry", url.Values{"id": {"fail-a-01"}}); code != http.StatusConflict {
		t.Errorf("retry without transport: %d", code)
	}
}

func TestHandlerOptions(t *testing.T) {
	t.Parallel()
	if _, err := console.Handler(console.Options{}); err == nil {
		t.Fatal("no stores: no error")
	}
}

func TestOptionalRefresh(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	_, body := f.get(t, "/?refresh=10")
	mustContain(t, body, `<meta http-equiv="refresh" content="10">`, "stop refreshing")
	if _, body := f.get(t, "/?refresh=1"); strings.Contains(body, "http-equiv") {
		t.Error("a refresh under 5 s is honoured")
	}
}
