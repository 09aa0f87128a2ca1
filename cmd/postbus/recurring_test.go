package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/sqlite"
)

// recurringStore is what the recurring commands need of a persistence.
type recurringStore interface {
	bus.Persistence
	bus.RecurringStore
	bus.ScheduledBrowser
}

type nightly struct{ Day string }

// declareHourly runs a bus that declares the schedule "hourly" on p until
// it stored its occurrences ahead, then stops it, as a service that was
// deployed and shut down.
func declareHourly(t *testing.T, p bus.Persistence) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := bus.New(bus.Config{Endpoint: "reports", Persistence: p, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	bus.Handle(b, func(context.Context, nightly) error { return nil })
	bus.Route[nightly](b, "reports")
	if err := b.AddRecurring(bus.Recurring{Name: "hourly", Schedule: bus.Every(time.Hour),
		Message: func(tick time.Time) any { return nightly{Day: tick.Format(time.DateOnly)} }}); err != nil {
		t.Fatal(err)
	}
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

// runAt runs the command with the app's clock at now.
func runAt(t *testing.T, open opener, env map[string]string, now time.Time, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	a := &app{stdout: &out, stderr: &errb, getenv: func(k string) string { return env[k] }, now: func() time.Time { return now }, open: open}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return result{a.run(ctx, args), out.String(), errb.String()}
}

// testRecurringCommands runs every recurring subcommand against a store
// that a service declared "hourly" on.
func testRecurringCommands(t *testing.T, s recurringStore, open opener, env map[string]string) {
	ctx := context.Background()
	declareHourly(t, s)
	now := time.Now().UTC().Truncate(time.Millisecond)
	next := bus.Every(time.Hour).Next(now)
	run := func(code int, args ...string) result {
		t.Helper()
		r := runAt(t, open, env, now, args...)
		if r.code != code {
			t.Fatalf("postbus %v: exit %d, want %d\n%s%s", args, r.code, code, r.stdout, r.stderr)
		}
		return r
	}

	var ls struct {
		Count int             `json:"count"`
		Rows  []recurringJSON `json:"rows"`
	}
	if err := json.Unmarshal([]byte(run(exitOK, "recurring", "ls", "--json").stdout), &ls); err != nil {
		t.Fatal(err)
	}
	if ls.Count != 1 || ls.Rows[0].Name != "hourly" || ls.Rows[0].Schedule != "every 1h0m0s" || ls.Rows[0].Paused ||
		ls.Rows[0].Next == nil || !ls.Rows[0].Next.Equal(next) {
		t.Fatalf("recurring ls = %+v; want hourly, active, next %v", ls, next)
	}
	if r := run(exitOK, "recurring", "ls"); !strings.Contains(r.stdout, "hourly") || !strings.Contains(r.stdout, "active") {
		t.Errorf("recurring ls table:\n%s", r.stdout)
	}
	nextID := bus.RecurringOccurrenceID("hourly", next)
	if r := run(exitOK, "recurring", "show", "hourly"); !strings.Contains(r.stdout, nextID) || !strings.Contains(r.stdout, "waiting") {
		t.Errorf("recurring show lacks the next occurrence %s waiting:\n%s", nextID, r.stdout)
	}

	// trigger copies the stored occurrence, due now, with the trigger's tick.
	run(exitOK, "recurring", "trigger", "--dry-run", "--key", "k1", "hourly")
	trigID := bus.RecurringTriggerKeyID("hourly", "k1")
	if _, ok, _ := s.GetScheduled(ctx, trigID); ok {
		t.Fatal("the dry run stored the trigger's occurrence")
	}
	run(exitOK, "recurring", "trigger", "--key", "k1", "hourly")
	run(exitOK, "recurring", "trigger", "--key", "k1", "hourly") // a retry stores nothing more
	// Two triggers without a key at the same instant are two occurrences.
	var t1, t2 struct {
		Occurrence string `json:"occurrence_id"`
	}
	for _, o := range []any{&t1, &t2} {
		if err := json.Unmarshal([]byte(run(exitOK, "recurring", "trigger", "--json", "hourly").stdout), o); err != nil {
			t.Fatal(err)
		}
	}
	if t1.Occurrence == t2.Occurrence || t1.Occurrence == trigID {
		t.Fatalf("two triggers at one instant stored %s and %s, want two occurrences", t1.Occurrence, t2.Occurrence)
	}
	for _, id := range []string{t1.Occurrence, t2.Occurrence} {
		if ok, err := s.CancelOutgoing(ctx, id); err != nil || !ok {
			t.Fatalf("occurrence %s of a trigger is not stored: %v, %v", id, ok, err)
		}
	}
	m, ok, err := s.GetScheduled(ctx, trigID)
	if err != nil || !ok {
		t.Fatalf("trigger stored no occurrence %s (err %v)", trigID, err)
	}
	env2, err := bus.UnmarshalEnvelope(m.Envelope)
	if err != nil {
		t.Fatal(err)
	}
	if !m.DueAt.Equal(now) || env2.ID != trigID || env2.Headers[bus.HeaderRecurringTick] != now.Format(time.RFC3339Nano) ||
		env2.Headers[bus.HeaderRecurringName] != "hourly" || env2.Destination != "reports" || !strings.Contains(string(env2.Body), next.Format(time.DateOnly)) {
		t.Errorf("triggered occurrence = %+v due %v; want a copy due now with the trigger's ID and tick", env2, m.DueAt)
	}
	if _, err := s.CancelOutgoing(ctx, trigID); err != nil {
		t.Fatal(err)
	}

	// pause cancels the occurrences stored ahead; then trigger has nothing to copy.
	run(exitOK, "recurring", "pause", "hourly")
	if rec, _, _ := s.LoadRecurring(ctx, "hourly"); !rec.Paused {
		t.Errorf("record after pause = %+v", rec)
	}
	if _, ok, _ := s.GetScheduled(ctx, nextID); ok {
		t.Errorf("occurrence %s still stored after pause", nextID)
	}
	if r := run(exitError, "recurring", "trigger", "hourly"); !strings.Contains(r.stderr, "no stored occurrence") {
		t.Errorf("trigger of a paused schedule: %s", r.stderr)
	}
	run(exitOK, "recurring", "resume", "hourly")
	if rec, _, _ := s.LoadRecurring(ctx, "hourly"); rec.Paused {
		t.Errorf("record after resume = %+v", rec)
	}
	if r := run(exitError, "recurring", "pause", "missing"); !strings.Contains(r.stdout, "missing: skipped (no such schedule)") {
		t.Errorf("pause of an unknown schedule: %s", r.stdout)
	}

	// delete removes the record and cancels the occurrences stored ahead.
	declareHourly(t, s)
	if _, ok, _ := s.GetScheduled(ctx, nextID); !ok {
		t.Fatalf("occurrence %s not stored again by the service", nextID)
	}
	run(exitOK, "recurring", "delete", "hourly")
	if _, ok, _ := s.LoadRecurring(ctx, "hourly"); ok {
		t.Error("record still there after delete")
	}
	if _, ok, _ := s.GetScheduled(ctx, nextID); ok {
		t.Errorf("occurrence %s still stored after delete", nextID)
	}
	if r := run(exitError, "recurring", "show", "hourly"); !strings.Contains(r.stderr, "no recurring schedule hourly") {
		t.Errorf("show after delete: %s", r.stderr)
	}
}

func TestRecurringCommandsMemory(t *testing.T) {
	t.Parallel()
	p := bus.NewMemoryPersistence()
	testRecurringCommands(t, p, memoryOpener(p, nil), nil)
}

func TestRecurringCommandsSQLite(t *testing.T) {
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
	s, ok := any(p).(recurringStore)
	if !ok {
		t.Fatal("the SQLite persistence keeps no recurring schedules")
	}
	testRecurringCommands(t, s, openBackends, map[string]string{"POSTBUS_SQLITE_PATH": path})
}

func TestRecurringCommandsPostgres(t *testing.T) {
	t.Parallel()
	p, env := postgresFixture(t)
	s, ok := any(p).(recurringStore)
	if !ok {
		t.Fatal("the PostgreSQL persistence keeps no recurring schedules")
	}
	testRecurringCommands(t, s, openBackends, env)
}
