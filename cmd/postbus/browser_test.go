package main

import (
	"context"
	"flag"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/console"
)

var screenshots = flag.Bool("screenshots", false, "write the browser test's screenshots to docs/images")

// chromium finds a Chromium or Chrome binary.
func chromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// TestBrowserConsole drives the console in headless Chromium: it opens the
// overview, searches a scheduled message by ID, cancels it, retries a
// failure group, and takes a screenshot of each page (into docs/images with
// -screenshots, for docs/guide/operations.md).
func TestBrowserConsole(t *testing.T) {
	bin := chromium()
	if bin == "" {
		bustest.SkipOutsideCI(t, "no chromium binary on PATH (Debian: apt-get install chromium)")
	}
	dir := t.TempDir()
	if *screenshots {
		dir = filepath.Join("..", "..", "docs", "images")
	}

	// A lively fixture: a backlog spread over the next day, failures in
	// three groups.
	store := bus.NewMemoryPersistence()
	tr := bus.NewMemoryTransport()
	now := time.Now().UTC()
	fillBrowserFixture(t, store, now)
	h, err := console.Handler(console.Options{Scheduled: store, Failed: store, Transport: tr,
		Metrics: func() bus.Metrics {
			return bus.Metrics{Sent: 1840, Scheduled: 1210, Dispatched: 1035, Handled: 2790, Retried: 57, MovedToError: 34}
		}})
	if err != nil {
		t.Fatal(err)
	}
	// Answers to form submissions come late, as on a loaded machine: a
	// wait that the page the form is on can satisfy, or a screenshot taken
	// while the next page loads, then fails instead of passing by luck.
	cc := newConsoleClient(t, slowSubmissions(h, 2*time.Second)) // the server; the browser is the client
	base := cc.srv.URL

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.WindowSize(1280, 900), chromedp.UserDataDir(t.TempDir()))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelA()
	ctx, cancelB := chromedp.NewContext(actx)
	defer cancelB()
	// The first Run starts the browser: no timeout on its context.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatal(err)
	}

	// Every wait below is for a condition; the deadline only ends a wait
	// that will never be met, so it is generous: on a loaded 2-core
	// machine one screenshot took more than 30 s.
	const deadline = 3 * time.Minute
	step := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, deadline)
		defer cancel()
		if err := chromedp.Do(sctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	text := func(sel chromedp.CSS) string {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, deadline)
		defer cancel()
		s, err := chromedp.Run(sctx, chromedp.Text(sel))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return strings.TrimSpace(s)
	}
	shot := func(name string) {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, deadline)
		defer cancel()
		buf, err := chromedp.Run(sctx, chromedp.FullScreenshot(90))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), buf, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const target = "0190f5d6-0000-7000-8000-000000000007"

	step("overview", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.ID("backlog")))
	backlog := text("#backlog")
	shot("console-overview.jpg")

	step("scheduled", chromedp.Navigate(base+"/scheduled"), chromedp.WaitVisible(chromedp.ID("search-id")),
		chromedp.SendKeys(chromedp.ID("search-id"), target))
	submitForm(t, ctx, deadline, "search", "#search", "/scheduled", "id="+target)
	step("search result", chromedp.WaitVisible(chromedp.CSS(`a[href="/scheduled/`+target+`"]`)))
	searched := text("#scheduled")
	shot("console-scheduled-search.jpg")

	step("message", chromedp.Navigate(base+"/scheduled/"+target), chromedp.WaitVisible(chromedp.ID("body")))
	shot("console-message.jpg")
	submitForm(t, ctx, deadline, "cancel", `form[action$="/cancel"] button`, "/scheduled", "msg=")
	step("cancelled", chromedp.WaitVisible(chromedp.CSS(".flash")))
	flash := text(".flash")

	step("failed", chromedp.Navigate(base+"/failed"), chromedp.WaitVisible(chromedp.ID("groups")))
	shot("console-failed.jpg")
	submitForm(t, ctx, deadline, "retry group", "#groups button.primary", "/failed", "msg=")
	step("retried", chromedp.WaitVisible(chromedp.CSS(".flash")), chromedp.WaitVisible(chromedp.ID("count")))
	failedCount := text("#count")
	shot("console-failed-retried.jpg")

	if backlog != "60" {
		t.Errorf("overview backlog %q, want 60", backlog)
	}
	if !strings.Contains(searched, target) || strings.Count(searched, "0190f5d6-") != 1 {
		t.Errorf("search shows %q", searched)
	}
	if !strings.Contains(flash, "cancelled") {
		t.Errorf("cancel: %q", flash)
	}
	if _, ok, _ := store.GetScheduled(context.Background(), target); ok {
		t.Error("the cancelled message is still scheduled")
	}
	if failedCount != "12" { // 25 + 8 + 4 failures; the group of 25 was retried
		t.Errorf("failed after the retry: %q, want 12", failedCount)
	}
}

// slowSubmissions delays the answer to every form submission (a POST, or a
// GET with a query string) by d.
func slowSubmissions(h http.Handler, d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost || r.URL.RawQuery != "" {
			select {
			case <-time.After(d):
			case <-r.Context().Done():
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// submitForm clicks a button that submits a form and waits until the page
// the submission leads to (after the redirect of a POST) has loaded, then
// checks it is 200 at wantPath with wantQuery in its query. Waiting for an
// element instead would race with the navigation: the page the form is on
// may have the element too (the unfiltered list has the searched message's
// link, the page of an earlier submission its flash), or the old page is
// gone and the new one not yet drawn when a screenshot is taken.
func submitForm(t *testing.T, ctx context.Context, timeout time.Duration, what string, button chromedp.CSS, wantPath, wantQuery string) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := chromedp.RunResponse(sctx, chromedp.Click(button))
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	u, err := url.Parse(resp.URL)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if resp.Status != http.StatusOK || u.Path != wantPath || !strings.Contains(u.RawQuery, wantQuery) {
		t.Fatalf("%s: landed on %d %s, want 200 %s?…%s…", what, resp.Status, resp.URL, wantPath, wantQuery)
	}
}
