package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/console"
)

// fakeRecurring records the actions of the schedules page; the browser
// test in cmd/postbus drives a real bus.
type fakeRecurring struct {
	mu      sync.Mutex
	infos   []bus.RecurringInfo // by name
	actions []string
	lists   int // ListRecurrings calls
}

func (f *fakeRecurring) ListRecurrings(_ context.Context, q bus.RecurringFilter) ([]bus.RecurringInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists++
	if q.Limit <= 0 || q.Limit > 1000 {
		return nil, fmt.Errorf("limit %d", q.Limit)
	}
	var out []bus.RecurringInfo
	for _, i := range f.infos {
		if strings.HasPrefix(i.Name, q.Prefix) && i.Name > q.After && len(out) < q.Limit {
			out = append(out, i)
		}
	}
	return out, nil
}

func (f *fakeRecurring) SetRecurring(_ context.Context, s bus.RecurringSpec) error {
	body, _ := json.Marshal(s.Message)
	return f.act(fmt.Sprintf("set %s %s %s %s publish=%v options=%d missed=%v", s.Name, s.Schedule, bus.MessageName(s.Message),
		body, s.Publish, len(s.Options), s.Missed))
}

func (f *fakeRecurring) PauseRecurring(_ context.Context, name string) error {
	return f.act("pause " + name)
}

func (f *fakeRecurring) ResumeRecurring(_ context.Context, name string) error {
	return f.act("resume " + name)
}

func (f *fakeRecurring) DeleteRecurring(_ context.Context, name string) error {
	return f.act("delete " + name)
}

func (f *fakeRecurring) act(a string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.actions = append(f.actions, a)
	if strings.HasSuffix(a, " missing") {
		return bus.ErrUnknownRecurring
	}
	return nil
}

func TestRecurringPage(t *testing.T) {
	t.Parallel()
	next := time.Date(2030, 1, 2, 3, 0, 0, 0, time.UTC)
	rec := &fakeRecurring{infos: []bus.RecurringInfo{
		{Name: "hourly-sync", Schedule: "every 1h0m0s", Next: next, Last: next.Add(-time.Hour), Declared: true},
		{Name: "old-<b>report</b>", Schedule: "0 2 * * *", Paused: true},
		{Name: "nightly", Schedule: "every 24h0m0s", Declared: true, Superseded: true},
		{Name: "invoices-acme", Schedule: "@every 24h", Runtime: true, Generation: 3, Skipped: 7, Next: next},
	}}
	f := newFixture(t, func(o *console.Options) { o.Recurring = rec })
	code, body := f.get(t, "/recurring")
	if code != http.StatusOK {
		t.Fatalf("GET /recurring: %d", code)
	}
	mustContain(t, body, "hourly-sync", "every 1h0m0s", "2030-01-02 03:00:00 UTC", "2030-01-02 02:00:00 UTC",
		"old-&lt;b&gt;report&lt;/b&gt;", "not declared here", "superseded: this process declares another definition", `/recurring/hourly-sync/pause"`, `/recurring/old-%3Cb%3Ereport%3C%2Fb%3E/resume"`,
		`<td class="kind">runtime</td>`, `<td class="kind">declared</td>`, `<td class="num">3</td>`, `<td class="num skipped">7</td>`,
		`/recurring/invoices-acme/delete"`, `/recurring/old-%3Cb%3Ereport%3C%2Fb%3E/delete"`, `id="create"`)
	// A schedule this bus declares is not offered for deletion: the bus
	// would refuse, and would store it again.
	if strings.Contains(body, "/recurring/hourly-sync/delete") {
		t.Error("the page offers to delete a schedule the bus declares")
	}
	if strings.Count(body, "runtime</td>") != 1 {
		t.Error("not exactly one runtime schedule shown")
	}
	// Each action goes back to the page it was on, and keeps only the
	// list's parameters.
	code, loc := f.post(t, "/recurring/invoices-acme/delete", url.Values{"back": {"?prefix=inv&after=a&evil=1"}})
	if code != http.StatusSeeOther || loc != "/recurring?after=a&prefix=inv&msg=schedule+invoices-acme+deleted" {
		t.Errorf("delete: %d %s", code, loc)
	}

	code, loc = f.post(t, "/recurring/hourly-sync/pause", url.Values{})
	if code != http.StatusSeeOther || !strings.Contains(loc, "schedule+hourly-sync+paused") {
		t.Fatalf("pause: %d %s", code, loc)
	}
	if _, loc = f.post(t, "/recurring/missing/resume", url.Values{}); !strings.Contains(loc, "error") {
		t.Errorf("resume of an unknown schedule: %s", loc)
	}
	// Without the token, nothing is done.
	if code, _ := f.postRaw(t, "/recurring/hourly-sync/resume", url.Values{}); code != http.StatusForbidden {
		t.Errorf("POST without CSRF: %d, want 403", code)
	}
	rec.mu.Lock()
	got := strings.Join(rec.actions, ", ")
	rec.mu.Unlock()
	if got != "delete invoices-acme, pause hourly-sync, resume missing" {
		t.Errorf("actions = %q", got)
	}
}

