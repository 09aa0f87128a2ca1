package console_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/console"
)

// secret is a password no page, redirect or log line of the console may
// show.
const secret = "S3cretPw-XYZ"

// errEcho is what some client libraries return: an error that quotes the
// connection URL, password included.
var errEcho = &url.Error{Op: "dial", URL: "postgres://app:" + secret + "@db:5432/orders", Err: errors.New("connection refused")}

// leakyStore fails every call but GetScheduled (whose page has the forms
// that give the test a CSRF token) with errEcho.
type leakyStore struct{ *bus.MemoryPersistence }

func (leakyStore) ListScheduled(context.Context, bus.ScheduledQuery) ([]bus.OutgoingMessage, error) {
	return nil, errEcho
}
func (leakyStore) StatsScheduled(context.Context, time.Time) (bus.ScheduledStats, error) {
	return bus.ScheduledStats{}, errEcho
}
func (leakyStore) SendNow(context.Context, string) (bool, error) { return false, errEcho }
func (leakyStore) ListFailed(context.Context, bus.FailedQuery) ([]bus.FailedMessage, error) {
	return nil, errEcho
}
func (leakyStore) CountFailed(context.Context, bus.FailedQuery) (int64, error) { return 0, errEcho }
func (leakyStore) DeleteFailed(context.Context, []string) (int, error)         { return 0, errEcho }
func (leakyStore) ListRecurrings(context.Context, bus.RecurringFilter) ([]bus.RecurringInfo, error) {
	return nil, errEcho
}
func (leakyStore) SetRecurring(context.Context, bus.RecurringSpec) error { return errEcho }
func (leakyStore) PauseRecurring(context.Context, string) error          { return errEcho }
func (leakyStore) ResumeRecurring(context.Context, string) error         { return errEcho }
func (leakyStore) DeleteRecurring(context.Context, string) error         { return errEcho }

// Stores whose errors quote a URL with its password: no page, no redirect
// and no log line of the console shows the password.
func TestPasswordNeverShown(t *testing.T) {
	t.Parallel()
	var logs bustest.LogBuffer
	f := newFixture(t, func(o *console.Options) {
		s := leakyStore{o.Scheduled.(*bus.MemoryPersistence)}
		o.Scheduled, o.Failed, o.Recurring = s, s, s
		o.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	var shown []string
	for _, path := range []string{"/", "/scheduled", "/failed", "/failed/x", "/recurring"} {
		_, body := f.get(t, path)
		shown = append(shown, "GET "+path+": "+body)
	}
	_, page := f.get(t, "/scheduled/sched-01")
	m := csrfRE.FindStringSubmatch(page)
	if m == nil {
		t.Fatal("no CSRF token on the page")
	}
	for _, path := range []string{"/scheduled/sched-01/send-now", "/recurring/x/pause", "/recurring/x/delete", "/failed/delete", "/failed/retry"} {
		code, loc := f.postRaw(t, path, url.Values{"id": {"x"}, "csrf": {m[1]}})
		shown = append(shown, "POST "+path+" redirects to "+loc)
		if loc != "" {
			if u, err := url.Parse(loc); err == nil {
				_, body := f.get(t, u.RequestURI())
				shown = append(shown, "GET "+loc+": "+body)
			}
		} else if code < 300 || code >= 400 {
			shown = append(shown, "POST "+path+": "+http.StatusText(code))
		}
	}
	shown = append(shown, "the log: "+logs.String())
	errorsShown := 0
	for _, s := range shown {
		if strings.Contains(s, secret) {
			t.Errorf("the password is shown in %s", s[:min(len(s), 60)])
		}
		if strings.Contains(s, "connection refused") {
			errorsShown++
		}
	}
	if errorsShown < 5 {
		t.Errorf("the store's error is shown %d times: the test proves nothing", errorsShown)
	}
}
