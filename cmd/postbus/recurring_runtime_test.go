package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/sqlite"
)

// TestRecurringSetAndOperate makes a schedule at runtime from the command
// line and operates it: ls shows its kind and generation, a dry run
// stores nothing, the same definition changes nothing, another replaces
// it, backfill stores one occurrence per tick, delete removes it and its
// occurrences.
func TestRecurringSetAndOperate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := bus.NewMemoryPersistence()
	open := memoryOpener(p, nil)
	now := time.Date(2030, 1, 1, 12, 7, 0, 0, time.UTC)
	run := func(code int, args ...string) result {
		t.Helper()
		r := runAt(t, open, nil, now, args...)
		if r.code != code {
			t.Fatalf("postbus %v: exit %d, want %d\n%s%s", args, r.code, code, r.stdout, r.stderr)
		}
		return r
	}
	set := []string{"recurring", "set", "invoices-acme", "--schedule", "@every 1h", "--type", "billing.SendInvoices",
		"--body", `{"tenant":"acme"}`, "--to", "billing"}

	var dry struct {
		DryRun     bool       `json:"dry_run"`
		Action     string     `json:"action"`
		Generation int64      `json:"generation"`
		Next       *time.Time `json:"next"`
	}
	if err := json.Unmarshal([]byte(run(exitOK, append(set, "--dry-run", "--json")...).stdout), &dry); err != nil {
		t.Fatal(err)
	}
	next := time.Date(2030, 1, 1, 13, 0, 0, 0, time.UTC)
	if !dry.DryRun || dry.Action != "created" || dry.Next == nil || !dry.Next.Equal(next) {
		t.Errorf("dry run = %+v; want created with next tick %v", dry, next)
	}
	if _, ok, _ := p.LoadRecurring(ctx, "invoices-acme"); ok {
		t.Fatal("the dry run stored the schedule")
	}

	if r := run(exitOK, set...); !strings.Contains(r.stdout, "created schedule invoices-acme (@every 1h), generation 1, next tick 2030-01-01T13:00:00Z") {
		t.Errorf("set: %s", r.stdout)
	}
	nextID := bus.RecurringOccurrenceID("invoices-acme", next)
	m, ok, err := p.GetScheduled(ctx, nextID)
	if err != nil || !ok {
		t.Fatalf("occurrence %s not stored (%v)", nextID, err)
	}
	env, err := bus.UnmarshalEnvelope(m.Envelope)
	if err != nil {
		t.Fatal(err)
	}
	if env.Type != "billing.SendInvoices" || string(env.Body) != `{"tenant":"acme"}` || env.Destination != "billing" ||
		env.Kind != bus.KindCommand || env.ContentType != "application/json" {
		t.Errorf("occurrence = %+v body %s; want the raw message to billing", env, env.Body)
	}
	if r := run(exitOK, set...); !strings.Contains(r.stdout, "unchanged schedule invoices-acme") {
		t.Errorf("the same definition again: %s", r.stdout)
	}
	if r := run(exitOK, "recurring", "set", "invoices-acme", "--schedule", "@every 30m", "--type", "billing.SendInvoices",
		"--publish", "--jitter", "1m", "--dry-run"); !strings.Contains(r.stdout, "dry run: would have replaced schedule invoices-acme (@every 30m), generation 2") {
		t.Errorf("dry run of a replacement: %s", r.stdout)
	}
	if rec, _, _ := p.LoadRecurring(ctx, "invoices-acme"); rec.Generation != 1 {
		t.Fatalf("the dry run replaced the schedule: %+v", rec)
	}

	var ls struct {
		Count     int             `json:"count"`
		Rows      []recurringJSON `json:"rows"`
		NextAfter string          `json:"next_after"`
	}
	if err := json.Unmarshal([]byte(run(exitOK, "recurring", "ls", "--json").stdout), &ls); err != nil {
		t.Fatal(err)
	}
	if ls.Count != 1 || ls.Rows[0].Kind != "runtime" || ls.Rows[0].Generation != 1 || ls.Rows[0].Schedule != "@every 1h" ||
		ls.Rows[0].Next == nil || !ls.Rows[0].Next.Equal(next) || ls.NextAfter != "" {
		t.Errorf("ls = %+v", ls)
	}
	if r := run(exitOK, "recurring", "show", "invoices-acme"); !strings.Contains(r.stdout, "Kind:        runtime") ||
		!strings.Contains(r.stdout, "Skipped:     0") || !strings.Contains(r.stdout, nextID) {
		t.Errorf("show:\n%s", r.stdout)
	}

	// Backfill the three ticks of [09:00, 12:00): due at once, one each.
	if r := run(exitOK, "recurring", "backfill", "invoices-acme", "--from", "2030-01-01T09:00:00Z", "--to", "2030-01-01T12:00:00Z",
		"--dry-run"); !strings.Contains(r.stdout, "would have stored 3 occurrence(s)") {
		t.Errorf("backfill dry run: %s", r.stdout)
	}
	before, _ := p.StatsScheduled(ctx, now)
	if r := run(exitOK, "recurring", "backfill", "invoices-acme", "--from", "2030-01-01T09:00:00Z", "--to", "2030-01-01T12:00:00Z"); !strings.Contains(r.stdout, "stored 3 occurrence(s)") {
		t.Errorf("backfill: %s", r.stdout)
	}
	after, _ := p.StatsScheduled(ctx, now)
	if after.Count-before.Count != 3 || after.Overdue-before.Overdue != 3 {
		t.Errorf("backfill stored %d rows, %d due; want 3 due", after.Count-before.Count, after.Overdue-before.Overdue)
	}
	run(exitUsage, "recurring", "backfill", "invoices-acme", "--from", "2030-01-01T12:00:00Z", "--to", "2030-01-01T09:00:00Z")

	// A paused schedule made at runtime is triggered from its stored
	// definition.
	run(exitOK, "recurring", "pause", "invoices-acme")
	run(exitOK, "recurring", "trigger", "--key", "k1", "--dry-run", "invoices-acme")
	trigID := bus.RecurringTriggerKeyID("invoices-acme", "k1")
	if _, ok, _ := p.GetScheduled(ctx, trigID); ok {
		t.Fatal("the dry run stored the trigger's occurrence")
	}
	if r := run(exitOK, "recurring", "trigger", "--key", "k1", "invoices-acme"); !strings.Contains(r.stdout, "from its stored definition") {
		t.Errorf("trigger: %s", r.stdout)
	}
	m, ok, err = p.GetScheduled(ctx, trigID)
	if err != nil || !ok {
		t.Fatalf("trigger stored no occurrence %s (%v)", trigID, err)
	}
	if env, _ := bus.UnmarshalEnvelope(m.Envelope); env == nil || string(env.Body) != `{"tenant":"acme"}` || !m.DueAt.Equal(now) {
		t.Errorf("triggered occurrence %+v due %v", env, m.DueAt)
	}
	run(exitOK, "recurring", "resume", "invoices-acme")

	// Replace it: the generation goes up and the kind stays.
	if r := run(exitOK, "recurring", "set", "invoices-acme", "--schedule", "@every 30m", "--type", "billing.SendInvoices",
		"--publish", "--missed", "skip", "--max-runs", "3"); !strings.Contains(r.stdout, "replaced schedule invoices-acme (@every 30m), generation 2, next tick 2030-01-01T12:30:00Z") {
		t.Errorf("replace: %s", r.stdout)
	}
	if _, ok, _ := p.GetScheduled(ctx, nextID); !ok {
		// 13:00 is a tick of both definitions: the new one's occurrence.
		t.Errorf("occurrence %s of the new definition not stored", nextID)
	}

	run(exitOK, "recurring", "delete", "invoices-acme")
	if _, ok, _ := p.LoadRecurring(ctx, "invoices-acme"); ok {
		t.Error("the record is still stored after delete")
	}
	if _, ok, _ := p.GetScheduled(ctx, nextID); ok {
		t.Errorf("occurrence %s still stored after delete", nextID)
	}
	if r := run(exitError, "recurring", "backfill", "invoices-acme", "--from", "-2h", "--to", "0s"); !strings.Contains(r.stderr, "no recurring schedule invoices-acme") {
		t.Errorf("backfill of a deleted schedule: %s", r.stderr)
	}
}