func TestRecurringPageReadOnly(t *testing.T) {
	t.Parallel()
	rec := &fakeRecurring{infos: []bus.RecurringInfo{{Name: "hourly-sync", Schedule: "every 1h0m0s"}}}
	f := newFixture(t, func(o *console.Options) { o.Recurring = rec; o.ReadOnly = true })
	_, body := f.get(t, "/recurring")
	if !strings.Contains(body, "hourly-sync") || strings.Contains(body, "/pause") || strings.Contains(body, "/delete") ||
		strings.Contains(body, `id="create"`) {
		t.Errorf("read-only page offers actions or lacks the schedule:\n%s", body)
	}
	if code, _ := f.postRaw(t, "/recurring/hourly-sync/pause", url.Values{}); code != http.StatusForbidden {
		t.Errorf("POST on a read-only console: %d, want 403", code)
	}
	if len(rec.actions) != 0 {
		t.Errorf("actions on a read-only console: %v", rec.actions)
	}
}

func TestRecurringPageWithoutRecurring(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	_, body := f.get(t, "/recurring")
	mustContain(t, body, "set up without them")
	if code, _ := f.post(t, "/recurring/x/pause", url.Values{}); code != http.StatusNotFound {
		t.Errorf("pause without Recurring: %d, want 404", code)
	}
}

// rowNames returns the names of the schedule rows of a page, in order.
func rowNames(body string) []string {
	var out []string
	for _, m := range rowRE.FindAllStringSubmatch(body, -1) {
		out = append(out, m[1])
	}
	return out
}

var rowRE = regexp.MustCompile(`<tr data-name="([^"]+)">`)

// link returns the href of the link with the id, unescaped, or "".
func link(body, id string) string {
	m := regexp.MustCompile(`id="` + id + `" href="([^"]+)"`).FindStringSubmatch(body)
	if m == nil {
		return ""
	}
	return html.UnescapeString(m[1])
}

