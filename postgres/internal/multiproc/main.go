// Command multiproc is the worker of the postgres package's multi-process
// test. It is built and started by TestMultiProcess; it is not a tool.
//
//	multiproc run -schema S -name p1 [-lease 3s]
//	multiproc schedule -schema S -n 20000 -at <unix micros>
//
// "run" starts a bus on its own pool whose dispatcher claims from the shared
// table and whose handler records every receipt in S.receipts; it prints
// "ready" once started and runs until SIGTERM. "schedule" sends n messages
// from 64 goroutines through a send-only bus, due within the second that
// starts at -at, and exits.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbus/bus"
	"github.com/postbus/bus/postgres"
)

// Tick is the scheduled message.
type Tick struct{ N int }

// MessageName keeps the wire name independent of this package's path.
func (Tick) MessageName() string { return "multiproc.Tick" }

const endpoint = "multiproc"

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: multiproc run|schedule [flags]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	schema := fs.String("schema", "", "schema of the outgoing, receipts and claims tables")
	name := fs.String("name", "p", "process name recorded with receipts and claims")
	lease := fs.Duration("lease", 3*time.Second, "dispatcher lease")
	n := fs.Int("n", 20000, "messages to schedule")
	at := fs.Int64("at", 0, "start of the due second, unix microseconds")
	_ = fs.Parse(os.Args[2:])
	url := os.Getenv("POSTBUS_TEST_POSTGRES_URL")
	if url == "" {
		url = "postgres://root@127.0.0.1:5432/test?sslmode=disable"
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	var err error
	switch os.Args[1] {
	case "run":
		err = run(ctx, url, *schema, *name, *lease)
	case "schedule":
		err = schedule(ctx, url, *schema, *n, time.UnixMicro(*at))
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "multiproc:", err)
		os.Exit(1)
	}
}

func openPool(ctx context.Context, url string, maxConns int32, asyncCommit bool) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = maxConns
	if asyncCommit {
		// Receipts only need to be visible to the test, not to survive a
		// server crash.
		cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	}
	return pgxpool.NewWithConfig(ctx, cfg)
}

func run(ctx context.Context, url, schema, name string, lease time.Duration) error {
	storePool, err := openPool(ctx, url, 6, false)
	if err != nil {
		return err
	}
	defer storePool.Close()
	recPool, err := openPool(ctx, url, 10, true)
	if err != nil {
		return err
	}
	defer recPool.Close()
	p, err := postgres.New(storePool, postgres.Options{Schema: schema})
	if err != nil {
		return err
	}
	receipts := pgx.Identifier{schema, "receipts"}.Sanitize()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("proc", name)
	b, err := bus.New(bus.Config{
		Endpoint:    endpoint,
		Transport:   newSyncTransport(),
		Persistence: &claimLog{Persistence: p, pool: recPool, name: name, table: pgx.Identifier{schema, "claims"}.Sanitize()},
		Logger:      log,
		Dispatcher:  bus.DispatcherConfig{Lease: lease},
	})
	if err != nil {
		return err
	}
	err = bus.Handle(b, func(ctx context.Context, m Tick) error {
		env := bus.IncomingMessage(ctx)
		_, err := recPool.Exec(ctx, `INSERT INTO `+receipts+` (msg_id, n, proc, due_at, received_at)
			VALUES ($1, $2, $3, $4, clock_timestamp())`, env.ID, m.N, name, env.DueAt)
		return err
	})
	if err != nil {
		return err
	}
	if err := b.Start(ctx); err != nil {
		return err
	}
	fmt.Println("ready")
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return b.Stop(sctx)
}

func schedule(ctx context.Context, url, schema string, n int, at time.Time) error {
	pool, err := openPool(ctx, url, 8, false)
	if err != nil {
		return err
	}
	defer pool.Close()
	p, err := postgres.New(pool, postgres.Options{Schema: schema})
	if err != nil {
		return err
	}
	// The scheduler's transport refuses everything: a message whose due
	// time passed before it was sent would be sent at once instead of
	// stored, and the run must fail rather than lose it.
	b, err := bus.New(bus.Config{Endpoint: "multiproc-scheduler", Persistence: p, SendOnly: true, Transport: refuseTransport{}})
	if err != nil {
		return err
	}
	if err := bus.Route[Tick](b, endpoint); err != nil {
		return err
	}
	if err := b.Start(ctx); err != nil {
		return err
	}
	const senders = 64
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, senders)
	for s := range senders {
		wg.Go(func() {
			for i := s; i < n; i += senders {
				due := at.Add(time.Duration(i) * time.Second / time.Duration(n))
				if err := b.Send(ctx, Tick{N: i}, bus.DeliverAt(due)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	el := time.Since(start)
	fmt.Printf("scheduled %d in %v (%.0f/s)\n", n, el.Round(time.Millisecond), float64(n)/el.Seconds())
	return b.Stop(ctx)
}
