package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbus/bus"
	"github.com/postbus/bus/postgres"
)

// Work is the message the soak sends. Fail says how its handler misbehaves
// before it succeeds.
type Work struct {
	Seq  int    `json:"seq"`
	Fail string `json:"fail,omitempty"`
}

// How a Work message's handler fails before it succeeds.
const (
	// failOnce fails the first attempt of each delivery: an immediate retry
	// handles it.
	failOnce = "once"
	// failLater asks for a delayed retry on the first delivery: the message
	// goes through the store again and a dispatcher hands it back.
	failLater = "later"
	// retryLaterAfter is the delay failLater asks for.
	retryLaterAfter = 2 * time.Second
)

var (
	errFailOnce  = errors.New("soak: first attempt fails on purpose")
	errFailLater = errors.New("soak: first delivery asks for a delayed retry")
)

// workerFlags are what the parent passes to a worker process.
type workerFlags struct {
	slot     int
	dir      string
	postgres string // through the parent's proxy
	// persistence is the store (-persistence); with the Redis persistence,
	// redisStore is its URL, through the parent's database proxy.
	persistence string
	redisStore  string
	broker      string // through the parent's proxy
	names       names
	transport   string
	// The recurring workload: schedules of every, declared by each worker.
	workload  string
	schedules int
	every     time.Duration
	lease     time.Duration
	// The -outbox soak: handlers record their effects in the database.
	outbox    bool
	retention time.Duration // the inbox's OutboxConfig.Retention (0: default)
	// stats is how often the worker prints its runtime statistics (0: never).
	stats time.Duration
}

func (w *workerFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&w.slot, "slot", 0, "worker: slot number (the parent restarts a killed worker in its slot)")
	fs.StringVar(&w.dir, "dir", "", "worker: directory of the journals")
	fs.StringVar(&w.postgres, "worker-postgres", "", "worker: PostgreSQL URL")
	fs.StringVar(&w.broker, "worker-broker", "", "worker: broker URL")
	fs.StringVar(&w.redisStore, "worker-redis-store", "", "worker: the Redis persistence's URL (-persistence redis)")
	fs.StringVar(&w.names.run, "run", "", "worker: run ID, which names the schema, queues and stream")
	fs.DurationVar(&w.stats, "stats", 0, "worker: print goroutines and heap this often (0: never)")
}

// args returns the command line of the worker in slot.
func (w workerFlags) args(slot int) []string {
	return []string{
		"-worker", "-transport", w.transport, "-slot", fmt.Sprint(slot), "-dir", w.dir,
		"-worker-postgres", w.postgres, "-worker-broker", w.broker, "-run", w.names.run,
		"-workload", w.workload, "-schedules", fmt.Sprint(w.schedules), "-every", w.every.String(),
		"-lease", w.lease.String(), fmt.Sprintf("-outbox=%t", w.outbox), "-retention", w.retention.String(),
		"-stats", w.stats.String(), "-persistence", w.persistence, "-worker-redis-store", w.redisStore,
	}
}

// runWorker is a worker process: one bus receiving the soak's endpoint and
// dispatching its scheduled messages, until SIGTERM. It prints "ready" on
// stdout once the bus has started.
func runWorker(w workerFlags) error {
	return serveWorker(w, bus.DispatcherConfig{Lease: w.lease}, func(b *bus.Bus, j *journal) error {
		err := bus.Handle(b, func(ctx context.Context, m Work) error {
			immediate, delayed := bus.Attempt(ctx)
			switch {
			case m.Fail == failOnce && immediate == 1:
				return errFailOnce
			case m.Fail == failLater && delayed == 0:
				return bus.RetryAfter(errFailLater, retryLaterAfter)
			}
			id := bus.IncomingMessage(ctx).ID
			if w.outbox {
				if err := recordEffect(ctx, w.names, id, effectWork); err != nil {
					return err
				}
				if err := b.Publish(ctx, Done{Of: id}); err != nil {
					return fmt.Errorf("publish done: %w", err)
				}
			}
			return j.write(eventHandled, id)
		})
		if err != nil {
			return fmt.Errorf("handle: %w", err)
		}
		return nil
	})
}

