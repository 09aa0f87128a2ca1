package main

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbus/bus"
	"github.com/postbus/bus/postgres"
)

// Runtime schedules in the recurring workload: while the workers run and
// one is killed every -kill-every, the soak itself sets -runtime schedules
// with SetRecurring, replaces the definition of every second one a third
// into the window and deletes every third one two thirds into it. Each
// definition's occurrences carry its number (Tick.Def), and the workers
// journal them under "<name>#<def>", so the analysis tells the
// definitions apart: every tick of a live definition once, none of a
// superseded or deleted definition after the change took effect (plus the
// look-ahead, within which a dispatcher may already hold an occurrence:
// that delivery goes ahead, as with CancelScheduled).

// changeMargin is how long after a change returned an occurrence of the
// old definition may still be delivered: the dispatcher's look-ahead
// (250 ms) and some slack.
const changeMargin = 500 * time.Millisecond

// runtimeDef is one definition of a runtime schedule and when it was live.
type runtimeDef struct {
	key      string        // the journal's name for it: "<name>#<def>"
	every    time.Duration // its interval
	from, to time.Time     // set (returned) and replaced or deleted (began); to zero: live at the end
	ended    time.Time     // when the replacement or delete returned
}

// runtimeName is the name of the soak's runtime schedule i.
func runtimeName(i int) string { return fmt.Sprintf("rt-%03d", i) }

// journalName is the name a worker journals an occurrence under: the
// schedule's, with the definition of a runtime one.
func journalName(name string, def int) string {
	if def == 0 {
		return name
	}
	return name + "#" + strconv.Itoa(def)
}

// runRuntimeChanges sets, replaces and deletes count runtime schedules of
// every over [from, to) from a send-only bus of the soak's own, and
// returns each definition with the times it was live.
func runRuntimeChanges(ctx context.Context, pool *pgxpool.Pool, n names, count int, every time.Duration,
	from, to time.Time, log *slog.Logger) ([]runtimeDef, error) {
	store, err := postgres.New(pool, postgres.Options{Schema: n.schema(), Logger: log})
	if err != nil {
		return nil, err
	}
	b, err := bus.New(bus.Config{Endpoint: n.endpoint() + "-admin", Persistence: store, SendOnly: true, Logger: log})
	if err != nil {
		return nil, err
	}
	if err := b.Start(ctx); err != nil {
		return nil, err
	}
	defer b.Stop(context.WithoutCancel(ctx))
	set := func(i, def int, d time.Duration) error {
		return b.SetRecurring(ctx, bus.RecurringSpec{Name: runtimeName(i), Schedule: "@every " + d.String(),
			Message: Tick{Schedule: i, Def: def}, Options: []bus.Option{bus.To(n.endpoint())}})
	}
	live := map[int]*runtimeDef{}
	var defs []*runtimeDef
	for i := range count {
		if err := set(i, 1, every); err != nil {
			return nil, fmt.Errorf("set %s: %w", runtimeName(i), err)
		}
		d := &runtimeDef{key: journalName(runtimeName(i), 1), every: every, from: time.Now()}
		live[i], defs = d, append(defs, d)
	}
	span := to.Sub(from)
	sleepCtx(ctx, time.Until(from.Add(span/3)))
	replaced := every * 3 / 2
	for i := 0; i < count; i += 2 {
		began := time.Now()
		if err := set(i, 2, replaced); err != nil {
			return nil, fmt.Errorf("replace %s: %w", runtimeName(i), err)
		}
		live[i].to, live[i].ended = began, time.Now()
		d := &runtimeDef{key: journalName(runtimeName(i), 2), every: replaced, from: time.Now()}
		live[i], defs = d, append(defs, d)
	}
	sleepCtx(ctx, time.Until(from.Add(2*span/3)))
	for i := 0; i < count; i += 3 {
		began := time.Now()
		if err := b.DeleteRecurring(ctx, runtimeName(i)); err != nil {
			return nil, fmt.Errorf("delete %s: %w", runtimeName(i), err)
		}
		live[i].to, live[i].ended = began, time.Now()
		delete(live, i)
	}
	log.Info("runtime schedules set, replaced and deleted", slog.Int("definitions", len(defs)))
	out := make([]runtimeDef, len(defs))
	for i, d := range defs {
		out[i] = *d
	}
	return out, ctx.Err()
}

// runtimeReport is what the analysis found of the runtime schedules.
type runtimeReport struct {
	expected, delivered int
	lost                []tickKey
	stale               []tickKey // occurrences of a definition after it was replaced or deleted
}

// analyzeRuntime checks the runtime definitions against the handlings:
// every tick t of a definition with from < t <= to (or the end of the
// window) handled at least once, and none with t after the change that
// ended it (plus changeMargin). Duplicates and early handlings are counted
// with the declared schedules' (analyzeRecurring counts every handling).
func analyzeRuntime(defs []runtimeDef, end time.Time, events []event) runtimeReport {
	var r runtimeReport
	handled := map[tickKey]bool{}
	for _, ev := range events {
		if ev.kind != eventHandled {
			continue
		}
		if name, tick, _, ok := parseTickID(ev.id); ok && strings.Contains(name, "#") {
			handled[tickKey{name, tick.UnixNano()}] = true
		}
	}
	for _, d := range defs {
		last := end
		if !d.to.IsZero() {
			last = d.to
		}
		// From changeMargin on: an occurrence a dispatcher held of the
		// definition before may share a tick's ID with this one's.
		first := d.from.Add(changeMargin)
		for t := first.Truncate(d.every).Add(d.every); !t.After(last); t = t.Add(d.every) {
			k := tickKey{d.key, t.UnixNano()}
			r.expected++
			if handled[k] {
				r.delivered++
			} else {
				r.lost = append(r.lost, k)
			}
		}
		if d.to.IsZero() {
			continue
		}
		for k := range handled {
			if k.name == d.key && time.Unix(0, k.tick).After(d.ended.Add(changeMargin)) {
				r.stale = append(r.stale, k)
			}
		}
	}
	slices.SortFunc(r.stale, func(a, b tickKey) int { return int(a.tick - b.tick) })
	return r
}
