package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// runRecurring is the recurring workload: -workers processes each declare
// -schedules schedules of Every(-every) on one PostgreSQL store and
// deliver their occurrences through the transport; for -duration one
// worker (in turn) is SIGKILLed every -kill-every and started again at
// once. It then waits -grace for the last ticks, stops the workers and
// prints the ticks expected, delivered, lost, duplicates and early, and
// the lateness. It reports whether the run found a defect.
func runRecurring(ctx context.Context, c config) (failed bool, err error) {
	if c.transport != "rabbitmq" && c.transport != "nats" {
		return false, fmt.Errorf("unknown transport %q (want rabbitmq or nats)", c.transport)
	}
	if c.every <= 0 || c.schedules <= 0 || c.workers <= 0 {
		return false, fmt.Errorf("-every, -schedules and -workers must be positive")
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	var id [4]byte
	_, _ = rand.Read(id[:])
	n := names{run: hex.EncodeToString(id[:])}
	dir, err := os.MkdirTemp("", "postbus-soak-"+n.run+"-")
	if err != nil {
		return false, fmt.Errorf("temporary directory: %w", err)
	}
	defer func() {
		if failed || err != nil || c.keep {
			fmt.Printf("journals and worker logs: %s\n", dir)
			return
		}
		_ = os.RemoveAll(dir)
	}()
	pool, err := setupStore(ctx, n, log)
	if err != nil {
		return false, err
	}
	defer pool.Close()
	defer dropSchema(pool, n, log)
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := deleteTopology(cctx, c.transport, n); err != nil {
			log.Warn("cleanup", slog.Any("error", err))
		}
	}()

	exe, err := os.Executable()
	if err != nil {
		return false, fmt.Errorf("own executable: %w", err)
	}
	wf := workerFlags{transport: c.transport, dir: dir, names: n, postgres: postgresURL(), broker: brokerURL(c.transport),
		workload: workloadRecurring, schedules: c.schedules, every: c.every, lease: c.lease}
	fl := &fleet{exe: exe, args: wf.args, dir: dir, log: log}
	defer fl.shutdown(30 * time.Second) // no-op after the shutdown below
	fmt.Printf("soak recurring %s: %d workers, %d schedules of every %s and %d made at runtime, %s, one worker killed every %s, run %s\n",
		c.transport, c.workers, c.schedules, c.every, c.runtime, c.duration, c.killEvery, n.run)
	out := &printer{start: time.Now(), load: loadAverage()}
	before, _ := tableWrites(ctx, pool, n)
	var from time.Time
	for slot := range c.workers {
		if _, err := fl.start(ctx, slot); err != nil {
			return false, err
		}
		if slot == 0 {
			from = time.Now()
		}
	}
	to := from.Add(c.duration)
	type changes struct {
		defs []runtimeDef
		err  error
	}
	changed := make(chan changes, 1)
	go func() {
		defs, err := runRuntimeChanges(ctx, pool, n, c.runtime, c.every, from, to, log)
		changed <- changes{defs, err}
	}()
	kills, dead, err := killInTurn(ctx, fl, c.workers, c.killEvery, to)
	if err != nil {
		return false, err
	}
	ch := <-changed
	if ch.err != nil {
		return false, fmt.Errorf("runtime schedules: %w", ch.err)
	}
	log.Info("waiting for the last ticks", slog.Duration("grace", c.grace))
	sleepCtx(ctx, time.Until(to.Add(c.grace)))
	if ctx.Err() != nil {
		return false, fmt.Errorf("interrupted: %w", ctx.Err())
	}
	fl.shutdown(30 * time.Second)
	after, err := tableWrites(ctx, pool, n)
	if err != nil {
		log.Warn("store writes", slog.Any("error", err))
	}
	events, torn, err := readJournals(dir)
	if err != nil {
		return false, err
	}
	scheds := make([]string, c.schedules)
	for i := range scheds {
		scheds[i] = scheduleName(i)
	}
	r := analyzeRecurring(scheds, c.every, from, to, dead, events, kills)
	rt := analyzeRuntime(ch.defs, to, events)
	printRecurring(os.Stdout, out, r, kills, dead, torn, before, after, fl.unexpectedExits())
	printRuntime(os.Stdout, out, rt, len(ch.defs))
	return r.failed() || rt.failed() || len(fl.unexpectedExits()) > 0, nil
}

// failed reports whether the runtime schedules lost a tick or sent one of
// a definition after it ended.
func (r runtimeReport) failed() bool { return len(r.lost) > 0 || len(r.stale) > 0 }