// TestRecurringPaging pages 250 schedules by prefix, a hundred at a time,
// forward and back.
func TestRecurringPaging(t *testing.T) {
	t.Parallel()
	rec := &fakeRecurring{}
	var want []string
	for i := range 250 {
		want = append(want, fmt.Sprintf("t-%03d", i))
		rec.infos = append(rec.infos, bus.RecurringInfo{Name: want[i], Schedule: "@every 1h", Runtime: true})
	}
	rec.infos = append(rec.infos, bus.RecurringInfo{Name: "x-1", Schedule: "@every 1h"})
	f := newFixture(t, func(o *console.Options) { o.Recurring = rec })

	_, body := f.get(t, "/recurring?prefix=t-")
	if got := rowNames(body); strings.Join(got, ",") != strings.Join(want[:100], ",") {
		t.Fatalf("first page: %v", got)
	}
	if link(body, "prev") != "" || link(body, "first") != "" {
		t.Error("the first page links to a previous one")
	}
	next := link(body, "next")
	if next != "/recurring?prefix=t-&after=t-099" {
		t.Fatalf("next link %q", next)
	}
	_, body = f.get(t, next)
	if got := rowNames(body); strings.Join(got, ",") != strings.Join(want[100:200], ",") {
		t.Fatalf("second page: %v", got)
	}
	prev := link(body, "prev")
	if prev != "/recurring?prefix=t-&before=t-100" || link(body, "first") == "" {
		t.Fatalf("prev link %q", prev)
	}
	_, body = f.get(t, link(body, "next"))
	if got := rowNames(body); strings.Join(got, ",") != strings.Join(want[200:], ",") || link(body, "next") != "" {
		t.Fatalf("last page: %v, next %q", got, link(body, "next"))
	}
	// Back from the last page, then back to the first.
	_, body = f.get(t, link(body, "prev"))
	if got := rowNames(body); strings.Join(got, ",") != strings.Join(want[100:200], ",") {
		t.Fatalf("back to the second page: %v", got)
	}
	_, body = f.get(t, link(body, "prev"))
	if got := rowNames(body); strings.Join(got, ",") != strings.Join(want[:100], ",") || link(body, "prev") != "" {
		t.Fatalf("back to the first page: %v, prev %q", got, link(body, "prev"))
	}
	if link(body, "next") != "/recurring?prefix=t-&after=t-099" {
		t.Errorf("next from the page reached back: %q", link(body, "next"))
	}

	_, body = f.get(t, "/recurring?prefix=x-")
	if got := rowNames(body); strings.Join(got, ",") != "x-1" || link(body, "next") != "" {
		t.Errorf("prefix x-: %v", got)
	}
	mustContain(t, body, `id="prefix" name="prefix" value="x-"`)
	_, body = f.get(t, "/recurring?prefix=nothing")
	mustContain(t, body, "No recurring schedules whose names start with <code>nothing</code>")
}

