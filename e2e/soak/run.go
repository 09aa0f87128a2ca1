package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbus/bus"
	"github.com/postbus/bus/internal/faultproxy"
	"github.com/postbus/bus/postgres"
)

// run is the soak: set up, start the workers, produce under faults, wait,
// analyse, clean up. It reports whether the run found a defect.
func run(ctx context.Context, c config) (failed bool, err error) {
	if c.transport != "rabbitmq" && c.transport != "nats" {
		return false, fmt.Errorf("unknown transport %q (want rabbitmq or nats)", c.transport)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	var id [4]byte
	_, _ = rand.Read(id[:])
	n := names{run: hex.EncodeToString(id[:])}
	if c.seed == 0 {
		c.seed = mrand.Uint64()
	}
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

	dbProxy, brokerProxy, err := proxies(c.transport)
	if err != nil {
		return false, err
	}
	defer dbProxy.Close()
	defer brokerProxy.Close()
	wf := workerFlags{transport: c.transport, dir: dir, names: n}
	if wf.postgres, err = withHost(postgresURL(), dbProxy.Addr()); err != nil {
		return false, err
	}
	if wf.broker, err = withHost(brokerURL(c.transport), brokerProxy.Addr()); err != nil {
		return false, err
	}
	exe, err := os.Executable()
	if err != nil {
		return false, fmt.Errorf("own executable: %w", err)
	}
	fl := &fleet{exe: exe, args: wf.args, dir: dir, log: log}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := deleteTopology(cctx, c.transport, n); err != nil {
			log.Warn("cleanup", slog.Any("error", err))
		}
	}()
	defer fl.shutdown(30 * time.Second) // no-op after the shutdown below
	for slot := range c.workers {
		if _, err := fl.start(ctx, slot); err != nil {
			return false, err
		}
	}

	// The producer reaches the services directly, or through the proxies
	// (then cuts fail its sends too, and it retries them).
	prodDB, prodBroker := postgresURL(), brokerURL(c.transport)
	if c.cutProducer {
		prodDB, prodBroker = wf.postgres, wf.broker
	}
	prodPool, err := soakPool(ctx, prodDB, n.workerApp()+"-producer")
	if err != nil {
		return false, err
	}
	defer prodPool.Close()
	producer, closeProducer, err := startProducer(ctx, c.transport, prodBroker, n, prodPool, log)
	if err != nil {
		return false, err
	}
	defer closeProducer()

	rng := mrand.New(mrand.NewPCG(c.seed, 1))
	msgs := planMessages(rng, n.run, c.n)
	plan := planFaults(rng, map[string]int{
		faultKill: c.kills, faultStop: c.stops, faultTerminate: c.terminations, faultCut: c.cuts,
	}, 3*time.Second, c.duration+maxDelay)
	in := &injector{
		rng: mrand.New(mrand.NewPCG(c.seed, 2)), fleet: fl, pool: pool, app: n.workerApp(),
		broker: brokerProxy, database: dbProxy, log: log,
	}
	out := &printer{start: time.Now(), load: loadAverage()}
	fmt.Printf("soak %s: %d workers, %d messages over %s, seed %d, run %s\n",
		c.transport, c.workers, c.n, c.duration, c.seed, n.run)
	faultsDone := make(chan []fault, 1)
	go func() { faultsDone <- in.run(ctx, out.start, plan) }()
	lag := produce(ctx, producer, msgs, c.duration, log)
	faults := <-faultsDone
	if ctx.Err() != nil {
		return false, fmt.Errorf("interrupted: %w", ctx.Err())
	}

	settle(ctx, dir, msgs, faults, c, log)
	fl.shutdown(30 * time.Second)
	events, torn, err := readJournals(dir)
	if err != nil {
		return false, err
	}
	r := analyze(msgs, events, faults)
	out.print(os.Stdout, r, msgs, faults, lag, torn, storeRows(pool, n), fl.unexpectedExits())
	return r.failed() || len(fl.unexpectedExits()) > 0, nil
}

// setupStore connects the soak itself (soakPool) and sets up the run's
// schema; the caller closes the pool.
func setupStore(ctx context.Context, n names, log *slog.Logger) (*pgxpool.Pool, error) {
	pool, err := soakPool(ctx, postgresURL(), n.workerApp()+"-soak")
	if err != nil {
		return nil, err
	}
	setup, err := postgres.New(pool, postgres.Options{Schema: n.schema(), Logger: log})
	if err == nil {
		err = setup.Setup(ctx)
	}
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres store: %w", err)
	}
	return pool, nil
}

// soakPool connects the soak itself (setup, fault injection, cleanup) or
// its producer to PostgreSQL at url, under an application_name that backend
// terminations do not select.
func soakPool(ctx context.Context, url, app string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("postgres url: %w", err)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres not reachable (set POSTBUS_TEST_POSTGRES_URL): %w", err)
	}
	return pool, nil
}

// proxies starts the TCP proxies the workers reach PostgreSQL and the
// broker through.
func proxies(transport string) (db, broker *faultproxy.Proxy, err error) {
	dbHost, err := hostOf(postgresURL())
	if err != nil {
		return nil, nil, err
	}
	brokerHost, err := hostOf(brokerURL(transport))
	if err != nil {
		return nil, nil, err
	}
	if db, err = faultproxy.Listen(dbHost); err != nil {
		return nil, nil, err
	}
	if broker, err = faultproxy.Listen(brokerHost); err != nil {
		_ = db.Close()
		return nil, nil, err
	}
	return db, broker, nil
}

// startProducer starts the send-only bus of the producer on the broker at
// brokerURL and a store on pool.
func startProducer(ctx context.Context, transport, brokerURL string, n names, pool *pgxpool.Pool, log *slog.Logger) (*bus.Bus, func(), error) {
	store, err := postgres.New(pool, postgres.Options{Schema: n.schema(), Logger: log})
	if err != nil {
		return nil, nil, fmt.Errorf("producer store: %w", err)
	}
	tr, closeTr, err := openTransport(transport, brokerURL, n, log)
	if err != nil {
		return nil, nil, err
	}
	b, err := bus.New(bus.Config{
		Endpoint: n.producer(), Transport: tr, Persistence: store, SendOnly: true, Logger: log,
		ErrorQueue: n.errorQueue(), DeadLetterQueue: n.deadLetterQueue(),
	})
	if err == nil {
		err = bus.Route[Work](b, n.endpoint())
	}
	if err == nil {
		err = b.Start(ctx)
	}
	if err != nil {
		closeTr()
		return nil, nil, fmt.Errorf("producer: %w", err)
	}
	return b, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = b.Stop(sctx)
		closeTr()
	}, nil
}

// settle waits until grace after the last due time and fault, then, while
// messages are missing, up to c.wait more.
func settle(ctx context.Context, dir string, msgs []*message, faults []fault, c config, log *slog.Logger) {
	last := time.Now()
	for _, m := range msgs {
		last = maxTime(last, m.due)
	}
	for _, f := range faults {
		last = maxTime(last, f.end)
	}
	log.Info("waiting for late handlings", slog.Duration("grace", time.Until(last.Add(c.grace)).Round(time.Second)))
	sleepCtx(ctx, time.Until(last.Add(c.grace)))
	deadline := time.Now().Add(c.wait)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		events, _, err := readJournals(dir)
		if err != nil {
			return
		}
		missing := len(analyze(msgs, events, nil).lost)
		if missing == 0 {
			return
		}
		log.Info("messages still missing", slog.Int("missing", missing))
		sleepCtx(ctx, 5*time.Second)
	}
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