// printRuntime writes the runtime schedules' part of the report.
func printRuntime(w io.Writer, p *printer, r runtimeReport, defs int) {
	fmt.Fprintf(w, "runtime schedules: %d definitions; ticks expected %d, delivered %d, lost %d; after a replace or delete %d\n",
		defs, r.expected, r.delivered, len(r.lost), len(r.stale))
	for _, k := range r.lost[:min(len(r.lost), maxExamples)] {
		fmt.Fprintf(w, "  lost %s tick %s\n", k.name, p.rel(time.Unix(0, k.tick)))
	}
	for _, k := range r.stale[:min(len(r.stale), maxExamples)] {
		fmt.Fprintf(w, "  after its end: %s tick %s\n", k.name, p.rel(time.Unix(0, k.tick)))
	}
	if r.failed() {
		fmt.Fprintln(w, "FAIL (runtime schedules)")
	}
}

// killInTurn SIGKILLs one worker every interval until to, in turn, and
// starts it again at once. It returns the kills and the spans when no
// worker ran.
func killInTurn(ctx context.Context, fl *fleet, workers int, interval time.Duration, to time.Time) ([]fault, []deadSpan, error) {
	var kills []fault
	var dead []deadSpan
	for i := 0; ; i++ {
		next := time.Now().Add(interval)
		if next.After(to) {
			sleepCtx(ctx, time.Until(to))
			return kills, dead, ctx.Err()
		}
		sleepCtx(ctx, time.Until(next))
		if ctx.Err() != nil {
			return kills, dead, ctx.Err()
		}
		slot := i % workers
		pid, at, err := fl.kill(slot)
		if err != nil {
			return kills, dead, err
		}
		kills = append(kills, fault{kind: faultKill, slot: slot, pid: pid, start: at, end: at})
		if _, err := fl.start(ctx, slot); err != nil {
			return kills, dead, err
		}
		if workers == 1 { // the only worker: nothing ran from the kill until it was ready again
			dead = append(dead, deadSpan{from: at, to: time.Now()})
		}
	}
}

// writes are the row writes to the run's tables, from pg_stat_user_tables.
type writes struct{ ins, upd, del int64 }

// tableWrites sums the inserts, updates and deletes on the run's tables.
// The statistics reach the view within about a second of a commit.
func tableWrites(ctx context.Context, pool *pgxpool.Pool, n names) (writes, error) {
	var w writes
	_, _ = pool.Exec(ctx, "SELECT pg_stat_force_next_flush()")
	err := pool.QueryRow(ctx, `SELECT coalesce(sum(n_tup_ins),0), coalesce(sum(n_tup_upd),0), coalesce(sum(n_tup_del),0)
		FROM pg_stat_user_tables WHERE schemaname = $1`, n.schema()).Scan(&w.ins, &w.upd, &w.del)
	if err != nil {
		return w, fmt.Errorf("pg_stat_user_tables: %w", err)
	}
	return w, nil
}

// printRecurring writes the recurring workload's report.
func printRecurring(w io.Writer, p *printer, r *recurringReport, kills []fault, dead []deadSpan, torn int,
	before, after writes, unexpected []string) {
	fmt.Fprintf(w, "load average: %s at the start, %s at the end\n", p.load, loadAverage())
	fmt.Fprintf(w, "kills %d:", len(kills))
	for _, k := range kills {
		fmt.Fprintf(w, " %s worker %d;", p.rel(k.start), k.slot)
	}
	fmt.Fprintf(w, "\nspans with no worker running: %d\n", len(dead))
	fmt.Fprintf(w, "ticks expected %d, delivered %d, lost %d, duplicates %d (%d explained by a kill), early %d, ticks stored under two IDs %d\n",
		r.expected, r.delivered, len(r.lost), r.duplicates, r.explained, r.early, r.idsPerTick)
	fmt.Fprintf(w, "lateness p50 %.3fs, p99 %.3fs, max %.3fs; handlings %d in all (in and after the window)\n",
		r.percentile(0.5), r.percentile(0.99), r.percentile(1), r.handlings)
	if r.handlings > 0 {
		d := float64(r.handlings)
		fmt.Fprintf(w, "store row writes per handled tick: %.2f inserts, %.2f updates, %.2f deletes\n",
			float64(after.ins-before.ins)/d, float64(after.upd-before.upd)/d, float64(after.del-before.del)/d)
	}
	if len(r.lost) > 0 {
		lost := slices.Clone(r.lost)
		slices.SortFunc(lost, func(a, b tickKey) int { return int(a.tick - b.tick) })
		for _, k := range lost[:min(len(lost), maxExamples)] {
			fmt.Fprintf(w, "  lost %s tick %s\n", k.name, p.rel(time.Unix(0, k.tick)))
		}
	}
	if torn > 0 {
		fmt.Fprintf(w, "torn journal lines %d\n", torn)
	}
	for _, u := range unexpected {
		fmt.Fprintf(w, "unexpected exit: %s\n", u)
	}
	if r.failed() || len(unexpected) > 0 {
		fmt.Fprintln(w, "FAIL")
		return
	}
	fmt.Fprintln(w, "PASS")
}
