package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/postbus/bus"
)

const recurringUsage = `recurring ls|show|set|pause|resume|trigger|backfill|delete

  ls       list the stored schedules, a page at a time: kind, schedule, next and last tick, state
  show     show one schedule with its recent ticks and their occurrences
  set      create or replace a schedule made at runtime, with its message
  pause    pause schedules for every process; occurrences stored ahead are cancelled
  resume   resume schedules from their next tick (ticks missed while paused are not sent)
  trigger  store one extra occurrence due now, a copy of a stored occurrence
  backfill store an occurrence for each tick of a time range (schedules made at runtime)
  delete   remove schedules made at runtime, or ones no process declares any more,
           cancelling their occurrences`

func (a *app) recurring(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprintf(a.stderr, "Usage: postbus %s\n", recurringUsage)
		return usagef("recurring: name a subcommand")
	}
	switch args[0] {
	case "ls", "list":
		return a.recurringLs(ctx, args[1:])
	case "show":
		return a.recurringShow(ctx, args[1:])
	case "set":
		return a.recurringSet(ctx, args[1:])
	case "backfill":
		return a.recurringBackfill(ctx, args[1:])
	case "pause", "resume", "delete":
		return a.recurringChange(ctx, args[0], args[1:])
	case "trigger":
		return a.recurringTrigger(ctx, args[1:])
	case "-h", "--help", "help":
		fmt.Fprintf(a.stdout, "Usage: postbus %s\n", recurringUsage)
		return errHelp
	}
	return usagef("recurring: unknown subcommand %q", args[0])
}

// recurringOps are the opened persistence and a send-only bus on it, never
// started, whose recurring operations the commands share with services.
type recurringOps struct {
	*backends
	bus *bus.Bus
}

func (o *recurringOps) Close() {
	_ = o.bus.Stop(context.Background())
	o.backends.Close()
}

// openRecurring opens the persistence and checks it keeps schedules.
func (a *app) openRecurring(ctx context.Context, c *command) (*recurringOps, error) {
	b, err := a.open(ctx, c.conn, need{persistence: true})
	if err != nil {
		return nil, err
	}
	if b.Recurring == nil || b.Scheduled == nil {
		b.Close()
		return nil, fmt.Errorf("the %s persistence keeps no recurring schedules (no bus.RecurringStore)", b.PersistenceName)
	}
	bb, err := a.recurringBus(b)
	if err != nil {
		b.Close()
		return nil, err
	}
	return &recurringOps{backends: b, bus: bb}, nil
}

// recurringBus returns a send-only bus on the opened persistence, never
// started: its recurring operations (list, pause, resume, delete) are the
// ones services use. Stop it when done.
func (a *app) recurringBus(b *backends) (*bus.Bus, error) {
	return bus.New(bus.Config{
		Endpoint: "postbus-cli", Persistence: b.Persistence, SendOnly: true, Clock: appClock{a.now},
		Logger: a.logger(), ParseSchedule: parseSchedule,
	})
}

// appClock is the system clock as the app reads it (tests fix it).
type appClock struct{ now func() time.Time }

func (c appClock) Now() time.Time { return c.now() }

func (appClock) NewTimer(d time.Duration) bus.Timer { return sysTimer{time.NewTimer(d)} }

type sysTimer struct{ t *time.Timer }

func (s sysTimer) C() <-chan time.Time { return s.t.C }
func (s sysTimer) Stop() bool          { return s.t.Stop() }

type recurringJSON struct {
	Name       string     `json:"name"`
	Kind       string     `json:"kind"` // runtime or declared
	Schedule   string     `json:"schedule"`
	Next       *time.Time `json:"next,omitempty"`
	Last       *time.Time `json:"last,omitempty"`
	Paused     bool       `json:"paused"`
	Generation int64      `json:"generation"`
	Skipped    int64      `json:"skipped"`
}

// recurringKind names how a schedule was made: "runtime" (SetRecurring,
// stored with its message) or "declared" (AddRecurring, in a service's
// code).
func recurringKind(runtime bool) string {
	if runtime {
		return "runtime"
	}
	return "declared"
}

func recurringState(paused bool) string {
	if paused {
		return "paused"
	}
	return "active"
}

func (a *app) recurringLs(ctx context.Context, args []string) error {
	c := a.newCommand("recurring ls", "recurring ls [--prefix P] [--after NAME] [--limit N]",
		"  postbus recurring ls\n  postbus recurring ls --prefix invoices- --limit 50\n"+
			"  postbus recurring ls --prefix invoices- --after invoices-acme --json   # the next page\n")
	prefix := c.fs.String("prefix", "", "only the schedules whose names start with P")
	after := c.fs.String("after", "", "only the names after NAME: the last name of the previous page")
	limit := c.fs.Int("limit", 100, "the page's size, at most 1000")
	pos, err := a.parse(c, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("recurring ls takes no arguments")
	}
	if *limit < 1 || *limit > 1000 {
		return usagef("recurring ls: --limit must be 1 to 1000")
	}
	o, err := a.openRecurring(ctx, c)
	if err != nil {
		return err
	}
	defer o.Close()
	// One more than the page tells whether there is a next page.
	infos, err := o.bus.ListRecurrings(ctx, bus.RecurringFilter{Prefix: *prefix, After: *after, Limit: min(*limit+1, 1000)})
	if err != nil {
		return err
	}
	nextAfter := ""
	if len(infos) > *limit || len(infos) == 1000 {
		infos = infos[:*limit]
		nextAfter = infos[len(infos)-1].Name
	}
	if c.json {
		out := struct {
			Count     int             `json:"count"`
			Rows      []recurringJSON `json:"rows"`
			NextAfter string          `json:"next_after,omitempty"`
		}{Count: len(infos), Rows: []recurringJSON{}, NextAfter: nextAfter}
		for _, i := range infos {
			out.Rows = append(out.Rows, recurringJSON{Name: i.Name, Kind: recurringKind(i.Runtime), Schedule: i.Schedule,
				Next: jsonTime(i.Next), Last: jsonTime(i.Last), Paused: i.Paused, Generation: i.Generation, Skipped: int64(i.Skipped)})
		}
		return writeJSON(a.stdout, out)
	}
	var cells [][]string
	for _, i := range infos {
		cells = append(cells, []string{i.Name, recurringKind(i.Runtime), truncate(i.Schedule, 40), fmtTime(i.Next), fmtTime(i.Last),
			recurringState(i.Paused), strconv.FormatInt(i.Generation, 10), strconv.Itoa(i.Skipped)})
	}
	table(a.stdout, "NAME\tKIND\tSCHEDULE\tNEXT\tLAST\tSTATE\tGENERATION\tSKIPPED", cells)
	fmt.Fprintf(a.stdout, "%d schedule(s)\n", len(infos))
	if nextAfter != "" {
		fmt.Fprintf(a.stdout, "more: the next page with --after %s\n", nextAfter)
	}
	return nil
}