// TestRecurringSetRefuses checks what set refuses before anything is
// stored: bad flags, a schedule text the parser refuses, and a schedule
// declared in code, which its service would take back.
func TestRecurringSetRefuses(t *testing.T) {
	t.Parallel()
	p := bus.NewMemoryPersistence()
	declareHourly(t, p)
	open := memoryOpener(p, nil)
	for _, tc := range []struct {
		code int
		want string
		args []string
	}{
		{exitUsage, "--body is not valid JSON", []string{"x", "--schedule", "@every 1h", "--type", "T", "--to", "e", "--body", "{"}},
		{exitUsage, "give --to ENDPOINT", []string{"x", "--schedule", "@every 1h", "--type", "T"}},
		{exitUsage, "not both", []string{"x", "--schedule", "@every 1h", "--type", "T", "--to", "e", "--publish"}},
		{exitUsage, "give --type", []string{"x", "--schedule", "@every 1h", "--to", "e"}},
		{exitUsage, "--missed \"sometimes\"", []string{"x", "--schedule", "@every 1h", "--type", "T", "--to", "e", "--missed", "sometimes"}},
		{exitError, "names its time zone", []string{"x", "--schedule", "0 9 * * *", "--type", "T", "--to", "e"}},
		{exitError, "Schedule: cannot parse", []string{"x", "--schedule", "CRON_TZ=UTC 0 9 * *", "--type", "T", "--to", "e"}},
		{exitError, "Policy.End", []string{"x", "--schedule", "@every 1h", "--type", "T", "--to", "e", "--start", "2h", "--end", "1h"}},
		{exitError, "Name", []string{"not a name", "--schedule", "@every 1h", "--type", "T", "--to", "e"}},
		{exitError, "declared in code", []string{"hourly", "--schedule", "@every 1h", "--type", "T", "--to", "e"}},
	} {
		r := runApp(t, open, nil, append([]string{"recurring", "set"}, tc.args...)...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("set %v: exit %d, stderr %q; want %d and %q", tc.args, r.code, r.stderr, tc.code, tc.want)
		}
	}
	recs, _ := p.ListRecurring(context.Background())
	if len(recs) != 1 || recs[0].Spec != nil {
		t.Errorf("records after refused sets: %+v", recs)
	}
	if r := runApp(t, open, nil, "recurring", "backfill", "hourly", "--from", "-2h", "--to", "0s"); r.code != exitError ||
		!strings.Contains(r.stderr, "backfill it from a process that declares it") {
		t.Errorf("backfill of a declared schedule: exit %d, %s", r.code, r.stderr)
	}
}

