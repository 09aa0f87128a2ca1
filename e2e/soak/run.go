package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"github.com/postbus/bus"
	"github.com/postbus/bus/internal/faultproxy"
	"github.com/postbus/bus/postgres"
)

// run is the soak: set up, start the workers, produce under faults, wait,
// analyse, clean up. It reports whether the run found a defect.
func run(ctx context.Context, c config) (failed bool, err error) {
	if !slices.Contains(transports, c.transport) {
		return false, fmt.Errorf("unknown transport %q (want one of %v)", c.transport, transports)
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
	if c.outbox {
		if err := createEffects(ctx, pool, n); err != nil {
			return false, err
		}
	}
	broker, stopEmulator, err := startEmulator(ctx, c.transport)
	if err != nil {
		return false, err
	}
	defer stopEmulator()

	// The soak's own connection to the Redis persistence: connection
	// kills, the rows left and the cleanup.
	var rdb *goredis.Client
	if c.persistence == persistenceRedis {
		if rdb, err = redisClient(redisURL(), n.workerApp()+"-soak"); err != nil {
			return false, err
		}
		defer rdb.Close()
		defer func() {
			cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := deleteRedisStore(cctx, rdb, n); err != nil {
				log.Warn("cleanup", slog.Any("error", err))
			}
		}()
	}
	dbProxy, brokerProxy, err := proxies(c.transport, c.persistence, broker)
	if err != nil {
		return false, err
	}
	defer dbProxy.Close()
	wf := workerFlags{
		transport: c.transport, persistence: c.persistence, dir: dir, names: n,
		outbox: c.outbox, retention: c.retention, lease: c.lease,
	}
	if c.sample > 0 {
		wf.stats = min(c.sample, 5*time.Second)
	}
	if c.persistence == persistenceRedis {
		wf.redisStore, err = withHost(redisURL(), dbProxy.Addr())
	} else {
		wf.postgres, err = withHost(postgresURL(), dbProxy.Addr())
	}
	if err != nil {
		return false, err
	}
	wf.broker = broker
	if brokerProxy != nil {
		defer brokerProxy.Close()
		if wf.broker, err = withHost(broker, brokerProxy.Addr()); err != nil {
			return false, err
		}
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
	prodDB, prodRedis, prodBroker := postgresURL(), redisURL(), broker
	if c.cutProducer {
		prodDB, prodRedis, prodBroker = wf.postgres, wf.redisStore, wf.broker
	}
	var prodStore bus.Persistence
	var prodPool *pgxpool.Pool
	if c.persistence == persistenceRedis {
		store, closeStore, err := openRedisStore(prodRedis, n, n.workerApp()+"-producer", log)
		if err != nil {
			return false, err
		}
		defer closeStore()
		prodStore = store
	} else {
		if prodPool, err = soakPool(ctx, prodDB, n.workerApp()+"-producer"); err != nil {
			return false, err
		}
		defer prodPool.Close()
		if prodStore, err = postgres.New(prodPool, postgres.Options{Schema: n.schema(), Logger: log}); err != nil {
			return false, fmt.Errorf("producer store: %w", err)
		}
	}
	producer, closeProducer, err := startProducer(ctx, c.transport, prodBroker, n, prodStore, prodPool, log)
	if err != nil {
		return false, err
	}
	defer closeProducer()

	rng := mrand.New(mrand.NewPCG(c.seed, 1))
	msgs := planMessages(rng, n.run, c.n, c.maxDelay)
	plan := planFaults(rng, map[string]int{
		faultKill: c.kills, faultStop: c.stops, faultTerminate: c.terminations, faultCut: c.cuts,
	}, 3*time.Second, c.duration+c.maxDelay)
	if c.faultEvery > 0 {
		plan = planEvery(c.faultEvery, c.faultEvery, c.duration+c.maxDelay)
	}
	in := &injector{
		rng: mrand.New(mrand.NewPCG(c.seed, 2)), fleet: fl, pool: pool, redis: rdb, app: n.workerApp(),
		broker: brokerProxy, database: dbProxy, log: log, spareSlot0: c.faultEvery > 0,
	}
	smp := &sampler{fleet: fl, pool: pool, n: n, transport: c.transport, outbox: c.outbox, log: log}
	sctx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		if c.sample > 0 {
			smp.run(sctx, c.sample)
		}
	}()
	out := &printer{start: time.Now(), load: loadAverage(), maxDelay: c.maxDelay}
	mode := ""
	if c.outbox {
		mode = " with the outbox"
	}
	if c.persistence == persistenceRedis {
		mode += " on the Redis persistence"
	}
	fmt.Printf("soak %s%s: %d workers, %d messages over %s, %d faults, seed %d, run %s\n",
		c.transport, mode, c.workers, c.n, c.duration, len(plan), c.seed, n.run)
	faultsDone := make(chan []fault, 1)
	go func() { faultsDone <- in.run(ctx, out.start, plan) }()
	lag := produce(ctx, producer, msgs, c.duration, log)
	faults := <-faultsDone
	if ctx.Err() != nil {
		stopSampling()
		<-sampled
		return false, fmt.Errorf("interrupted: %w", ctx.Err())
	}

	effects := func() *effectsReport {
		if !c.outbox {
			return nil
		}
		qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		counts, err := countEffects(qctx, pool, n)
		if err != nil {
			log.Warn("effects", slog.Any("error", err))
			return nil
		}
		return analyzeEffects(msgs, counts)
	}
	settle(ctx, dir, msgs, faults, c, effects, log)
	stopSampling()
	<-sampled
	fl.shutdown(30 * time.Second)
	events, torn, err := readJournals(dir)
	if err != nil {
		return false, err
	}
	ev := evidence{faults: faults, dbIsBroker: c.transport == "postgres"}
	var er *effectsReport
	if c.outbox {
		if er = effects(); er == nil {
			return true, errors.New("the effects table could not be read")
		}
		// A handling whose commit failed ran again: its journal line is a
		// duplicate, its rolled-back effects are not.
		ev.committed = er.committed
	}
	r := analyze(msgs, events, ev)
	rows := storeRows(pool, n)
	if rdb != nil {
		rows = redisStoreRows(rdb, n)
	}
	out.print(os.Stdout, r, msgs, faults, lag, torn, rows, fl.unexpectedExits())
	failed = len(fl.unexpectedExits()) > 0 || r.failed()
	if er != nil {
		printEffects(os.Stdout, er)
		failed = failed || er.failed()
	}
	if c.sample > 0 {
		failed = printTrends(os.Stdout, smp.result()) || failed
	}
	return failed, nil
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

// proxies starts the TCP proxies the workers reach their store (PostgreSQL
// or, with the Redis persistence, Redis) and the broker at brokerURL
// through; broker is nil when the transport cannot be cut (see cuttable).
func proxies(transport, persistence, brokerURL string) (db, broker *faultproxy.Proxy, err error) {
	dbHost, err := hostOf(storeURL(persistence))
	if err != nil {
		return nil, nil, err
	}
	if db, err = faultproxy.Listen(dbHost); err != nil {
		return nil, nil, err
	}
	if !cuttable(transport) {
		return db, nil, nil
	}
	brokerHost, err := hostOf(brokerURL)
	if err != nil {
		_ = db.Close()
		return nil, nil, err
	}
	if broker, err = faultproxy.Listen(brokerHost); err != nil {
		_ = db.Close()
		return nil, nil, err
	}
	return db, broker, nil
}

// startProducer starts the send-only bus of the producer on the broker at
// brokerURL and store (pool serves the PostgreSQL transport; nil without).
func startProducer(ctx context.Context, transport, brokerURL string, n names, store bus.Persistence, pool *pgxpool.Pool, log *slog.Logger) (*bus.Bus, func(), error) {
	tr, closeTr, err := openTransport(transport, brokerURL, n, pool, 0, log)
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
// messages (or, with effects, their effects) are missing, as long as they
// keep arriving: up to c.wait after the last time the missing count fell,
// and no more than maxSettle in all (see patience).
func settle(ctx context.Context, dir string, msgs []*message, faults []fault, c config, effects func() *effectsReport, log *slog.Logger) {
	last := time.Now()
	for _, m := range msgs {
		last = maxTime(last, m.due)
	}
	for _, f := range faults {
		last = maxTime(last, f.end)
	}
	log.Info("waiting for late handlings", slog.Duration("grace", time.Until(last.Add(c.grace)).Round(time.Second)))
	sleepCtx(ctx, time.Until(last.Add(c.grace)))
	p := newPatience(time.Now(), c.wait, maxSettle)
	for ctx.Err() == nil {
		events, _, err := readJournals(dir)
		if err != nil {
			return
		}
		missing := len(analyze(msgs, events, evidence{}).lost)
		if er := effects(); er != nil {
			missing += er.missing()
		}
		if missing == 0 || !p.wait(time.Now(), missing) {
			return
		}
		log.Info("messages still missing", slog.Int("missing", missing))
		sleepCtx(ctx, 5*time.Second)
	}
}

// maxSettle bounds settle's wait after the grace, however steadily
// missing messages still arrive.
const maxSettle = 10 * time.Minute

// patience decides how long settle waits for what is missing: a receiver
// that fell behind under load is still draining while the count falls,
// and a message that is really lost stops the count. It waits while the
// count fell within the last idle, and never past the cap.
type patience struct {
	idle          time.Duration
	until         time.Time // the cap
	best          int       // the lowest missing count seen
	lastProgress  time.Time
	seenAnyCounts bool
}

func newPatience(now time.Time, idle, cap time.Duration) *patience {
	return &patience{idle: idle, until: now.Add(cap), lastProgress: now}
}

// wait records the missing count at now and reports whether to wait on.
func (p *patience) wait(now time.Time, missing int) bool {
	if !p.seenAnyCounts || missing < p.best {
		p.best, p.lastProgress, p.seenAnyCounts = missing, now, true
	}
	return now.Before(p.until) && now.Sub(p.lastProgress) < p.idle
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
