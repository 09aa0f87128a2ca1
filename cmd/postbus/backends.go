package main

import (
	"context"
	"database/sql"
	"fmt"

	_ "github.com/go-sql-driver/mysql" // registers the "mysql" database/sql driver
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"github.com/postbus/bus"
	"github.com/postbus/bus/driver"
	"github.com/postbus/bus/mysql"
	"github.com/postbus/bus/postgres"
	"github.com/postbus/bus/redis"
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
	errNoPersistence = usagef("no persistence: give --postgres-url, --sqlite-path, --mysql-url or --redis-store-url (or POSTBUS_POSTGRES_URL, POSTBUS_SQLITE_PATH, POSTBUS_MYSQL_URL, POSTBUS_REDIS_STORE_URL)")
	errNoTransport   = usagef("no transport: give --rabbitmq-url, --nats-url, --redis-url, --kafka-brokers or --sqs-region/--sqs-endpoint (or POSTBUS_RABBITMQ_URL, POSTBUS_NATS_URL, POSTBUS_REDIS_URL, POSTBUS_KAFKA_BROKERS, POSTBUS_SQS_REGION/POSTBUS_SQS_ENDPOINT)")
)

func openBackends(ctx context.Context, s settings, n need) (*backends, error) {
	b := &backends{}
	if n.persistence {
		if err := openPersistence(ctx, s, b); err != nil {
			b.Close()
			return nil, err
		}
	}
	if n.transport {
		if err := openTransport(ctx, s, b); err != nil {
			b.Close()
			return nil, err
		}
	}
	return b, nil
}

func openPersistence(ctx context.Context, s settings, b *backends) error {
	switch {
	case len(s.persistences()) > 1:
		return usagef("give one persistence: --postgres-url, --sqlite-path, --mysql-url or --redis-store-url, not several")
	case s.PostgresURL != "":
		pool, err := pgxpool.New(ctx, s.PostgresURL)
		if err != nil {
			return fmt.Errorf("postgres: %w", driver.RedactError(err, s.PostgresURL))
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
	case s.MySQLURL != "":
		p, closeDB, err := openMySQL(ctx, s)
		if err != nil {
			return err
		}
		b.closers = append(b.closers, closeDB)
		b.Persistence, b.PersistenceName = p, "mysql"
	case s.RedisStoreURL != "":
		opts, err := goredis.ParseURL(s.RedisStoreURL)
		if err != nil {
			return usagef("--redis-store-url %s: %v", driver.Redact(s.RedisStoreURL), driver.RedactError(err, s.RedisStoreURL))
		}
		client := goredis.NewClient(opts)
		b.closers = append(b.closers, func() { _ = client.Close() })
		p, err := redis.NewPersistence(client, redis.PersistenceOptions{Prefix: s.RedisStorePrefix, Logger: s.Log})
		if err != nil {
			return err
		}
		b.Persistence, b.PersistenceName = p, "redis"
	default:
		return errNoPersistence
	}
	b.Scheduled, _ = b.Persistence.(bus.ScheduledBrowser)
	b.Failed, _ = b.Persistence.(bus.FailedStore)
	b.Recurring, _ = b.Persistence.(bus.RecurringStore)
	return nil
}

// openMySQL opens the MySQL/MariaDB store that s names. Errors name the
// server by its DSN with the password redacted: the driver's own errors
// never carry the DSN.
func openMySQL(ctx context.Context, s settings) (*mysql.Persistence, func(), error) {
	where := driver.Redact(s.MySQLURL)
	db, err := sql.Open("mysql", s.MySQLURL)
	if err != nil {
		return nil, nil, usagef("--mysql-url %s: not a go-sql-driver DSN (user:password@tcp(host:port)/database)", where)
	}
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, nil, fmt.Errorf("mysql %s: %w", where, driver.RedactError(err, s.MySQLURL))
	}
	p, err := mysql.New(db, mysql.Options{Table: s.MySQLTable})
	if err != nil {
		_ = db.Close()
		return nil, nil, err
	}
	return p, func() { _ = db.Close() }, nil
}
