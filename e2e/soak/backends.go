package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbus/bus/postgres"
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
func (n names) redisPrefix() string     { return "soak-" + n.run }

// audit is the endpoint that records the events of the -outbox soak.
func (n names) audit() string { return "soak-" + n.run + "-audit" }

// workerApp starts the PostgreSQL application_name of every worker
// connection (workerApp-w<slot>): backend terminations select on it, so
// they reach no one else. The soak's own and the producer's connections
// are named workerApp-soak and workerApp-producer.
func (n names) workerApp() string { return "postbus-soak-" + n.run }

// slotApp is the application_name of the connections of the worker in slot.
func (n names) slotApp(slot int) string { return fmt.Sprintf("%s-w%d", n.workerApp(), slot) }

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
