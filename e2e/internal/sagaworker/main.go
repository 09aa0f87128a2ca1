// Command sagaworker is one of the processes of the e2e saga test: a bus
// with the step saga, on a PostgreSQL store with the outbox on and a
// RabbitMQ transport. Each instance receives Of steps in any order; once it
// has seen them all it asks for a short timeout, and the timeout sends
// StepsDone with the state it saw to the collector endpoint and completes
// the instance. Handlers are slowed down a little, so the test can kill a
// process while it has handlings in flight.
//
// # Usage
//
//	sagaworker -schema pbe2e_x -endpoint pbe2e-x -exchange pbe2e-x-events -collector pbe2e-x-done
//
// It prints "ready" on stdout once its bus runs, and stops on SIGTERM. The
// database is POSTBUS_TEST_POSTGRES_URL, the broker POSTBUS_TEST_RABBITMQ_URL.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbus/bus"
	"github.com/postbus/bus/postgres"
	"github.com/postbus/bus/rabbitmq"
)

// Step is step N of instance Instance, which has Of steps.
type Step struct {
	Instance string
	N, Of    int
}

// MessageName keeps the name independent of this package's path.
func (Step) MessageName() string { return "e2e.saga.Step" }

// Finish is the timeout an instance requests once it has seen every step.
type Finish struct{}

// MessageName keeps the name independent of this package's path.
func (Finish) MessageName() string { return "e2e.saga.Finish" }

// StepsDone reports a finished instance and the steps its state held.
type StepsDone struct {
	Instance string
	Seen     []int
}

// MessageName keeps the name independent of this package's path.
func (StepsDone) MessageName() string { return "e2e.saga.StepsDone" }

// state is the saga's state.
type state struct {
	Instance string
	Seen     []int
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "sagaworker:", err)
		os.Exit(1)
	}
}

func run() error {
	schema := flag.String("schema", "", "schema of the store's tables")
	endpoint := flag.String("endpoint", "", "endpoint name")
	exchange := flag.String("exchange", "", "RabbitMQ events exchange")
	collector := flag.String("collector", "", "endpoint StepsDone is sent to")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	cfg, err := pgxpool.ParseConfig(cmp.Or(os.Getenv("POSTBUS_TEST_POSTGRES_URL"), "postgres://root@127.0.0.1:5432/test?sslmode=disable"))
	if err != nil {
		return err
	}
	// 8 outbox handlings hold a connection each; the dispatcher and its
	// LISTEN connection need 2 more.
	cfg.MaxConns = 10
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	store, err := postgres.New(pool, postgres.Options{Schema: *schema, Logger: logger})
	if err != nil {
		return err
	}
	tr, err := rabbitmq.New(cmp.Or(os.Getenv("POSTBUS_TEST_RABBITMQ_URL"), "amqp://guest:guest@127.0.0.1:5672/"),
		rabbitmq.Options{EventsExchange: *exchange, Logger: logger})
	if err != nil {
		return err
	}
	defer tr.Close(context.WithoutCancel(ctx))
	b, err := bus.New(bus.Config{Endpoint: *endpoint, Transport: tr, Persistence: store, Logger: logger,
		ErrorQueue: *endpoint + "-error", DeadLetterQueue: *endpoint + "-deadletter", Concurrency: 8,
		Outbox: bus.OutboxConfig{Enabled: true}, Dispatcher: bus.DispatcherConfig{Lease: 5 * time.Second}})
	if err != nil {
		return err
	}
	s := bus.NewSaga[state](b, "steps")
	err = errors.Join(
		bus.SagaStartedBy(s, func(m Step) string { return m.Instance },
			func(ctx context.Context, st *state, m Step) error {
				time.Sleep(2 * time.Millisecond) // a handling in flight when the process dies
				st.Instance = m.Instance
				st.Seen = append(st.Seen, m.N)
				if len(st.Seen) == m.Of {
					return bus.RequestTimeout(ctx, Finish{}, 300*time.Millisecond)
				}
				return nil
			}),
		bus.SagaTimeout(s, func(ctx context.Context, st *state, _ Finish) error {
			bus.CompleteSaga(ctx)
			return b.Send(ctx, StepsDone{Instance: st.Instance, Seen: st.Seen}, bus.To(*collector))
		}),
	)
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
