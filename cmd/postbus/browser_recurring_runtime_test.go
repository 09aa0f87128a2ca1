package main

import (
	"context"
	"fmt"
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

// TestBrowserRecurringRuntime drives the schedules page in headless
// Chromium over a running bus with 10,000 schedules made at runtime: it
// filters them by prefix, pages forward, makes a schedule with the form,
// pauses it and deletes it, checking the page and the store at each step.
func TestBrowserRecurringRuntime(t *testing.T) {
	bin := chromium()
	if bin == "" {
		bustest.SkipOutsideCI(t, "no chromium binary on PATH (Debian: apt-get install chromium)")
	}
	dir := t.TempDir()
	if *screenshots {
		dir = filepath.Join("..", "..", "docs", "images")
	}
	bg := context.Background()
	store := bus.NewMemoryPersistence()
	b, err := bus.New(bus.Config{Endpoint: "billing", Persistence: store, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	bus.Handle(b, func(context.Context, nightly) error { return nil })
	bctx, cancel := context.WithTimeout(bg, 5*time.Minute)
	defer cancel()
	if err := b.Start(bctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Stop(bg) }()
	groups := []string{"billing", "invoices", "reports", "sync"}
	var invoices []string
	began := time.Now()
	for i := range 10_000 {
		name := fmt.Sprintf("%s-%05d", groups[i%len(groups)], i)
		if err := b.SetRecurring(bctx, bus.RecurringSpec{Name: name, Schedule: "@every 24h", Message: rawMessage{"billing.Run", []byte(`{}`)},
			Options: []bus.Option{bus.To("billing")}, Policy: bus.RecurringPolicy{Jitter: time.Hour}}); err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(name, "invoices-") {
			invoices = append(invoices, name)
		}
	}
	t.Logf("10,000 SetRecurring calls: %v", time.Since(began))
	h, err := console.Handler(console.Options{Scheduled: store, Recurring: b})
	if err != nil {
		t.Fatal(err)
	}
	cc := newConsoleClient(t, h)
	base := cc.srv.URL
	// The previous page of the last one walks every name before it.
	began = time.Now()
	if code, page := cc.get("/recurring?before=sync-09999"); code != 200 || !strings.Contains(page, `data-name="sync-09995"`) {
		t.Fatalf("the page before the last name: %d", code)
	}
	t.Logf("the page before the last of 10,000 names: %v", time.Since(began))

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.WindowSize(1280, 900), chromedp.UserDataDir(t.TempDir()))
	actx, cancelA := chromedp.NewExecAllocator(bg, opts...)
	defer cancelA()
	ctx, cancelB := chromedp.NewContext(actx)
	defer cancelB()
	if err := chromedp.Do(ctx); err != nil {
		t.Fatal(err)
	}
	// Deadlines only end waits that will never be met: generous, for a
	// loaded 2-core machine.
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
	rows := func() []string {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, deadline)
		defer cancel()
		names, err := chromedp.Run(sctx, chromedp.Evaluate[[]string](
			`Array.from(document.querySelectorAll('#recurring tr[data-name]')).map(r => r.dataset.name)`))
		if err != nil {
			t.Fatalf("rows: %v", err)
		}
		return names
	}
	same := func(what string, got, want []string) {
		t.Helper()
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("%s: %d rows %v…; want %d from %s", what, len(got), got[:min(len(got), 3)], len(want), want[0])
		}
	}

	step("list", chromedp.Navigate(base+"/recurring"), chromedp.WaitVisible(chromedp.ID("recurring")))
	if got := rows(); len(got) != 100 || got[0] != "billing-00000" {
		t.Fatalf("first page: %d rows from %v", len(got), got[:min(len(got), 1)])
	}

	// Filter by prefix, then page forward.
	step("prefix", chromedp.SetValue(chromedp.ID("prefix"), "invoices-"))
	submitForm(t, ctx, deadline, "filter", "#filter", "/recurring", "prefix=invoices-")
	same("invoices, page 1", rows(), invoices[:100])
	row := text(`tr[data-name="invoices-00001"]`)
	if !strings.Contains(row, "runtime") || !strings.Contains(row, "@every 24h") || !strings.Contains(row, "active") {
		t.Errorf("row %q; want runtime, @every 24h, active", row)
	}
	submitForm(t, ctx, deadline, "next page", "#next", "/recurring", "after=invoices-00397")
	same("invoices, page 2", rows(), invoices[100:200])
	step("previous link", chromedp.WaitVisible(chromedp.ID("prev")))

	// Make a schedule with the form.
	step("fill the form",
		chromedp.SetValue(chromedp.CSS(`#create input[name="name"]`), "invoices-zz-new"),
		chromedp.SetValue(chromedp.CSS(`#create input[name="schedule"]`), "@every 1h"),
		chromedp.SetValue(chromedp.CSS(`#create input[name="type"]`), "billing.SendInvoices"),
		chromedp.SetValue(chromedp.CSS(`#create input[name="to"]`), "billing"),
		chromedp.SetValue(chromedp.CSS(`#create textarea[name="body"]`), `{"tenant":"zz"}`))
	submitForm(t, ctx, deadline, "create", "#create-submit", "/recurring", "prefix=invoices-zz-new")
	if flash := text(".flash"); !strings.Contains(flash, "schedule invoices-zz-new set") {
		t.Errorf("create flash %q", flash)
	}
	same("the new schedule", rows(), []string{"invoices-zz-new"})
	if row := text(`tr[data-name="invoices-zz-new"]`); !strings.Contains(row, "runtime") || !strings.Contains(row, "@every 1h") {
		t.Errorf("new row %q", row)
	}
	rec, ok, err := store.LoadRecurring(bg, "invoices-zz-new")
	if err != nil || !ok || rec.Spec == nil || len(rec.Ticks) == 0 {
		t.Fatalf("record of the new schedule: %+v, %v, %v", rec, ok, err)
	}
	nextID := bus.RecurringOccurrenceID("invoices-zz-new", rec.Ticks[len(rec.Ticks)-1])
	if _, ok, _ := store.GetScheduled(bg, nextID); !ok {
		t.Errorf("occurrence %s of the new schedule not stored", nextID)
	}
	sctx, cancelS := context.WithTimeout(ctx, deadline)
	buf, err := chromedp.Run(sctx, chromedp.FullScreenshot(90))
	cancelS()
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "console-recurring-runtime.jpg"), buf, 0o644); err != nil {
		t.Fatal(err)
	}

	// Pause it, then delete it.
	submitForm(t, ctx, deadline, "pause", `tr[data-name="invoices-zz-new"] form[action$="/pause"] button`, "/recurring", "msg=")
	if flash := text(".flash"); !strings.Contains(flash, "schedule invoices-zz-new paused") {
		t.Errorf("pause flash %q", flash)
	}
	if state := text(`tr[data-name="invoices-zz-new"] td.state`); !strings.HasPrefix(state, "paused") {
		t.Errorf("state after pause %q", state)
	}
	if rec, _, _ := store.LoadRecurring(bg, "invoices-zz-new"); !rec.Paused {
		t.Errorf("record after pause: %+v", rec)
	}
	if _, ok, _ := store.GetScheduled(bg, nextID); ok {
		t.Errorf("occurrence %s still stored after pause", nextID)
	}
	submitForm(t, ctx, deadline, "delete", `tr[data-name="invoices-zz-new"] form[action$="/delete"] button`, "/recurring", "msg=")
	if flash := text(".flash"); !strings.Contains(flash, "schedule invoices-zz-new deleted") {
		t.Errorf("delete flash %q", flash)
	}
	if got := rows(); len(got) != 0 {
		t.Errorf("rows after delete: %v", got)
	}
	if _, ok, _ := store.LoadRecurring(bg, "invoices-zz-new"); ok {
		t.Error("the record is still stored after delete")
	}
	if n := len(invoices); n != 2500 {
		t.Fatalf("%d invoices schedules", n)
	}
}
