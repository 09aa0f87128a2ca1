package console_test

import (
	"context"
	"net/http"
	"net/url"
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
	infos   []bus.RecurringInfo
	actions []string
}

func (f *fakeRecurring) Recurrings(context.Context) ([]bus.RecurringInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]bus.RecurringInfo(nil), f.infos...), nil
}

func (f *fakeRecurring) PauseRecurring(_ context.Context, name string) error {
	return f.act("pause " + name)
}

func (f *fakeRecurring) ResumeRecurring(_ context.Context, name string) error {
	return f.act("resume " + name)
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
	}}
	f := newFixture(t, func(o *console.Options) { o.Recurring = rec })
	code, body := f.get(t, "/recurring")
	if code != http.StatusOK {
		t.Fatalf("GET /recurring: %d", code)
	}
	mustContain(t, body, "hourly-sync", "every 1h0m0s", "2030-01-02 03:00:00 UTC", "2030-01-02 02:00:00 UTC",
		"old-&lt;b&gt;report&lt;/b&gt;", "not declared here", "superseded: this process declares another definition", `/recurring/hourly-sync/pause"`, `/recurring/old-%3Cb%3Ereport%3C%2Fb%3E/resume"`)

	code, loc := f.post(t, "/recurring/hourly-sync/pause", url.Values{})
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
	if got != "pause hourly-sync, resume missing" {
		t.Errorf("actions = %q", got)
	}
}

func TestRecurringPageReadOnly(t *testing.T) {
	t.Parallel()
	rec := &fakeRecurring{infos: []bus.RecurringInfo{{Name: "hourly-sync", Schedule: "every 1h0m0s"}}}
	f := newFixture(t, func(o *console.Options) { o.Recurring = rec; o.ReadOnly = true })
	_, body := f.get(t, "/recurring")
	if !strings.Contains(body, "hourly-sync") || strings.Contains(body, "/pause") {
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