// serveWorker runs one worker bus until SIGTERM: it opens the process's
// journal, the store (openWorkerStore) and the transport, builds the bus with
// disp, lets declare register its handlers (and schedules), starts it
// (retrying while the services are down, as a supervised service would be
// restarted), prints "ready" and stops the bus on SIGTERM.
func serveWorker(w workerFlags, disp bus.DispatcherConfig, declare func(b *bus.Bus, j *journal) error) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	j, err := openJournal(w.dir, w.slot)
	if err != nil {
		return err
	}
	defer j.Close()

	store, pool, closeStore, err := openWorkerStore(ctx, w, logger)
	if err != nil {
		return err
	}
	defer closeStore()
	newBus := func(endpoint string, concurrency int) (*bus.Bus, func(), error) {
		tr, closeTr, err := openTransport(w.transport, w.broker, w.names, pool, w.lease, logger)
		if err != nil {
			return nil, nil, err
		}
		b, err := bus.New(bus.Config{
			Endpoint: endpoint, Transport: &journaledTransport{Transport: tr, endpoint: w.names.endpoint(), j: j, log: logger},
			Persistence: store, Logger: logger, Concurrency: concurrency, Dispatcher: disp,
			ErrorQueue: w.names.errorQueue(), DeadLetterQueue: w.names.deadLetterQueue(),
			Outbox: bus.OutboxConfig{Enabled: w.outbox, Retention: w.retention},
		})
		if err != nil {
			closeTr()
			return nil, nil, fmt.Errorf("new bus %s: %w", endpoint, err)
		}
		return b, closeTr, nil
	}
	concurrency := 8
	if w.outbox {
		concurrency = outboxConcurrency
	}
	b, closeTr, err := newBus(w.names.endpoint(), concurrency)
	if err != nil {
		return err
	}
	defer closeTr()
	if err := declare(b, j); err != nil {
		return err
	}
	buses := []*bus.Bus{b}
	if w.outbox {
		audit, closeAudit, err := newBus(w.names.audit(), 2)
		if err != nil {
			return err
		}
		defer closeAudit()
		if err := bus.Handle(audit, func(ctx context.Context, m Done) error {
			return recordEffect(ctx, w.names, m.Of, effectEvent)
		}); err != nil {
			return fmt.Errorf("handle done: %w", err)
		}
		buses = append(buses, audit)
	}
	for _, b := range buses {
		if err := startRetrying(ctx, b, logger); err != nil {
			return err
		}
	}
	if w.stats > 0 {
		go printStats(ctx, w.stats)
	}
	fmt.Println("ready")
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var errs []error
	for _, b := range slices.Backward(buses) {
		if err := b.Stop(sctx); err != nil {
			errs = append(errs, fmt.Errorf("stop: %w", err))
		}
	}
	return errors.Join(errs...)
}

// openWorkerStore opens the worker's store: the PostgreSQL store on a pool
// (which the PostgreSQL transport and the -outbox handlers share), or with
// -persistence redis the Redis persistence and no pool. Its connections
// are named slotApp, which backend terminations and Redis connection kills
// select on.
func openWorkerStore(ctx context.Context, w workerFlags, logger *slog.Logger) (bus.Persistence, *pgxpool.Pool, func(), error) {
	if w.persistence == persistenceRedis {
		store, closeStore, err := openRedisStore(w.redisStore, w.names, w.names.slotApp(w.slot), logger)
		return store, nil, closeStore, err
	}
	cfg, err := pgxpool.ParseConfig(w.postgres)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("postgres url: %w", err)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = w.names.slotApp(w.slot)
	cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	if w.outbox {
		cfg.MaxConns = outboxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("postgres pool: %w", err)
	}
	store, err := postgres.New(pool, postgres.Options{Schema: w.names.schema(), Logger: logger})
	if err != nil {
		pool.Close()
		return nil, nil, nil, fmt.Errorf("postgres store: %w", err)
	}
	return store, pool, pool.Close, nil
}

// The -outbox soak's workers share the PostgreSQL server with everything
// else on it (max_connections is 100 by default): each handling holds a
// connection until it commits, so the main bus handles outboxConcurrency
// messages at once and the audit bus 2, and a worker's pool opens at most
// outboxConns, for the handlings, the dispatchers and the PostgreSQL
// transport. Without the outbox the pool's default (4 on a small machine)
// serves.
const (
	outboxConcurrency = 4
	outboxConns       = 10
)

// startRetrying starts b, retrying while the services are down, as a
// supervised service would be restarted.
func startRetrying(ctx context.Context, b *bus.Bus, logger *slog.Logger) error {
	for wait := 250 * time.Millisecond; ; wait = min(2*wait, 4*time.Second) {
		err := b.Start(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("start: %w", err)
		}
		logger.Warn("soak: start failed; retrying", slog.Duration("in", wait), slog.Any("error", err))
		sleepCtx(ctx, wait)
	}
}

// journaledTransport writes an event before each message the worker sends:
// a hand-over when the dispatcher sends to the endpoint's queue (so the
// analysis knows which processes held a scheduled message), parked when a
// message goes to the error or dead-letter queue (or, in the -outbox soak,
// to the audit endpoint: such lines name event IDs the analysis ignores).
type journaledTransport struct {
	bus.Transport
	endpoint string
	j        *journal
	log      *slog.Logger
}

// Identity forwards the wrapped transport's identity, so the rows this
// worker schedules are the ones every soak process dispatches.
func (t *journaledTransport) Identity() string {
	if ti, ok := t.Transport.(bus.TransportIdentity); ok {
		return ti.Identity()
	}
	return ""
}

// Send journals the message, then sends it.
func (t *journaledTransport) Send(ctx context.Context, queue string, env *bus.Envelope) error {
	kind := byte(eventParked)
	if queue == t.endpoint {
		kind = eventHandOver
	}
	t.note(kind, env)
	return t.Transport.Send(ctx, queue, env)
}

// Publish publishes the message without a journal line: the only events
// are the -outbox soak's Done, which the effects table records.
func (t *journaledTransport) Publish(ctx context.Context, env *bus.Envelope) error {
	return t.Transport.Publish(ctx, env)
}

func (t *journaledTransport) note(kind byte, env *bus.Envelope) {
	if err := t.j.write(kind, env.ID); err != nil {
		t.log.Error("soak: cannot journal a hand-over", slog.Any("error", err))
	}
}