// postPage submits a form with a CSRF token and returns the status and
// the page the console answered with.
func (f *fixture) postPage(t *testing.T, path string, form url.Values) (int, string, string) {
	t.Helper()
	_, page := f.get(t, "/recurring")
	m := csrfRE.FindStringSubmatch(page)
	if m == nil {
		t.Fatal("no CSRF token on the page")
	}
	form.Set("csrf", m[1])
	resp, err := f.client.PostForm(f.srv.URL+path, form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Location"), string(b)
}

// TestRecurringCreate makes schedules from the form: the bus gets the raw
// message, a refused form is shown again with its values and the reason.
func TestRecurringCreate(t *testing.T) {
	t.Parallel()
	rec := &fakeRecurring{}
	f := newFixture(t, func(o *console.Options) { o.Recurring = rec })
	code, loc, _ := f.postPage(t, "/recurring", url.Values{"name": {"invoices-acme"}, "schedule": {"@every 24h"},
		"type": {"billing.SendInvoices"}, "body": {`{"tenant": "acme"}`}, "to": {"billing"}, "missed": {"skip"}})
	if code != http.StatusSeeOther || loc != "/recurring?prefix=invoices-acme&msg=schedule+invoices-acme+set" {
		t.Fatalf("create: %d %s", code, loc)
	}
	f.postPage(t, "/recurring", url.Values{"name": {"tick"}, "schedule": {"@every 5m"}, "type": {"ops.Tick"}, "publish": {"1"}})
	for _, tc := range []struct {
		form url.Values
		want string
	}{
		{url.Values{"name": {"bad"}, "schedule": {"@every 1h"}, "type": {"T"}, "to": {"e"}, "body": {`{"tenant":`}}, "body: not valid JSON"},
		{url.Values{"name": {"bad"}, "schedule": {"@every 1h"}, "type": {"T"}}, "give a destination endpoint, or publish"},
		{url.Values{"name": {"bad"}, "schedule": {"@every 1h"}, "type": {"T"}, "to": {"e"}, "publish": {"1"}}, "not both"},
		{url.Values{"name": {"bad"}, "schedule": {"@every 1h"}, "to": {"e"}}, "message type: required"},
		{url.Values{"name": {"bad"}, "schedule": {"@every 1h"}, "type": {"T"}, "to": {"e"}, "missed": {"never"}}, "missed ticks"},
	} {
		code, _, body := f.postPage(t, "/recurring", tc.form)
		if code != http.StatusBadRequest || !strings.Contains(body, tc.want) || !strings.Contains(body, `name="name" value="bad"`) {
			t.Errorf("form %v: %d; want 400 with %q and the form kept", tc.form, code, tc.want)
		}
	}
	rec.mu.Lock()
	got := strings.Join(rec.actions, "\n")
	rec.mu.Unlock()
	want := "set invoices-acme @every 24h billing.SendInvoices {\"tenant\":\"acme\"} publish=false options=1 missed=skip\n" +
		"set tick @every 5m ops.Tick {} publish=true options=0 missed=once"
	if got != want {
		t.Errorf("calls:\n%s\nwant:\n%s", got, want)
	}
}

// TestRecurringCreateOnBus makes a schedule from the form on a real bus:
// its occurrences carry the type, body and destination of the form, and
// what the bus refuses is shown with the form.
func TestRecurringCreateOnBus(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := bus.NewMemoryPersistence()
	b, err := bus.New(bus.Config{Endpoint: "ops", Persistence: store, SendOnly: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Stop(ctx) }()
	f := newFixture(t, func(o *console.Options) { o.Recurring = b })
	code, _, _ := f.postPage(t, "/recurring", url.Values{"name": {"invoices-acme"}, "schedule": {"@every 1h"},
		"type": {"billing.SendInvoices"}, "body": {`{"tenant":"acme"}`}, "to": {"billing"}})
	if code != http.StatusSeeOther {
		t.Fatalf("create: %d", code)
	}
	recd, ok, err := store.LoadRecurring(ctx, "invoices-acme")
	if err != nil || !ok || recd.Spec == nil || len(recd.Ticks) == 0 {
		t.Fatalf("record %+v, %v, %v; want a runtime schedule with its ticks ahead", recd, ok, err)
	}
	m, ok, err := store.GetScheduled(ctx, bus.RecurringOccurrenceID("invoices-acme", recd.Ticks[0]))
	if err != nil || !ok {
		t.Fatalf("first occurrence not stored: %v", err)
	}
	env, err := bus.UnmarshalEnvelope(m.Envelope)
	if err != nil {
		t.Fatal(err)
	}
	if env.Type != "billing.SendInvoices" || string(env.Body) != `{"tenant":"acme"}` || env.Destination != "billing" || env.Kind != bus.KindCommand {
		t.Errorf("occurrence %+v body %s", env, env.Body)
	}
	_, body := f.get(t, "/recurring?prefix=invoices-")
	mustContain(t, body, `<tr data-name="invoices-acme">`, `<td class="kind">runtime</td>`, "@every 1h")

	code, _, body = f.postPage(t, "/recurring", url.Values{"name": {"cron-job"}, "schedule": {"0 9 * * *"},
		"type": {"T"}, "to": {"e"}})
	if code != http.StatusBadRequest || !strings.Contains(body, "Schedule: cannot parse") || !strings.Contains(body, `value="0 9 * * *"`) {
		t.Errorf("a schedule text the bus cannot parse: %d", code)
	}
	if _, ok, _ := store.LoadRecurring(ctx, "cron-job"); ok {
		t.Error("a refused schedule was stored")
	}
}