// TestRecurringSetCron sets a cron schedule that names its zone.
func TestRecurringSetCron(t *testing.T) {
	t.Parallel()
	p := bus.NewMemoryPersistence()
	now := time.Date(2030, 1, 1, 12, 7, 0, 0, time.UTC)
	r := runAt(t, memoryOpener(p, nil), nil, now, "recurring", "set", "morning", "--schedule", "CRON_TZ=Europe/Berlin 0 9 * * 1-5",
		"--type", "ops.Morning", "--publish")
	if r.code != exitOK || !strings.Contains(r.stdout, "next tick 2030-01-02T08:00:00Z") {
		t.Fatalf("set: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if _, ok, _ := p.GetScheduled(context.Background(), bus.RecurringOccurrenceID("morning", time.Date(2030, 1, 2, 8, 0, 0, 0, time.UTC))); !ok {
		t.Error("the first occurrence is not stored")
	}
}

// testRecurringPages pages through 250 schedules by prefix.
func testRecurringPages(t *testing.T, s bus.RecurringStore, open opener, env map[string]string) {
	ctx := context.Background()
	var names []string
	for i := range 250 {
		names = append(names, fmt.Sprintf("tenant-%03d", i))
	}
	names = append(names, "other-a", "other-b")
	for _, n := range names {
		if _, _, err := s.DeclareRecurring(ctx, bus.RecurringRecord{Name: n, Fingerprint: "f", Schedule: "every 1h0m0s"}); err != nil {
			t.Fatal(err)
		}
	}
	type page struct {
		Count     int             `json:"count"`
		Rows      []recurringJSON `json:"rows"`
		NextAfter string          `json:"next_after"`
	}
	var got []string
	after := ""
	for range 10 {
		r := runAt(t, open, env, base, "recurring", "ls", "--prefix", "tenant-", "--limit", "100", "--after", after, "--json")
		if r.code != exitOK {
			t.Fatalf("ls: exit %d: %s", r.code, r.stderr)
		}
		var p page
		if err := json.Unmarshal([]byte(r.stdout), &p); err != nil {
			t.Fatal(err)
		}
		for _, row := range p.Rows {
			got = append(got, row.Name)
			if row.Kind != "declared" {
				t.Errorf("%s: kind %q", row.Name, row.Kind)
			}
		}
		if p.NextAfter == "" {
			break
		}
		after = p.NextAfter
	}
	if want := strings.Join(names[:250], ","); strings.Join(got, ",") != want {
		t.Errorf("pages by prefix gave %d names: %v", len(got), got)
	}
	r := runAt(t, open, env, base, "recurring", "ls", "--prefix", "other-", "--limit", "1")
	if !strings.Contains(r.stdout, "other-a") || strings.Contains(r.stdout, "other-b") || !strings.Contains(r.stdout, "--after other-a") {
		t.Errorf("a page of one:\n%s", r.stdout)
	}
	if r := runAt(t, open, env, base, "recurring", "ls", "--limit", "1001"); r.code != exitUsage {
		t.Errorf("--limit 1001: exit %d", r.code)
	}
}

func TestRecurringPagesMemory(t *testing.T) {
	t.Parallel()
	p := bus.NewMemoryPersistence()
	testRecurringPages(t, p, memoryOpener(p, nil), nil)
}

func TestRecurringPagesSQLite(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "app.db")
	p, err := sqlite.Open(path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Setup(context.Background()); err != nil {
		t.Fatal(err)
	}
	testRecurringPages(t, p, openBackends, map[string]string{"POSTBUS_SQLITE_PATH": path})
}

// TestRecurringSetSQLite sets a schedule on SQLite: stored when the store
// runs schedules made at runtime, else refused with the reason.
func TestRecurringSetSQLite(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "app.db")
	p, err := sqlite.Open(path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Setup(context.Background()); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"POSTBUS_SQLITE_PATH": path}
	if _, ok := any(p).(bus.RecurringRuntimeStore); !ok {
		for _, dry := range []string{"--dry-run=false", "--dry-run"} {
			r := runAt(t, openBackends, env, base, "recurring", "set", "tick", "--schedule", "@every 1h", "--type", "ops.Tick", "--publish", dry)
			if r.code != exitError || !strings.Contains(r.stderr, "bus.RecurringRuntimeStore") {
				t.Errorf("set %s on a store without runtime schedules: exit %d, %s", dry, r.code, r.stderr)
			}
		}
		return
	}
	r := runAt(t, openBackends, env, base, "recurring", "set", "tick", "--schedule", "@every 1h", "--type", "ops.Tick", "--publish")
	if r.code != exitOK || !strings.Contains(r.stdout, "created schedule tick") {
		t.Fatalf("set: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runAt(t, openBackends, env, base, "recurring", "ls")
	if !strings.Contains(r.stdout, "runtime") || !strings.Contains(r.stdout, "tick") {
		t.Errorf("ls after set:\n%s", r.stdout)
	}
	r = runAt(t, openBackends, env, base, "recurring", "delete", "tick")
	if _, ok, _ := p.LoadRecurring(context.Background(), "tick"); r.code != exitOK || ok {
		t.Errorf("delete: exit %d, still stored %v", r.code, ok)
	}
}
