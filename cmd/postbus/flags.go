package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
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
	RedisURL, RedisPrefix                      string
	// RedisStoreURL names a Redis persistence (redis.NewPersistence), with
	// RedisStorePrefix its key prefix; RedisURL is the Redis transport.
	RedisStoreURL, RedisStorePrefix string
	// KafkaBrokers are the seed brokers, comma-separated host:port.
	KafkaBrokers, KafkaPrefix string
	// KafkaPartitions and KafkaReplication are those of the topics
	// provision creates; 0: the driver's defaults.
	KafkaPartitions, KafkaReplication int
	// SQSRegion or SQSEndpoint names the SQS transport; SQSProtocol is
	// "json" (SQS) or "query" (emulators that speak only that).
	SQSRegion, SQSEndpoint, SQSPrefix, SQSProtocol string
	SQSKeepQueuePolicy                             bool
	// Log receives the drivers' warnings: the command's stderr.
	Log *slog.Logger
}

// urls returns the connection strings, which may hold passwords.
func (s settings) urls() []string {
	return []string{s.PostgresURL, s.MySQLURL, s.RedisStoreURL, s.RabbitMQURL, s.NATSURL, s.RedisURL, s.SQSEndpoint}
}

// transports returns the flags of the transports s names.
func (s settings) transports() []string {
	var given []string
	for _, t := range []struct{ flag, v string }{
		{"--rabbitmq-url", s.RabbitMQURL}, {"--nats-url", s.NATSURL}, {"--redis-url", s.RedisURL},
		{"--kafka-brokers", s.KafkaBrokers}, {"--sqs-region/--sqs-endpoint", s.SQSRegion + s.SQSEndpoint},
	} {
		if t.v != "" {
			given = append(given, t.flag)
		}
	}
	return given
}

// persistences returns the flags of the persistences s names.
func (s settings) persistences() []string {
	var given []string
	for _, p := range []struct{ flag, v string }{
		{"--postgres-url", s.PostgresURL}, {"--sqlite-path", s.SQLitePath}, {"--mysql-url", s.MySQLURL},
		{"--redis-store-url", s.RedisStoreURL},
	} {
		if p.v != "" {
			given = append(given, p.flag)
		}
	}
	return given
}

// connectionFlag reports whether the flag usage u is a connection flag's:
// those are listed once, in "postbus help".
func connectionFlag(u string) bool {
	for _, p := range []string{"PostgreSQL", "SQLite", "MySQL", "RabbitMQ", "NATS", "Redis", "Kafka", "SQS"} {
		if strings.HasPrefix(u, p) {
			return true
		}
	}
	return false
}

