package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"
)

// settings name the persistence and transport to connect to.
type settings struct {
	PostgresURL, PostgresSchema, PostgresTable string
	SQLitePath, SQLiteTable                    string
	MySQLURL, MySQLTable                       string
	RabbitMQURL, RabbitMQExchange              string
	NATSURL, NATSStream, NATSPrefix            string
	// Log receives the drivers' warnings: the command's stderr.
	Log *slog.Logger
}

// urls returns the connection strings, which may hold passwords.
func (s settings) urls() []string {
	return []string{s.PostgresURL, s.MySQLURL, s.RabbitMQURL, s.NATSURL}
}

// command is one subcommand's flag set: its own flags, the connection
// settings and --json.
type command struct {
	fs      *flag.FlagSet
	conn    settings
	json    bool
	usage   string
	example string
}

func (a *app) newCommand(name, usage, example string) *command {
	c := &command{fs: flag.NewFlagSet(name, flag.ContinueOnError), usage: usage, example: example}
	c.fs.SetOutput(io.Discard)
	env := func(k string) string { return a.getenv("POSTBUS_" + k) }
	s := &c.conn
	s.Log = a.logger()
	c.fs.StringVar(&s.PostgresURL, "postgres-url", env("POSTGRES_URL"), "PostgreSQL URL (POSTBUS_POSTGRES_URL)")
	c.fs.StringVar(&s.PostgresSchema, "postgres-schema", env("POSTGRES_SCHEMA"), "PostgreSQL schema (POSTBUS_POSTGRES_SCHEMA)")
	c.fs.StringVar(&s.PostgresTable, "postgres-table", env("POSTGRES_TABLE"), "PostgreSQL scheduled table (POSTBUS_POSTGRES_TABLE)")
	c.fs.StringVar(&s.SQLitePath, "sqlite-path", env("SQLITE_PATH"), "SQLite file (POSTBUS_SQLITE_PATH)")
	c.fs.StringVar(&s.SQLiteTable, "sqlite-table", env("SQLITE_TABLE"), "SQLite scheduled table (POSTBUS_SQLITE_TABLE)")
	c.fs.StringVar(&s.MySQLURL, "mysql-url", env("MYSQL_URL"), "MySQL/MariaDB DSN, user:password@tcp(host:port)/database (POSTBUS_MYSQL_URL)")
	c.fs.StringVar(&s.MySQLTable, "mysql-table", env("MYSQL_TABLE"), "MySQL/MariaDB scheduled table (POSTBUS_MYSQL_TABLE)")
	c.fs.StringVar(&s.RabbitMQURL, "rabbitmq-url", env("RABBITMQ_URL"), "RabbitMQ URL (POSTBUS_RABBITMQ_URL)")
	c.fs.StringVar(&s.RabbitMQExchange, "rabbitmq-exchange", env("RABBITMQ_EXCHANGE"), "RabbitMQ events exchange (POSTBUS_RABBITMQ_EXCHANGE)")
	c.fs.StringVar(&s.NATSURL, "nats-url", env("NATS_URL"), "NATS URL (POSTBUS_NATS_URL)")
	c.fs.StringVar(&s.NATSStream, "nats-stream", env("NATS_STREAM"), "NATS stream (POSTBUS_NATS_STREAM)")
	c.fs.StringVar(&s.NATSPrefix, "nats-prefix", env("NATS_PREFIX"), "NATS subject prefix (POSTBUS_NATS_PREFIX)")
	c.fs.BoolVar(&c.json, "json", false, "print JSON instead of a table")
	return c
}

// parse parses flags placed before, between or after the arguments, and
// returns the arguments. --help prints the command's usage.
func (a *app) parse(c *command, args []string) ([]string, error) {
	defer func() { a.conns = append(a.conns, c.conn.urls()...) }()
	var pos []string
	for {
		err := c.fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			a.printUsage(c)
			return nil, errHelp
		}
		if err != nil {
			return nil, usagef("%s: %v", c.fs.Name(), err)
		}
		rest := c.fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if rest[0] == "--" {
			return append(pos, rest[1:]...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

func (a *app) printUsage(c *command) {
	w := a.stdout
	fmt.Fprintf(w, "Usage: postbus %s\n\n", c.usage)
	fmt.Fprintln(w, "Flags:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	c.fs.VisitAll(func(f *flag.Flag) {
		if strings.HasPrefix(f.Usage, "PostgreSQL") || strings.HasPrefix(f.Usage, "SQLite") ||
			strings.HasPrefix(f.Usage, "RabbitMQ") || strings.HasPrefix(f.Usage, "NATS") {
			return // the connection flags: listed once in "postbus help"
		}
		fmt.Fprintf(tw, "  --%s\t%s\n", f.Name, f.Usage)
	})
	_ = tw.Flush()
	fmt.Fprintln(w, "  (connection flags and POSTBUS_* variables: see 'postbus help')")
	if c.example != "" {
		fmt.Fprintf(w, "\nExamples:\n%s", c.example)
	}
}

// parseWhen reads an absolute RFC 3339 time, or a duration from now
// ("90m" later, "-1h" earlier).
func parseWhen(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return time.Time{}, usagef("%q: want an RFC 3339 time or a duration from now such as 2h", s)
	}
	return now.Add(d), nil
}
