package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	natsio "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/postbus/bus"
	"github.com/postbus/bus/nats"
	"github.com/postbus/bus/postgres"
	"github.com/postbus/bus/rabbitmq"
)

// Service addresses, as in the end-to-end tests.
func postgresURL() string {
	return env("POSTBUS_TEST_POSTGRES_URL", "postgres://root@127.0.0.1:5432/test?sslmode=disable")
}

func rabbitURL() string {
	return env("POSTBUS_TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/")
}

func natsURL() string { return env("POSTBUS_TEST_NATS_URL", "nats://127.0.0.1:4222") }

func env(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// brokerURL returns the URL of the broker of transport ("rabbitmq" or
// "nats").
func brokerURL(transport string) string {
	if transport == "nats" {
		return natsURL()
	}
	return rabbitURL()
}

// withHost returns raw with its host:port replaced by addr.
func withHost(raw, addr string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("parse %s: %w", raw, err)
	}
	u.Host = addr
	return u.String(), nil
}

// hostOf returns the host:port of a URL.
func hostOf(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("parse %s: %w", raw, err)
	}
	return u.Host, nil
}

// names derives every name of one run from its ID, so runs never share a
// schema, a queue, a stream or a database application name.
type names struct{ run string }

func (n names) schema() string          { return "soak_" + n.run }
func (n names) endpoint() string        { return "soak-" + n.run }
func (n names) producer() string        { return "soak-" + n.run + "-producer" }
func (n names) errorQueue() string      { return "soak-" + n.run + "-error" }
func (n names) deadLetterQueue() string { return "soak-" + n.run + "-deadletter" }
func (n names) exchange() string        { return "soak-" + n.run + "-events" }
func (n names) stream() string          { return "SOAK_" + strings.ToUpper(n.run) }
func (n names) subjectPrefix() string   { return "soak." + n.run }

// workerApp is the PostgreSQL application_name of every worker connection:
// backend terminations select on it, so they reach no one else.
func (n names) workerApp() string { return "postbus-soak-" + n.run }

// openTransport connects to the broker of kind at rawURL and returns the
// transport and the function that closes it.
func openTransport(kind, rawURL string, n names, logger *slog.Logger) (bus.Transport, func(), error) {
	switch kind {
	case "rabbitmq":
		tr, err := rabbitmq.New(rawURL, rabbitmq.Options{
			EventsExchange: n.exchange(), ConnectionName: n.endpoint(), Logger: logger,
			ReconnectMax: time.Second,
		})
		if err != nil {
			return nil, nil, fmt.Errorf("rabbitmq transport: %w", err)
		}
		return tr, func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = tr.Close(ctx)
		}, nil
	case "nats":
		// The proxy is the only way to the server: discovered cluster
		// addresses would let the client reconnect around it.
		nc, err := natsio.Connect(rawURL, natsio.MaxReconnects(-1), natsio.ReconnectWait(250*time.Millisecond),
			natsio.Timeout(3*time.Second), natsio.IgnoreDiscoveredServers())
		if err != nil {
			return nil, nil, fmt.Errorf("nats connect: %w", err)
		}
		tr, err := nats.New(nc, nats.Options{Stream: n.stream(), SubjectPrefix: n.subjectPrefix(), Logger: logger})
		if err != nil {
			nc.Close()
			return nil, nil, fmt.Errorf("nats transport: %w", err)
		}
		return tr, func() { _ = tr.Close(); nc.Close() }, nil
	}
	return nil, nil, fmt.Errorf("unknown transport %q (want rabbitmq or nats)", kind)
}

// deleteTopology removes what the run created on the broker.
func deleteTopology(ctx context.Context, kind string, n names) error {
	if kind == "nats" {
		nc, err := natsio.Connect(natsURL(), natsio.Timeout(3*time.Second))
		if err != nil {
			return fmt.Errorf("nats connect: %w", err)
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			return fmt.Errorf("jetstream: %w", err)
		}
		if err := js.DeleteStream(ctx, n.stream()); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("delete stream %s: %w", n.stream(), err)
		}
		return nil
	}
	conn, err := amqp.DialConfig(rabbitURL(), amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		return fmt.Errorf("rabbitmq connect: %w", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("rabbitmq channel: %w", err)
	}
	for _, q := range []string{n.endpoint(), n.errorQueue(), n.deadLetterQueue()} {
		if _, err := ch.QueueDelete(q, false, false, false); err != nil {
			return fmt.Errorf("delete queue %s: %w", q, err)
		}
	}
	if err := ch.ExchangeDelete(n.exchange(), false, false); err != nil {
		return fmt.Errorf("delete exchange %s: %w", n.exchange(), err)
	}
	return nil
}

// storeRows counts the rows left in the run's scheduled-message table.
func storeRows(pool *pgxpool.Pool, n names) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var rows int
	table := pgx.Identifier{n.schema(), postgres.DefaultTable}.Sanitize()
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&rows); err != nil {
		return "unknown: " + err.Error()
	}
	return fmt.Sprint(rows)
}

// dropSchema removes the run's schema.
func dropSchema(pool *pgxpool.Pool, n names, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{n.schema()}.Sanitize()+" CASCADE"); err != nil {
		log.Warn("cleanup: drop schema", slog.Any("error", err))
	}
}
