package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/postbus/bus"
)

const recurringUsage = `recurring ls|show|pause|resume|trigger|delete

  ls       list the stored schedules: schedule, next and last tick, paused
  show     show one schedule with its recent ticks and their occurrences
  pause    pause schedules for every process; occurrences stored ahead are cancelled
  resume   resume schedules from their next tick (ticks missed while paused are not sent)
  trigger  store one extra occurrence due now, a copy of a stored occurrence
  delete   remove schedules no process declares any more, cancelling their occurrences`

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
		Logger: a.logger(),
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
	Schedule   string     `json:"schedule"`
	Next       *time.Time `json:"next,omitempty"`
	Last       *time.Time `json:"last,omitempty"`
	Paused     bool       `json:"paused"`
	Generation int64      `json:"generation"`
}

func recurringState(paused bool) string {
	if paused {
		return "paused"
	}
	return "active"
}

func (a *app) recurringLs(ctx context.Context, args []string) error {
	c := a.newCommand("recurring ls", "recurring ls", "  postbus recurring ls\n  postbus recurring ls --json\n")
	pos, err := a.parse(c, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("recurring ls takes no arguments")
	}
	o, err := a.openRecurring(ctx, c)
	if err != nil {
		return err
	}
	defer o.Close()
	infos, err := o.bus.Recurrings(ctx)
	if err != nil {
		return err
	}
	if c.json {
		out := struct {
			Count int             `json:"count"`
			Rows  []recurringJSON `json:"rows"`
		}{Count: len(infos), Rows: []recurringJSON{}}
		for _, i := range infos {
			out.Rows = append(out.Rows, recurringJSON{Name: i.Name, Schedule: i.Schedule, Next: jsonTime(i.Next),
				Last: jsonTime(i.Last), Paused: i.Paused, Generation: i.Generation})
		}
		return writeJSON(a.stdout, out)
	}
	var cells [][]string
	for _, i := range infos {
		cells = append(cells, []string{i.Name, truncate(i.Schedule, 40), fmtTime(i.Next), fmtTime(i.Last),
			recurringState(i.Paused), strconv.FormatInt(i.Generation, 10)})
	}
	table(a.stdout, "NAME\tSCHEDULE\tNEXT\tLAST\tSTATE\tGENERATION", cells)
	fmt.Fprintf(a.stdout, "%d schedule(s)\n", len(infos))
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
		}{recurringJSON{Name: rec.Name, Schedule: rec.Schedule, Last: jsonTime(rec.Last), Paused: rec.Paused,
			Generation: rec.Generation}, rec.Fingerprint, ticks})
	}
	fmt.Fprintf(a.stdout, "Name:        %s\nSchedule:    %s\nState:       %s\nGeneration:  %d\nFingerprint: %s\nDealt with:  %s\n",
		rec.Name, rec.Schedule, recurringState(rec.Paused), rec.Generation, rec.Fingerprint, fmtTime(rec.Last))
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
