// Command recurproc is the worker of the postgres package's multi-process
// test of recurring schedules. It is built and started by
// TestRecurringMultiProcess; it is not a tool.
//
//	recurproc -schema S -name p1
//
// It starts a bus on its own pool that declares the schedule "tick"
// (every 200 ms) on the table S.outgoing_messages and records every
// occurrence it handles in S.receipts; it prints "ready" once started and
// runs until SIGTERM.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbus/bus"
	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/internal/storetest"
	"github.com/postbus/bus/postgres"
)

// Tick is the recurring message.
type Tick struct{ At time.Time }

// MessageName keeps the wire name independent of this package's path.
func (Tick) MessageName() string { return "recurproc.Tick" }

// transport is an in-memory transport under one identity shared by every
// worker, so any worker's dispatcher claims the rows any worker stored and
// hands them to its own handler.
type transport struct{ *bus.MemoryTransport }

func (transport) Identity() string { return "recurproc-memory" }

func main() {
	schema := flag.String("schema", "", "schema of the outgoing and receipts tables")
	name := flag.String("name", "p", "process name recorded with receipts")
	flag.Parse()
	url := drivertest.Addr("POSTBUS_TEST_POSTGRES_URL", "postgres://root@127.0.0.1:5432/test?sslmode=disable")
	if err := storetest.UntilSignal(func(ctx context.Context) error { return run(ctx, url, *schema, *name) }); err != nil {
		fmt.Fprintln(os.Stderr, "recurproc:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, url, schema, name string) error {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	p, err := postgres.New(pool, postgres.Options{Schema: schema})
	if err != nil {
		return err
	}
	receipts := pgx.Identifier{schema, "receipts"}.Sanitize()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("proc", name)
	b, err := bus.New(bus.Config{Endpoint: "recurproc", Transport: transport{bus.NewMemoryTransport()}, Persistence: p, Logger: log,
		Dispatcher: bus.DispatcherConfig{Lease: time.Second, PollInterval: 200 * time.Millisecond}})
	if err != nil {
		return err
	}
	if err := bus.Handle(b, func(ctx context.Context, m Tick) error {
		_, err := pool.Exec(ctx, `INSERT INTO `+receipts+` (tick, proc, msg_id) VALUES ($1, $2, $3)`,
			m.At, name, bus.IncomingMessage(ctx).ID)
		return err
	}); err != nil {
		return err
	}
	if err := b.AddRecurring(bus.Recurring{Name: "tick", Schedule: bus.Every(200 * time.Millisecond),
		Message: func(tick time.Time) any { return Tick{At: tick} }, Options: []bus.Option{bus.To("recurproc")}}); err != nil {
		return err
	}
	return storetest.Serve(ctx, b, 10*time.Second)
}
