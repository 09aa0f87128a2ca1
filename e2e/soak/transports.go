package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	natsio "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	goredis "github.com/redis/go-redis/v9"

	"github.com/postbus/bus"
	"github.com/postbus/bus/kafka"
	"github.com/postbus/bus/nats"
	"github.com/postbus/bus/postgres"
	"github.com/postbus/bus/rabbitmq"
	"github.com/postbus/bus/redis"
	"github.com/postbus/bus/sqs"
	"github.com/postbus/bus/sqs/sqstest"
)

// The transports a soak runs on.
const (
	transportRabbitMQ = "rabbitmq"
	transportNATS     = "nats"
	transportRedis    = "redis"
	transportPostgres = "postgres" // the PostgreSQL transport, on the store's database
	transportKafka    = "kafka"    // kfake, in the soak process
	transportSQS      = "sqs"      // goaws, a child process of the soak
)

// transports lists every -transport value.
var transports = []string{transportRabbitMQ, transportNATS, transportRedis, transportPostgres, transportKafka, transportSQS}

func redisURL() string { return "redis://" + env("POSTBUS_TEST_REDIS_ADDR", "127.0.0.1:6379") }

// brokerURL returns the URL of the broker of a transport that runs on a
// shared service; "" for the PostgreSQL transport (the database is the
// broker) and for the emulators the soak starts itself.
func brokerURL(transport string) string {
	switch transport {
	case transportNATS:
		return natsURL()
	case transportRedis:
		return redisURL()
	case transportRabbitMQ:
		return rabbitURL()
	}
	return ""
}

// cuttable reports whether the workers reach the transport's broker
// through a proxy of the soak, so that a cut can sever them. The PostgreSQL
// transport has no broker of its own (a database cut is a broker cut);
// a Kafka client learns the broker's own address from its metadata and
// would go around a proxy.
func cuttable(transport string) bool {
	return transport != transportPostgres && transport != transportKafka
}

// openTransport connects to the broker of kind at rawURL (pool for the
// PostgreSQL transport) and returns the transport and the function that
// closes it. lease, when positive, is the Redis and PostgreSQL transports'
// Lease (how long a dead consumer's messages wait for another).
func openTransport(kind, rawURL string, n names, pool *pgxpool.Pool, lease time.Duration, logger *slog.Logger) (bus.Transport, func(), error) {
	closeCtx := func(f func(context.Context) error) func() {
		return func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = f(ctx)
		}
	}
	switch kind {
	case transportRabbitMQ:
		tr, err := rabbitmq.New(rawURL, rabbitmq.Options{
			EventsExchange: n.exchange(), ConnectionName: n.endpoint(), Logger: logger,
			ReconnectMax: time.Second,
		})
		if err != nil {
			return nil, nil, fmt.Errorf("rabbitmq transport: %w", err)
		}
		return tr, closeCtx(tr.Close), nil
	case transportNATS:
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
	case transportRedis:
		u, err := url.Parse(rawURL)
		if err != nil {
			return nil, nil, fmt.Errorf("redis url: %w", err)
		}
		rdb := goredis.NewClient(&goredis.Options{
			Addr: u.Host, DialTimeout: time.Second, ReadTimeout: 3 * time.Second, WriteTimeout: 3 * time.Second,
			PoolSize: 32,
		})
		tr, err := redis.New(rdb, redis.Options{Prefix: n.redisPrefix(), Lease: lease, Logger: logger})
		if err != nil {
			_ = rdb.Close()
			return nil, nil, fmt.Errorf("redis transport: %w", err)
		}
		return tr, func() { closeCtx(tr.Close)(); _ = rdb.Close() }, nil
	case transportPostgres:
		tr, err := postgres.NewTransport(pool, postgres.TransportOptions{Schema: n.schema(), Lease: lease, Logger: logger})
		if err != nil {
			return nil, nil, fmt.Errorf("postgres transport: %w", err)
		}
		return tr, closeCtx(tr.Close), nil
	case transportKafka:
		u, err := url.Parse(rawURL)
		if err != nil {
			return nil, nil, fmt.Errorf("kafka url: %w", err)
		}
		tr, err := kafka.New([]string{u.Host}, kafka.Options{
			TopicPrefix: n.subjectPrefix(), Partitions: 4, CommitInterval: 100 * time.Millisecond,
			PublishTimeout: 5 * time.Second, Logger: logger,
		})
		if err != nil {
			return nil, nil, fmt.Errorf("kafka transport: %w", err)
		}
		return tr, closeCtx(tr.Close), nil
	case transportSQS:
		hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}, Timeout: 30 * time.Second}
		sc, nc := (&sqstest.Emulator{URL: rawURL}).Clients(hc)
		tr, err := sqs.New(sc, nc, sqs.Options{VisibilityTimeout: 30 * time.Second, WaitTime: time.Second, Logger: logger})
		if err != nil {
			return nil, nil, fmt.Errorf("sqs transport: %w", err)
		}
		return tr, func() { closeCtx(tr.Close)(); hc.CloseIdleConnections() }, nil
	}
	return nil, nil, fmt.Errorf("unknown transport %q (want one of %v)", kind, transports)
}

// deleteTopology removes what the run created on the broker. The
// PostgreSQL transport's tables go with the run's schema; the emulators'
// state goes with them.
func deleteTopology(ctx context.Context, kind string, n names) error {
	switch kind {
	case transportNATS:
		return deleteStream(ctx, n)
	case transportRedis:
		return deleteRedisKeys(ctx, n)
	case transportRabbitMQ:
		return deleteQueues(n)
	}
	return nil
}

func deleteStream(ctx context.Context, n names) error {
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

func deleteQueues(n names) error {
	conn, err := amqp.DialConfig(rabbitURL(), amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		return fmt.Errorf("rabbitmq connect: %w", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("rabbitmq channel: %w", err)
	}
	for _, q := range []string{n.endpoint(), n.audit(), n.errorQueue(), n.deadLetterQueue()} {
		if _, err := ch.QueueDelete(q, false, false, false); err != nil {
			return fmt.Errorf("delete queue %s: %w", q, err)
		}
	}
	if err := ch.ExchangeDelete(n.exchange(), false, false); err != nil {
		return fmt.Errorf("delete exchange %s: %w", n.exchange(), err)
	}
	return nil
}

func deleteRedisKeys(ctx context.Context, n names) error {
	u, err := url.Parse(redisURL())
	if err != nil {
		return fmt.Errorf("redis url: %w", err)
	}
	rdb := goredis.NewClient(&goredis.Options{Addr: u.Host, DialTimeout: 3 * time.Second})
	defer rdb.Close()
	iter := rdb.Scan(ctx, 0, n.redisPrefix()+":*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return fmt.Errorf("scan redis keys: %w", err)
	}
	if len(keys) > 0 {
		if err := rdb.Del(ctx, keys...).Err(); err != nil {
			return fmt.Errorf("delete redis keys: %w", err)
		}
	}
	return nil
}
