package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbus/bus"
	"github.com/postbus/bus/postgres"
)

// Tick is the message of the recurring workload's schedules.
type Tick struct {
	Schedule int `json:"schedule"`
}

// scheduleName is the name of the recurring workload's schedule i.
func scheduleName(i int) string { return fmt.Sprintf("rec-%05d", i) }

// tickID is the journal ID of a handled occurrence: the schedule's name,
// its tick in Unix nanoseconds and the message ID, joined by '|'.
func tickID(name string, tick time.Time, msgID string) string {
	return fmt.Sprintf("%s|%d|%s", name, tick.UnixNano(), msgID)
}

// parseTickID splits a journal ID written by tickID.
func parseTickID(id string) (name string, tick time.Time, msgID string, ok bool) {
	f := strings.Split(id, "|")
	if len(f) != 3 {
		return "", time.Time{}, "", false
	}
	var ns int64
	if _, err := fmt.Sscan(f[1], &ns); err != nil {
		return "", time.Time{}, "", false
	}
	return f[0], time.Unix(0, ns), f[2], true
}

// runRecurringWorker is a worker process of the recurring workload: one
// bus that declares every schedule, receives their occurrences and
// dispatches the store, until SIGTERM. It journals each handled occurrence
// and prints "ready" on stdout once the bus has started (its schedules are
// reconciled by then).
func runRecurringWorker(w workerFlags) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	j, err := openJournal(w.dir, w.slot)
	if err != nil {
		return err
	}
	defer j.Close()

	cfg, err := pgxpool.ParseConfig(w.postgres)
	if err != nil {
		return fmt.Errorf("postgres url: %w", err)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = w.names.workerApp()
	cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("postgres pool: %w", err)
	}
	defer pool.Close()
	store, err := postgres.New(pool, postgres.Options{Schema: w.names.schema(), Logger: logger})
	if err != nil {
		return fmt.Errorf("postgres store: %w", err)
	}
	tr, closeTr, err := openTransport(w.transport, w.broker, w.names, logger)
	if err != nil {
		return err
	}
	defer closeTr()

	b, err := bus.New(bus.Config{
		Endpoint: w.names.endpoint(), Transport: &journaledTransport{Transport: tr, endpoint: w.names.endpoint(), j: j, log: logger},
		Persistence: store, Logger: logger, Concurrency: 8, Dispatcher: bus.DispatcherConfig{Lease: w.lease},
		ErrorQueue: w.names.errorQueue(), DeadLetterQueue: w.names.deadLetterQueue(),
	})
	if err != nil {
		return fmt.Errorf("new bus: %w", err)
	}
	err = bus.Handle(b, func(ctx context.Context, m Tick) error {
		env := bus.IncomingMessage(ctx)
		tick, err := time.Parse(time.RFC3339Nano, env.Header(bus.HeaderRecurringTick))
		if err != nil {
			return bus.Unrecoverable(fmt.Errorf("soak: tick header: %w", err))
		}
		return j.write(eventHandled, tickID(env.Header(bus.HeaderRecurringName), tick, env.ID))
	})
	if err == nil {
		err = bus.Route[Tick](b, w.names.endpoint())
	}
	for i := 0; err == nil && i < w.schedules; i++ {
		err = b.AddRecurring(bus.Recurring{
			Name:     scheduleName(i),
			Schedule: bus.Every(w.every),
			Message:  func(time.Time) any { return Tick{Schedule: i} },
		})
	}
	if err != nil {
		return fmt.Errorf("declare: %w", err)
	}
	for wait := 250 * time.Millisecond; ; wait = min(2*wait, 4*time.Second) {
		err := b.Start(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return fmt.Errorf("start: %w", err)
		}
		logger.Warn("soak: start failed; retrying", slog.Duration("in", wait), slog.Any("error", err))
		sleepCtx(ctx, wait)
	}
	fmt.Println("ready")
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := b.Stop(sctx); err != nil {
		return fmt.Errorf("stop: %w", err)
	}
	return nil
}
