// Command transproc is the worker of the postgres package's transport
// kill tests. It is built and started by TestTransportConsumerKilled and
// TestTransportConsumerFrozen; it is not a tool.
//
//	transproc -schema S -queue Q [-lease 30s] [-concurrency 4] [-hold 0]
//
// It receives Q from the transport tables in schema S and prints "ready"
// once receiving. Its handler prints "got <message ID>" and then, with
// -hold 0, blocks until its delivery ctx ends (so a kill lands
// mid-handling); with -hold D it sleeps D whatever happens, prints
// "returned <message ID> <cause of its ctx or nil>" and returns nil, so
// the transport acknowledges. It runs until SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbus/bus"
	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/internal/storetest"
	"github.com/postbus/bus/postgres"
)

func main() {
	schema := flag.String("schema", "", "schema of the transport tables")
	queue := flag.String("queue", "", "queue to receive")
	lease := flag.Duration("lease", postgres.DefaultLease, "transport lease")
	conc := flag.Int("concurrency", 4, "handlers at once")
	hold := flag.Duration("hold", 0, "how long a handler sleeps before returning nil (0: until its ctx ends)")
	flag.Parse()
	url := drivertest.Addr("POSTBUS_TEST_POSTGRES_URL", "postgres://root@127.0.0.1:5432/test?sslmode=disable")
	if err := storetest.UntilSignal(func(ctx context.Context) error { return run(ctx, url, *schema, *queue, *lease, *conc, *hold) }); err != nil {
		fmt.Fprintln(os.Stderr, "transproc:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, url, schema, queue string, lease time.Duration, conc int, hold time.Duration) error {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("proc", "transproc")
	tr, err := postgres.NewTransport(pool, postgres.TransportOptions{Schema: schema, Lease: lease, Logger: log})
	if err != nil {
		return err
	}
	if err := tr.Provision(ctx, bus.Topology{Queue: queue}); err != nil {
		return err
	}
	var out sync.Mutex
	say := func(format string, args ...any) {
		out.Lock()
		defer out.Unlock()
		fmt.Printf(format+"\n", args...)
	}
	say("ready")
	err = tr.Receive(ctx, queue, bus.ReceiveOptions{Concurrency: conc}, func(ctx context.Context, env *bus.Envelope) error {
		say("got %s", env.ID)
		if hold == 0 {
			<-ctx.Done()
			return context.Cause(ctx)
		}
		time.Sleep(hold)
		say("returned %s %v", env.ID, context.Cause(ctx))
		return nil
	})
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return errors.Join(err, tr.Close(cctx))
}