// command is one subcommand's flag set: its own flags, the connection
// settings and --json.
type command struct {
	fs      *flag.FlagSet
	conn    settings
	envErr  error // a POSTBUS_* variable that does not parse
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
	c.fs.StringVar(&s.RedisStoreURL, "redis-store-url", env("REDIS_STORE_URL"), "Redis persistence URL, redis://[:password@]host:port/db (POSTBUS_REDIS_STORE_URL)")
	c.fs.StringVar(&s.RedisStorePrefix, "redis-store-prefix", env("REDIS_STORE_PREFIX"), "Redis persistence key prefix (POSTBUS_REDIS_STORE_PREFIX)")
	c.fs.StringVar(&s.RabbitMQURL, "rabbitmq-url", env("RABBITMQ_URL"), "RabbitMQ URL (POSTBUS_RABBITMQ_URL)")
	c.fs.StringVar(&s.RabbitMQExchange, "rabbitmq-exchange", env("RABBITMQ_EXCHANGE"), "RabbitMQ events exchange (POSTBUS_RABBITMQ_EXCHANGE)")
	c.fs.StringVar(&s.NATSURL, "nats-url", env("NATS_URL"), "NATS URL (POSTBUS_NATS_URL)")
	c.fs.StringVar(&s.NATSStream, "nats-stream", env("NATS_STREAM"), "NATS stream (POSTBUS_NATS_STREAM)")
	c.fs.StringVar(&s.NATSPrefix, "nats-prefix", env("NATS_PREFIX"), "NATS subject prefix (POSTBUS_NATS_PREFIX)")
	c.fs.StringVar(&s.RedisURL, "redis-url", env("REDIS_URL"), "Redis URL, redis://[:password@]host:port/db (POSTBUS_REDIS_URL)")
	c.fs.StringVar(&s.RedisPrefix, "redis-prefix", env("REDIS_PREFIX"), "Redis key prefix (POSTBUS_REDIS_PREFIX)")
	c.fs.StringVar(&s.KafkaBrokers, "kafka-brokers", env("KAFKA_BROKERS"), "Kafka seed brokers, host:port,... (POSTBUS_KAFKA_BROKERS)")
	c.fs.StringVar(&s.KafkaPrefix, "kafka-prefix", env("KAFKA_PREFIX"), "Kafka topic prefix (POSTBUS_KAFKA_PREFIX)")
	c.fs.IntVar(&s.KafkaPartitions, "kafka-partitions", c.envInt("KAFKA_PARTITIONS", env), "Kafka partitions of created topics (POSTBUS_KAFKA_PARTITIONS)")
	c.fs.IntVar(&s.KafkaReplication, "kafka-replication", c.envInt("KAFKA_REPLICATION", env), "Kafka replication factor of created topics (POSTBUS_KAFKA_REPLICATION)")
	c.fs.StringVar(&s.SQSRegion, "sqs-region", env("SQS_REGION"), "SQS region (POSTBUS_SQS_REGION)")
	c.fs.StringVar(&s.SQSEndpoint, "sqs-endpoint", env("SQS_ENDPOINT"), "SQS and SNS endpoint URL (POSTBUS_SQS_ENDPOINT)")
	c.fs.StringVar(&s.SQSPrefix, "sqs-prefix", env("SQS_PREFIX"), "SQS queue and SNS topic name prefix (POSTBUS_SQS_PREFIX)")
	c.fs.StringVar(&s.SQSProtocol, "sqs-protocol", env("SQS_PROTOCOL"), "SQS protocol, json or query (POSTBUS_SQS_PROTOCOL)")
	c.fs.BoolVar(&s.SQSKeepQueuePolicy, "sqs-keep-queue-policy", c.envBool("SQS_KEEP_QUEUE_POLICY", env), "SQS: provision leaves queue policies alone (POSTBUS_SQS_KEEP_QUEUE_POLICY)")
	c.fs.BoolVar(&c.json, "json", false, "print JSON instead of a table")
	return c
}

// envInt reads the POSTBUS_ variable k as the default of an int flag; a
// value that is not an integer makes parse fail.
func (c *command) envInt(k string, env func(string) string) int {
	v := env(k)
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil && c.envErr == nil {
		c.envErr = usagef("POSTBUS_%s=%q: not an integer", k, v)
	}
	return n
}

// envBool reads the POSTBUS_ variable k as the default of a bool flag; a
// value strconv.ParseBool refuses makes parse fail.
func (c *command) envBool(k string, env func(string) string) bool {
	v := env(k)
	if v == "" {
		return false
	}
	b, err := strconv.ParseBool(v)
	if err != nil && c.envErr == nil {
		c.envErr = usagef("POSTBUS_%s=%q: not true or false", k, v)
	}
	return b
}

// parse parses flags placed before, between or after the arguments, and
// returns the arguments. --help prints the command's usage.
func (a *app) parse(c *command, args []string) ([]string, error) {
	defer func() { a.conns = append(a.conns, c.conn.urls()...) }()
	if c.envErr != nil {
		return nil, c.envErr
	}
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
		if connectionFlag(f.Usage) {
			return // listed once in "postbus help"
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
