package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"
	natsio "github.com/nats-io/nats.go"

	"github.com/postbus/bus"
	"github.com/postbus/bus/nats"
	"github.com/postbus/bus/postgres"
	"github.com/postbus/bus/rabbitmq"
	"github.com/postbus/bus/sqlite"
)

// need says what a command uses.
type need struct {
	persistence bool
	transport   bool
}

// backends are the opened connections.
type backends struct {
	Persistence bus.Persistence
	Scheduled   bus.ScheduledBrowser // nil when the persistence has none
	Failed      bus.FailedStore      // nil when the persistence has none
	Recurring   bus.RecurringStore   // nil when the persistence has none
	Transport   bus.Transport
	// Describe names what the persistence and transport are, for provision.
	PersistenceName, TransportName string
	closers                        []func()
}

func (b *backends) Close() {
	for i := len(b.closers) - 1; i >= 0; i-- {
		b.closers[i]()
	}
}

// opener connects to what settings name; tests inject their own.
type opener func(ctx context.Context, s settings, n need) (*backends, error)

var (
	errNoPersistence = usagef("no persistence: give --postgres-url or --sqlite-path (or POSTBUS_POSTGRES_URL, POSTBUS_SQLITE_PATH)")
	errNoTransport   = usagef("no transport: give --rabbitmq-url or --nats-url (or POSTBUS_RABBITMQ_URL, POSTBUS_NATS_URL)")
)

func openBackends(ctx context.Context, s settings, n need) (*backends, error) {
	b := &backends{}
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if n.persistence {
		if err := openPersistence(ctx, s, b); err != nil {
			b.Close()
			return nil, err
		}
	}
	if n.transport {
		if err := openTransport(s, b, quiet); err != nil {
			b.Close()
			return nil, err
		}
	}
	return b, nil
}

func openPersistence(ctx context.Context, s settings, b *backends) error {
	switch {
	case s.PostgresURL != "" && s.SQLitePath != "":
		return usagef("give one persistence: --postgres-url or --sqlite-path, not both")
	case s.PostgresURL != "":
		pool, err := pgxpool.New(ctx, s.PostgresURL)
		if err != nil {
			return fmt.Errorf("postgres: %w", err)
		}
		b.closers = append(b.closers, pool.Close)
		p, err := postgres.New(pool, postgres.Options{Schema: s.PostgresSchema, Table: s.PostgresTable})
		if err != nil {
			return err
		}
		b.Persistence, b.PersistenceName = p, "postgres"
	case s.SQLitePath != "":
		p, err := sqlite.Open(s.SQLitePath, sqlite.Options{Table: s.SQLiteTable})
		if err != nil {
			return err
		}
		b.closers = append(b.closers, func() { _ = p.Close() })
		b.Persistence, b.PersistenceName = p, "sqlite"
	default:
		return errNoPersistence
	}
	b.Scheduled, _ = b.Persistence.(bus.ScheduledBrowser)
	b.Failed, _ = b.Persistence.(bus.FailedStore)
	b.Recurring, _ = b.Persistence.(bus.RecurringStore)
	return nil
}

func openTransport(s settings, b *backends, log *slog.Logger) error {
	switch {
	case s.RabbitMQURL != "" && s.NATSURL != "":
		return usagef("give one transport: --rabbitmq-url or --nats-url, not both")
	case s.RabbitMQURL != "":
		t, err := rabbitmq.New(s.RabbitMQURL, rabbitmq.Options{EventsExchange: s.RabbitMQExchange, Logger: log})
		if err != nil {
			return err
		}
		b.closers = append(b.closers, func() { _ = t.Close(context.Background()) })
		b.Transport, b.TransportName = t, "rabbitmq"
	case s.NATSURL != "":
		nc, err := natsio.Connect(s.NATSURL)
		if err != nil {
			return fmt.Errorf("nats: %w", err)
		}
		b.closers = append(b.closers, nc.Close)
		t, err := nats.New(nc, nats.Options{Stream: s.NATSStream, SubjectPrefix: s.NATSPrefix, Logger: log})
		if err != nil {
			return err
		}
		b.closers = append(b.closers, func() { _ = t.Close() })
		b.Transport, b.TransportName = t, "nats"
	default:
		return errNoTransport
	}
	return nil
}