// loadRecurring returns the record name, or prints that there is none and
// returns errNotFound.
func (a *app) loadRecurring(ctx context.Context, o *recurringOps, name string) (bus.RecurringRecord, error) {
	rec, ok, err := o.Recurring.LoadRecurring(ctx, name)
	if err != nil {
		return rec, err
	}
	if !ok {
		fmt.Fprintf(a.stderr, "postbus: no recurring schedule %s\n", name)
		return rec, errNotFound
	}
	return rec, nil
}

func (a *app) recurringShow(ctx context.Context, args []string) error {
	c := a.newCommand("recurring show", "recurring show NAME", "  postbus recurring show nightly-report --json\n")
	pos, err := a.parse(c, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("recurring show takes one schedule name")
	}
	o, err := a.openRecurring(ctx, c)
	if err != nil {
		return err
	}
	defer o.Close()
	rec, err := a.loadRecurring(ctx, o, pos[0])
	if err != nil {
		return err
	}
	type tickJSON struct {
		Tick       time.Time `json:"tick"`
		Occurrence string    `json:"occurrence_id"`
		State      string    `json:"state"`
	}
	now := a.now()
	ticks := []tickJSON{}
	for _, t := range rec.Ticks {
		id := bus.RecurringOccurrenceID(rec.Name, t)
		m, ok, err := o.Scheduled.GetScheduled(ctx, id)
		if err != nil {
			return err
		}
		state := "not stored (sent, cancelled or skipped)"
		if ok {
			state = scheduledState(m, now)
		}
		ticks = append(ticks, tickJSON{t.UTC(), id, state})
	}
	if c.json {
		return writeJSON(a.stdout, struct {
			recurringJSON
			Fingerprint string     `json:"fingerprint"`
			Ticks       []tickJSON `json:"ticks"`
		}{recurringJSON{Name: rec.Name, Kind: recurringKind(rec.Spec != nil), Schedule: rec.Schedule, Last: jsonTime(rec.Last),
			Paused: rec.Paused, Generation: rec.Generation, Skipped: rec.Skipped}, rec.Fingerprint, ticks})
	}
	fmt.Fprintf(a.stdout, "Name:        %s\nKind:        %s\nSchedule:    %s\nState:       %s\nGeneration:  %d\nSkipped:     %d\nFingerprint: %s\nDealt with:  %s\n",
		rec.Name, recurringKind(rec.Spec != nil), rec.Schedule, recurringState(rec.Paused), rec.Generation, rec.Skipped,
		rec.Fingerprint, fmtTime(rec.Last))
	var cells [][]string
	for _, t := range ticks {
		cells = append(cells, []string{fmtTime(t.Tick), t.Occurrence, t.State})
	}
	table(a.stdout, "TICK\tOCCURRENCE\tSTATE", cells)
	return nil
}

func (a *app) recurringChange(ctx context.Context, verb string, args []string) error {
	c := a.newCommand("recurring "+verb, "recurring "+verb+" [--dry-run] NAME...",
		"  postbus recurring "+verb+" nightly-report\n  postbus recurring "+verb+" --dry-run nightly-report hourly-sync\n")
	dry := c.fs.Bool("dry-run", false, "say what would change, change nothing")
	names, err := a.parse(c, args)
	if err != nil {
		return err
	}
	if len(names) == 0 {
		return usagef("recurring %s: name at least one schedule", verb)
	}
	o, err := a.openRecurring(ctx, c)
	if err != nil {
		return err
	}
	defer o.Close()
	op := map[string]func(context.Context, string) error{
		"pause": o.bus.PauseRecurring, "resume": o.bus.ResumeRecurring, "delete": o.bus.DeleteRecurring,
	}[verb]
	var results []change
	n := 0
	for _, name := range names {
		var err error
		if *dry {
			var ok bool
			if _, ok, err = o.Recurring.LoadRecurring(ctx, name); err == nil && !ok {
				err = bus.ErrUnknownRecurring
			}
		} else {
			err = op(ctx, name)
		}
		switch {
		case errors.Is(err, bus.ErrUnknownRecurring):
			results = append(results, change{name, false, "no such schedule"})
		case err != nil:
			return fmt.Errorf("%s %s: %w (changed %d before it)", verb, name, err, n)
		default:
			n++
			results = append(results, change{Key: name, Changed: true})
		}
	}
	past := map[string]string{"pause": "paused", "resume": "resumed", "delete": "deleted"}[verb]
	return reportChanges(a.stdout, c.json, *dry, "name", past, "schedule(s)", results)
}
