// Command worker is the dispatcher process that TestFaultDispatcherKilled
// kills. It runs one bus on a PostgreSQL store whose transport never
// accepts a message: the first hand-over prints "claimed" on stdout and
// every hand-over then blocks, so the process holds its claimed rows,
// leased, until it is killed.
//
// # Usage
//
//	worker -schema pbe2e_xxx -endpoint pbe2e-xxx -lease 2s
//
// The database is POSTBUS_TEST_POSTGRES_URL (default: the local test
// database). The table must exist: the worker skips setup.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbus/bus"
	"github.com/postbus/bus/postgres"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

func run() error {
	schema := flag.String("schema", "", "schema of the scheduled-message table")
	endpoint := flag.String("endpoint", "", "endpoint name")
	lease := flag.Duration("lease", 2*time.Second, "Dispatcher.Lease")
	flag.Parse()
	url := os.Getenv("POSTBUS_TEST_POSTGRES_URL")
	if url == "" {
		url = "postgres://root@127.0.0.1:5432/test?sslmode=disable"
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	store, err := postgres.New(pool, postgres.Options{Schema: *schema})
	if err != nil {
		return err
	}
	b, err := bus.New(bus.Config{
		Endpoint: *endpoint, Transport: &stuckTransport{}, Persistence: store,
		SkipSetup: true, Dispatcher: bus.DispatcherConfig{Lease: *lease},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return err
	}
	if err := b.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return b.Stop(sctx)
}

// stuckTransport announces the first hand-over and then holds every one
// until its context ends, as a broker that stopped answering would.
type stuckTransport struct {
	once sync.Once
}

var _ bus.Transport = (*stuckTransport)(nil)

func (t *stuckTransport) Provision(context.Context, bus.Topology) error { return nil }

// Identity stands in for the in-memory transport the test's other buses
// use, so this process claims the rows they scheduled.
func (t *stuckTransport) Identity() string { return "memory" }

func (t *stuckTransport) Send(ctx context.Context, _ string, _ *bus.Envelope) error {
	t.once.Do(func() { fmt.Println("claimed") })
	<-ctx.Done()
	return ctx.Err()
}

func (t *stuckTransport) Publish(ctx context.Context, env *bus.Envelope) error {
	return t.Send(ctx, "", env)
}

func (t *stuckTransport) Receive(ctx context.Context, _ string, _ bus.ReceiveOptions, _ bus.DeliveryHandler) error {
	<-ctx.Done()
	return nil
}
