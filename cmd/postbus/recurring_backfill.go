package main

import (
	"context"
	"fmt"
	"time"

	"github.com/postbus/bus"
)

// recurringBackfill stores one occurrence of a schedule made at runtime
// for each of its ticks in [--from, --to) (Bus.BackfillRecurring). The
// CLI builds the occurrences from the stored definition; a schedule
// declared in code can only be backfilled by a process that declares it,
// which has the code that builds its message.
func (a *app) recurringBackfill(ctx context.Context, args []string) error {
	c := a.newCommand("recurring backfill", "recurring backfill NAME --from TIME --to TIME [--dry-run]",
		"  postbus recurring backfill invoices-acme --from 2030-01-01T00:00:00Z --to 2030-01-03T00:00:00Z\n"+
			"  postbus recurring backfill invoices-acme --from -6h --to 0s --dry-run   # the last six hours\n")
	from := c.fs.String("from", "", "the first tick's earliest time: RFC 3339, or a duration from now (-6h)")
	to := c.fs.String("to", "", "the end of the range, not included: RFC 3339, or a duration from now")
	dry := c.fs.Bool("dry-run", false, "count the occurrences it would store, store nothing")
	pos, err := a.parse(c, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("recurring backfill takes one schedule name")
	}
	if *from == "" || *to == "" {
		return usagef("recurring backfill: give --from and --to")
	}
	now := a.now()
	start, err := parseWhen(*from, now)
	if err != nil {
		return err
	}
	end, err := parseWhen(*to, now)
	if err != nil {
		return err
	}
	if !end.After(start) {
		return usagef("recurring backfill: --to must be after --from")
	}
	name := pos[0]
	o, err := a.openRecurring(ctx, c)
	if err != nil {
		return err
	}
	defer o.Close()
	rec, err := a.loadRecurring(ctx, o, name)
	if err != nil {
		return err
	}
	if rec.Spec == nil {
		return fmt.Errorf("recurring backfill %s: the schedule is declared in code: backfill it from a process that declares it "+
			"(Bus.BackfillRecurring), which builds its messages", name)
	}
	n, err := a.countBackfill(ctx, rec, start, end)
	if err != nil {
		return fmt.Errorf("recurring backfill %s: %w", name, err)
	}
	if !*dry {
		if err := o.bus.BackfillRecurring(ctx, name, start, end); err != nil {
			return fmt.Errorf("recurring backfill %s: %w", name, err)
		}
	}
	if c.json {
		return writeJSON(a.stdout, struct {
			DryRun bool      `json:"dry_run"`
			Name   string    `json:"name"`
			From   time.Time `json:"from"`
			To     time.Time `json:"to"`
			Count  int       `json:"count"`
		}{*dry, name, start.UTC(), end.UTC(), n})
	}
	verb := "stored"
	if *dry {
		verb = "dry run: would have stored"
	}
	fmt.Fprintf(a.stdout, "%s %d occurrence(s) of %s for its ticks from %s to %s\n", verb, n, name, fmtTime(start), fmtTime(end))
	return nil
}

// countBackfill counts the occurrences a backfill of rec over [from, to)
// stores, by running it on a copy of the record in a throwaway store.
func (a *app) countBackfill(ctx context.Context, rec bus.RecurringRecord, from, to time.Time) (int, error) {
	mem := bus.NewMemoryPersistence()
	if _, _, err := mem.DeclareRecurring(ctx, bus.RecurringRecord{Name: rec.Name, Fingerprint: rec.Fingerprint,
		Schedule: rec.Schedule, Spec: rec.Spec}); err != nil {
		return 0, err
	}
	b, err := a.recurringBus(&backends{Persistence: mem})
	if err != nil {
		return 0, err
	}
	defer func() { _ = b.Stop(context.Background()) }()
	if err := b.BackfillRecurring(ctx, rec.Name, from, to); err != nil {
		return 0, err
	}
	st, err := mem.StatsScheduled(ctx, a.now())
	return int(st.Count), err
}
