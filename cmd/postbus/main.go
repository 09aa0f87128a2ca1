// Command postbus is the operator's tool for a Postbus deployment: it
// browses and changes the scheduled backlog, the failed messages kept by
// the failed-message store, provisions a transport, and serves the web
// console. Run "postbus help" for the commands.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/postbus/bus/driver"
)

// Exit codes.
const (
	exitOK    = 0 // done
	exitError = 1 // the operation failed (a store error, nothing found)
	exitUsage = 2 // bad command line
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	a := &app{stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv, now: time.Now, open: openBackends}
	code := a.run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}

// app is one run of the command, with its outside world injected so tests
// run it in process.
type app struct {
	stdout, stderr io.Writer
	getenv         func(string) string
	now            func() time.Time
	open           opener
	// conns are the connection strings the command was given: run keeps
	// their passwords out of stdout and stderr.
	conns []string

	logOnce sync.Once
	log     *slog.Logger
}

// redactor writes to w with the passwords of the app's connection strings
// replaced, whatever printed them: an error, a driver's warning, the
// console's log.
type redactor struct {
	w io.Writer
	a *app
}

func (r redactor) Write(p []byte) (int, error) {
	if _, err := io.WriteString(r.w, driver.RedactText(string(p), r.a.conns...)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// logger returns the logger of the drivers and the console: warnings and
// errors, to stderr.
func (a *app) logger() *slog.Logger {
	// One logger for all: its handler's lock keeps the lines of the
	// drivers and the console, logged from their own goroutines, whole.
	a.logOnce.Do(func() {
		a.log = slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	return a.log
}

// usageError is a bad command line: exit code 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

// errNotFound makes show commands exit with 1 after printing their message.
var errNotFound = errors.New("not found")

const mainUsage = `postbus: operate a Postbus deployment.

Usage:
  postbus scheduled ls|show|cancel|send-now [flags] [ID...]
  postbus failed    ls|groups|show|retry|delete|ingest [flags] [ID...]
  postbus recurring ls|show|set|pause|resume|trigger|backfill|delete [flags] [NAME...]
  postbus provision --endpoint NAME [--event TYPE]... [--dry-run]
  postbus console   [--addr 127.0.0.1:8080] [--read-only]
  postbus version
  postbus help [COMMAND]

Connections (flags or environment variables):
  --postgres-url    POSTBUS_POSTGRES_URL     PostgreSQL persistence (pgx URL)
  --postgres-schema POSTBUS_POSTGRES_SCHEMA  its schema (default public)
  --postgres-table  POSTBUS_POSTGRES_TABLE   its scheduled table (default outgoing_messages)
  --sqlite-path     POSTBUS_SQLITE_PATH      SQLite persistence (a file path)
  --sqlite-table    POSTBUS_SQLITE_TABLE     its scheduled table (default outgoing_messages)
  --mysql-url       POSTBUS_MYSQL_URL        MySQL/MariaDB persistence (a go-sql-driver DSN:
                                             user:password@tcp(host:port)/database)
  --mysql-table     POSTBUS_MYSQL_TABLE      its scheduled table (default outgoing_messages)
  --rabbitmq-url    POSTBUS_RABBITMQ_URL     RabbitMQ transport (retry, ingest, provision)
  --rabbitmq-exchange POSTBUS_RABBITMQ_EXCHANGE its events exchange (default postbus.events)
  --nats-url        POSTBUS_NATS_URL         NATS JetStream transport (retry, ingest, provision)
  --nats-stream     POSTBUS_NATS_STREAM      its stream (default POSTBUS)
  --nats-prefix     POSTBUS_NATS_PREFIX      its subject prefix (default postbus)
  --redis-url       POSTBUS_REDIS_URL        Redis Streams transport (redis://[:password@]host:port/db)
  --redis-prefix    POSTBUS_REDIS_PREFIX     its key prefix (default postbus)
  --kafka-brokers   POSTBUS_KAFKA_BROKERS    Kafka transport: seed brokers, host:port[,host:port...]
  --kafka-prefix    POSTBUS_KAFKA_PREFIX     its topic prefix (default postbus)
  --kafka-partitions POSTBUS_KAFKA_PARTITIONS partitions of the topics provision creates (default 8)
  --kafka-replication POSTBUS_KAFKA_REPLICATION their replication factor (default 1)
  --sqs-region      POSTBUS_SQS_REGION       SQS transport (with SNS for events); credentials
                                             from the AWS SDK's usual sources (AWS_PROFILE, ...)
  --sqs-endpoint    POSTBUS_SQS_ENDPOINT     its endpoint URL, for an emulator or a VPC endpoint
  --sqs-prefix      POSTBUS_SQS_PREFIX       its queue and topic name prefix (default none)
  --sqs-protocol    POSTBUS_SQS_PROTOCOL     json (default) or query (for emulators such as goaws)
  --sqs-keep-queue-policy POSTBUS_SQS_KEEP_QUEUE_POLICY provision leaves queue policies alone
Give one persistence and, for retry, ingest and provision, one transport.

Output: a table, or JSON with --json. Every command that changes messages
prints how many it changed and takes --dry-run.

Exit codes: 0 done, 1 the operation failed or found nothing, 2 bad usage.

Examples:
  export POSTBUS_POSTGRES_URL=postgres://ops@db/orders
  postbus scheduled ls --type orders.PaymentOverdue --limit 20
  postbus scheduled send-now 0190f5d6-8c4e-7b7a-9d0e-5b1f4c2d3e4f
  postbus failed groups
  POSTBUS_RABBITMQ_URL=amqp://guest:guest@mq/ postbus failed retry --group 3f2a9c0d1e4b5a67 --dry-run
  postbus failed delete --all --type orders.ChargeCard
  postbus recurring pause nightly-report
  postbus provision --endpoint billing --event orders.OrderPlaced --dry-run
  postbus console --addr 127.0.0.1:8080
`

func (a *app) run(ctx context.Context, args []string) int {
	a.stdout, a.stderr = redactor{a.stdout, a}, redactor{a.stderr, a}
	err := a.dispatch(ctx, args)
	var ue *usageError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ue):
		fmt.Fprintf(a.stderr, "postbus: %s\nRun 'postbus help' for usage.\n", ue.msg)
		return exitUsage
	case errors.Is(err, errHelp):
		return exitOK
	case errors.Is(err, errNotFound):
		return exitError
	default:
		fmt.Fprintf(a.stderr, "postbus: %v\n", err)
		return exitError
	}
}

var errHelp = errors.New("help shown")

func (a *app) dispatch(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(a.stderr, mainUsage)
		return usagef("no command")
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "help", "-h", "--help", "-help":
		if len(rest) > 0 {
			return a.dispatch(ctx, []string{rest[0], "--help"})
		}
		fmt.Fprint(a.stdout, mainUsage)
		return errHelp
	case "scheduled":
		return a.scheduled(ctx, rest)
	case "failed":
		return a.failed(ctx, rest)
	case "recurring":
		return a.recurring(ctx, rest)
	case "provision":
		return a.provision(ctx, rest)
	case "console":
		return a.console(ctx, rest)
	case "version":
		return a.versionCmd(rest)
	default:
		return usagef("unknown command %q", cmd)
	}
}
