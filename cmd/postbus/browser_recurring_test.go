package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/console"
)

// TestBrowserRecurringPauseAndResume drives the schedules page in headless
// Chromium: it lists a running bus's schedule with its next tick, pauses
// it (the record is paused and the occurrences stored ahead cancelled),
// and resumes it.
func TestBrowserRecurringPauseAndResume(t *testing.T) {
	bin := chromium()
	if bin == "" {
		bustest.SkipOutsideCI(t, "no chromium binary on PATH (Debian: apt-get install chromium)")
	}
	dir := t.TempDir()
	if *screenshots {
		dir = filepath.Join("..", "..", "docs", "images")
	}
	store := bus.NewMemoryPersistence()
	b, err := bus.New(bus.Config{Endpoint: "reports", Persistence: store, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	bus.Handle(b, func(context.Context, nightly) error { return nil })
	bus.Route[nightly](b, "reports")
	if err := b.AddRecurring(bus.Recurring{Name: "hourly-sync", Schedule: bus.Every(time.Hour),
		Message: func(time.Time) any { return nightly{} }}); err != nil {
		t.Fatal(err)
	}
	bctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := b.Start(bctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Stop(context.Background()) }()
	h, err := console.Handler(console.Options{Scheduled: store, Recurring: b})
	if err != nil {
		t.Fatal(err)
	}
	cc := newConsoleClient(t, h)
	base := cc.srv.URL
	next := bus.Every(time.Hour).Next(time.Now())
	nextID := bus.RecurringOccurrenceID("hourly-sync", next)

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.WindowSize(1280, 700), chromedp.UserDataDir(t.TempDir()))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelA()
	ctx, cancelB := chromedp.NewContext(actx)
	defer cancelB()
	if err := chromedp.Do(ctx); err != nil {
		t.Fatal(err)
	}
	step := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := chromedp.Do(sctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	text := func(sel chromedp.CSS) string {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		s, err := chromedp.Run(sctx, chromedp.Text(sel))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return strings.TrimSpace(s)
	}

	step("list", chromedp.Navigate(base+"/recurring"), chromedp.WaitVisible(chromedp.ID("recurring")))
	row := text(`tr[data-name="hourly-sync"]`)
	if !strings.Contains(row, "every 1h0m0s") || !strings.Contains(row, next.UTC().Format("2006-01-02 15:04:05")) || !strings.Contains(row, "active") {
		t.Errorf("schedule row %q; want the schedule, its next tick %v and active", row, next)
	}
	sctx, cancelS := context.WithTimeout(ctx, 30*time.Second)
	buf, err := chromedp.Run(sctx, chromedp.FullScreenshot(90))
	cancelS()
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "console-recurring.jpg"), buf, 0o644); err != nil {
		t.Fatal(err)
	}
	submitForm(t, ctx, 30*time.Second, "pause", `tr[data-name="hourly-sync"] button`, "/recurring", "msg=")
	if flash := text(".flash"); !strings.Contains(flash, "schedule hourly-sync paused") {
		t.Errorf("pause flash %q", flash)
	}
	if state := text(`tr[data-name="hourly-sync"] td.state`); !strings.HasPrefix(state, "paused") {
		t.Errorf("state after pause %q", state)
	}
	rec, _, _ := store.LoadRecurring(context.Background(), "hourly-sync")
	if !rec.Paused {
		t.Errorf("record after pause: %+v", rec)
	}
	if _, ok, _ := store.GetScheduled(context.Background(), nextID); ok {
		t.Errorf("occurrence %s still stored after pause", nextID)
	}
	// The paused page has a flash too: wait for the page the resume leads
	// to, not for an element.
	submitForm(t, ctx, 30*time.Second, "resume", `tr[data-name="hourly-sync"] button`, "/recurring", "msg=")
	if flash := text(".flash"); !strings.Contains(flash, "schedule hourly-sync resumed") {
		t.Errorf("resume flash %q", flash)
	}
	if state := text(`tr[data-name="hourly-sync"] td.state`); !strings.HasPrefix(state, "active") {
		t.Errorf("state after resume %q", state)
	}
	if rec, _, _ := store.LoadRecurring(context.Background(), "hourly-sync"); rec.Paused {
		t.Errorf("record after resume: %+v", rec)
	}
}
