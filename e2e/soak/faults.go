package main

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"github.com/postbus/bus/internal/faultproxy"
)

// Kinds of fault.
const (
	faultKill      = "kill"      // SIGKILL a worker, then start it again
	faultStop      = "stop"      // SIGSTOP a worker, SIGCONT it a few seconds later
	faultTerminate = "terminate" // pg_terminate_backend, or with the Redis persistence CLIENT KILL, on every worker store connection
	faultCut       = "cut"       // close the workers' connections through a proxy for cutFor
)

// cutFor is how long a cut lasts.
const cutFor = 3 * time.Second

// fault is one fault as it happened. A kill lasts an instant (start = end);
// a stop lasts from SIGSTOP to SIGCONT.
type fault struct {
	kind   string
	slot   int    // kill, stop
	pid    int    // kill, stop
	what   string // cut: "broker", "database" or "broker+database"; terminate: backends ended
	start  time.Time
	end    time.Time
	failed error // the fault could not be injected
}

// holds reports whether the fault can explain a duplicate: a worker killed
// or stopped while it held a message.
func (f fault) holds() bool { return f.kind == faultKill || f.kind == faultStop }

func (f fault) String() string {
	switch f.kind {
	case faultKill:
		return fmt.Sprintf("kill worker %d (pid %d)", f.slot, f.pid)
	case faultStop:
		return fmt.Sprintf("stop worker %d (pid %d) for %s", f.slot, f.pid, f.end.Sub(f.start).Round(100*time.Millisecond))
	case faultTerminate:
		return "terminate backends: " + f.what
	}
	return "cut " + f.what + " for " + f.end.Sub(f.start).Round(100*time.Millisecond).String()
}

// plannedFault is a fault to inject at offset from the start of the run.
type plannedFault struct {
	kind   string
	offset time.Duration
}

// planFaults spreads count faults of each kind at random offsets in
// [from, to), in time order.
func planFaults(rng *rand.Rand, counts map[string]int, from, to time.Duration) []plannedFault {
	var plan []plannedFault
	for _, kind := range []string{faultKill, faultStop, faultTerminate, faultCut} {
		for range counts[kind] {
			plan = append(plan, plannedFault{kind: kind, offset: from + time.Duration(rng.Int64N(int64(to-from)))})
		}
	}
	slices.SortFunc(plan, func(a, b plannedFault) int { return int(a.offset - b.offset) })
	return plan
}

// planEvery puts one fault every interval in [from, to), the kinds in turn
// (kill, stop, terminate, cut, kill, …): the long soak's plan.
func planEvery(interval, from, to time.Duration) []plannedFault {
	kinds := []string{faultKill, faultStop, faultTerminate, faultCut}
	var plan []plannedFault
	for i, at := 0, from; at < to; i, at = i+1, at+interval {
		plan = append(plan, plannedFault{kind: kinds[i%len(kinds)], offset: at})
	}
	return plan
}

// injector carries out a fault plan against the workers.
type injector struct {
	rng   *rand.Rand
	fleet *fleet
	pool  *pgxpool.Pool // the soak's own connections, not the workers'
	// redis, with the Redis persistence, is the soak's own connection to
	// Redis: a termination kills the workers' store connections there.
	redis    *goredis.Client
	app      string            // the workers' application_name
	broker   *faultproxy.Proxy // nil: the workers' broker cannot be cut
	database *faultproxy.Proxy
	log      *slog.Logger
	// spareSlot0 keeps slot 0 from kills, so one worker process lives the
	// whole run and its resource series spans it.
	spareSlot0 bool
}

// run injects the plan's faults one after another (a fault that overruns
// delays the next) and returns what happened. It stops early when ctx ends.
func (in *injector) run(ctx context.Context, start time.Time, plan []plannedFault) []fault {
	var done []fault
	for _, p := range plan {
		select {
		case <-ctx.Done():
			return done
		case <-time.After(time.Until(start.Add(p.offset))):
		}
		f := in.inject(ctx, p.kind)
		if f.failed != nil {
			in.log.Warn("fault not injected", slog.String("fault", f.String()), slog.Any("error", f.failed))
		} else {
			in.log.Info("fault", slog.String("at", f.start.Sub(start).Round(time.Millisecond).String()), slog.String("fault", f.String()))
		}
		done = append(done, f)
	}
	return done
}

func (in *injector) inject(ctx context.Context, kind string) fault {
	f := fault{kind: kind, slot: in.rng.IntN(in.fleet.size())}
	if kind == faultKill && in.spareSlot0 && in.fleet.size() > 1 {
		f.slot = 1 + in.rng.IntN(in.fleet.size()-1)
	}
	switch kind {
	case faultKill:
		var err error
		f.pid, f.start, err = in.fleet.kill(f.slot)
		f.end = f.start
		if err != nil {
			f.failed = err
			return f
		}
		sleepCtx(ctx, time.Second)
		if _, err := in.fleet.start(context.WithoutCancel(ctx), f.slot); err != nil {
			f.failed = fmt.Errorf("restart: %w", err)
		}
	case faultStop:
		p := in.fleet.current(f.slot)
		f.pid = p.pid()
		f.start = time.Now()
		if f.failed = pause(p.cmd.Process); f.failed != nil {
			return f
		}
		sleepCtx(ctx, 2*time.Second+time.Duration(in.rng.Int64N(int64(3*time.Second))))
		f.failed = resume(p.cmd.Process)
		f.end = time.Now()
	case faultTerminate:
		f.start = time.Now()
		var n int
		if in.redis != nil {
			n, f.failed = killRedisClients(ctx, in.redis, in.app+"-w")
			f.end = time.Now()
			f.what = fmt.Sprint(n)
			break
		}
		f.failed = in.pool.QueryRow(ctx,
			`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name LIKE $1`, in.app+"-w%").Scan(&n)
		f.end = time.Now()
		f.what = fmt.Sprint(n)
	case faultCut:
		var proxies []*faultproxy.Proxy
		choice := in.rng.IntN(3)
		if in.broker == nil {
			choice = 1
		}
		switch choice {
		case 0:
			f.what, proxies = "broker", []*faultproxy.Proxy{in.broker}
		case 1:
			f.what, proxies = "database", []*faultproxy.Proxy{in.database}
		default:
			f.what, proxies = "broker+database", []*faultproxy.Proxy{in.broker, in.database}
		}
		f.start = time.Now()
		for _, p := range proxies {
			p.Cut()
		}
		sleepCtx(ctx, cutFor)
		for _, p := range proxies {
			p.Restore()
		}
		f.end = time.Now()
	}
	return f
}

// sleepCtx sleeps for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
