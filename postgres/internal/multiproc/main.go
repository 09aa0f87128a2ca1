// Command multiproc is the worker of the postgres package's multi-process
// test. It is built and started by TestMultiProcess; it is not a tool.
//
//	multiproc run -schema S -name p1 [-lease 3s] [-lookahead 2s] [-hang-after N | -block]
//
// It starts a bus on its own pool whose dispatcher claims from the shared
// table S.outgoing_messages and whose handler records every receipt in
// S.receipts; it prints "ready" once started and runs until SIGTERM.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbus/bus"
	"github.com/postbus/bus/postgres"
)

// Tick is the scheduled message. The test writes its envelopes itself, as
// JSON of type TickType sent to Endpoint.
type Tick struct{ N int }

// MessageName keeps the wire name independent of this package's path.
func (Tick) MessageName() string { return TickType }

// The names the test's envelopes and rows must carry.
const (
	TickType          = "multiproc.Tick"
	Endpoint          = "multiproc"
	TransportIdentity = "multiproc-sync"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: multiproc run [flags]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	schema := fs.String("schema", "", "schema of the outgoing, receipts and claims tables")
	name := fs.String("name", "p", "process name recorded with receipts and claims")
	lease := fs.Duration("lease", 3*time.Second, "dispatcher lease")
	hangAfter := fs.Int64("hang-after", 0, `after handling this many messages, print "hung" and block every further handler call (0: never), so a kill lands mid-dispatch`)
	block := fs.Bool("block", false, "block every handler call before it records anything, so the process holds the rows it claimed until it is killed")
	lookAhead := fs.Duration("lookahead", 0, "dispatcher look-ahead window (0: the default)")
	_ = fs.Parse(os.Args[2:])
	if *block {
		*hangAfter = -1
	}
	url := os.Getenv("POSTBUS_TEST_POSTGRES_URL")
	if url == "" {
		url = "postgres://root@127.0.0.1:5432/test?sslmode=disable"
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	var err error
	switch os.Args[1] {
	case "run":
		err = run(ctx, url, *schema, *name, bus.DispatcherConfig{Lease: *lease, LookAhead: *lookAhead}, *hangAfter)
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

// run runs the worker; hangAfter < 0 blocks every handler call.
func run(ctx context.Context, url, schema, name string, dispatcher bus.DispatcherConfig, hangAfter int64) error {
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
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("proc", name)
	p, err := postgres.New(storePool, postgres.Options{Schema: schema, Logger: log})
	if err != nil {
		return err
	}
	receipts := pgx.Identifier{schema, "receipts"}.Sanitize()
	b, err := bus.New(bus.Config{
		Endpoint:    Endpoint,
		Transport:   newSyncTransport(),
		Persistence: &claimLog{Persistence: p, pool: recPool, name: name, table: pgx.Identifier{schema, "claims"}.Sanitize()},
		Logger:      log,
		Dispatcher:  dispatcher,
	})
	if err != nil {
		return err
	}
	var handled atomic.Int64
	var hung sync.Once
	err = bus.Handle(b, func(ctx context.Context, m Tick) error {
		if hangAfter < 0 || hangAfter > 0 && handled.Add(1) > hangAfter {
			hung.Do(func() { fmt.Println("hung") })
			select {} // until SIGKILL: the claimed batch stays unsettled
		}
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
