package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbus/bus/postgres"
)

// sampler measures the workers and the store every interval: each worker
// process's resident memory (/proc/<pid>/status VmRSS), open files
// (/proc/<pid>/fd), goroutines and heap (its own "stats" lines), and the
// fleet's PostgreSQL connections (pg_stat_activity by application_name)
// and the rows of the run's tables.
type sampler struct {
	fleet     *fleet
	pool      *pgxpool.Pool // the soak's own connections
	n         names
	transport string
	outbox    bool
	log       *slog.Logger

	byName map[string]*series
	order  []string
}

// run samples every interval until ctx ends.
func (s *sampler) run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		s.sample(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *sampler) add(name, unit string, floor float64, at time.Time, v float64) {
	if s.byName == nil {
		s.byName = map[string]*series{}
	}
	sr, ok := s.byName[name]
	if !ok {
		sr = &series{name: name, unit: unit, floor: floor}
		s.byName[name] = sr
		s.order = append(s.order, name)
	}
	sr.pts = append(sr.pts, point{at: at, v: v})
}

// Floors of the growth verdict: rises below these are noise.
const (
	floorRSSMiB     = 8
	floorHeapMiB    = 8
	floorGoroutines = 25
	floorFiles      = 10
	floorConns      = 3
	floorRows       = 1000
)

func (s *sampler) sample(ctx context.Context) {
	now := time.Now()
	for _, p := range s.fleet.running() {
		prefix := fmt.Sprintf("worker %d pid %d", p.slot, p.pid())
		if kib, err := residentKiB(p.pid()); err == nil {
			s.add(prefix+" rss", "MiB", floorRSSMiB, now, float64(kib)/1024)
		}
		// A process that is exiting has closed its files: no sample.
		if n, err := openFiles(p.pid()); err == nil && n > 0 {
			s.add(prefix+" fds", "", floorFiles, now, float64(n))
		}
		if g, heap, ok := p.stats(); ok {
			s.add(prefix+" goroutines", "", floorGoroutines, now, float64(g))
			s.add(prefix+" heap", "MiB", floorHeapMiB, now, float64(heap)/(1<<20))
		}
	}
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	count := func(name, unit string, floor float64, sql string, args ...any) {
		var v int64
		if err := s.pool.QueryRow(qctx, sql, args...).Scan(&v); err != nil {
			s.log.Warn("sample", slog.String("series", name), slog.Any("error", err))
			return
		}
		s.add(name, unit, floor, now, float64(v))
	}
	count("db connections (all workers)", "", floorConns,
		`SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE $1`, s.n.workerApp()+"-w%")
	table := func(t string) string { return pgx.Identifier{s.n.schema(), t}.Sanitize() }
	count("scheduled rows", "", floorRows, `SELECT count(*) FROM `+table(postgres.DefaultTable))
	if s.outbox {
		count("inbox rows", "", floorRows, `SELECT count(*) FROM `+table(postgres.DefaultTable+"_inbox"))
	}
	if s.transport == transportPostgres {
		count("transport rows", "", floorRows, `SELECT count(*) FROM `+table(postgres.DefaultTablePrefix+"_messages"))
	}
}

// result returns the series in the order they first appeared.
func (s *sampler) result() []series {
	out := make([]series, 0, len(s.order))
	for _, name := range s.order {
		out = append(out, *s.byName[name])
	}
	return out
}
