package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	sqsschemas "github.com/aws/aws-sdk-go-v2/service/sqs/schemas"
	"github.com/aws/smithy-go/transport/http/protocol/awsquery"
	natsio "github.com/nats-io/nats.go"
	goredis "github.com/redis/go-redis/v9"

	"github.com/postbus/bus/driver"
	"github.com/postbus/bus/kafka"
	"github.com/postbus/bus/nats"
	"github.com/postbus/bus/rabbitmq"
	"github.com/postbus/bus/redis"
	"github.com/postbus/bus/sqs"
)

// openTransport connects to the one transport s names.
func openTransport(ctx context.Context, s settings, b *backends) error {
	log := cmp.Or(s.Log, slog.New(slog.DiscardHandler))
	if given := s.transports(); len(given) > 1 {
		return usagef("give one transport, not %s", strings.Join(given, " and "))
	}
	switch {
	case s.RabbitMQURL != "":
		t, err := rabbitmq.New(s.RabbitMQURL, rabbitmq.Options{EventsExchange: s.RabbitMQExchange, Logger: log})
		if err != nil {
			return driver.RedactError(err, s.RabbitMQURL)
		}
		b.closers = append(b.closers, func() { _ = t.Close(context.Background()) })
		b.Transport, b.TransportName = t, "rabbitmq"
	case s.NATSURL != "":
		nc, err := natsio.Connect(s.NATSURL)
		if err != nil {
			return fmt.Errorf("nats: %w", driver.RedactError(err, s.NATSURL))
		}
		b.closers = append(b.closers, nc.Close)
		t, err := nats.New(nc, nats.Options{Stream: s.NATSStream, SubjectPrefix: s.NATSPrefix, Logger: log})
		if err != nil {
			return err
		}
		b.closers = append(b.closers, func() { _ = t.Close() })
		b.Transport, b.TransportName = t, "nats"
	case s.RedisURL != "":
		return openRedis(s, b, log)
	case s.KafkaBrokers != "":
		return openKafka(s, b, log)
	case s.SQSRegion != "" || s.SQSEndpoint != "":
		return openSQS(ctx, s, b, log)
	default:
		return errNoTransport
	}
	return nil
}

// openRedis opens the Redis Streams transport of a redis:// or rediss://
// URL (go-redis's ParseURL: password, database, TLS, timeouts).
func openRedis(s settings, b *backends, log *slog.Logger) error {
	opts, err := goredis.ParseURL(s.RedisURL)
	if err != nil {
		return usagef("--redis-url %s: %v", driver.Redact(s.RedisURL), driver.RedactError(err, s.RedisURL))
	}
	rdb := goredis.NewClient(opts)
	b.closers = append(b.closers, func() { _ = rdb.Close() })
	t, err := redis.New(rdb, redis.Options{Prefix: s.RedisPrefix, Logger: log})
	if err != nil {
		return err
	}
	b.closers = append(b.closers, func() { _ = t.Close(context.Background()) })
	b.Transport, b.TransportName = t, "redis"
	return nil
}

// openKafka opens the Kafka transport on the comma-separated seed brokers.
func openKafka(s settings, b *backends, log *slog.Logger) error {
	var seeds []string
	for _, a := range strings.Split(s.KafkaBrokers, ",") {
		if a = strings.TrimSpace(a); a != "" {
			seeds = append(seeds, a)
		}
	}
	t, err := kafka.New(seeds, kafka.Options{TopicPrefix: s.KafkaPrefix, Partitions: s.KafkaPartitions,
		ReplicationFactor: s.KafkaReplication, Logger: log})
	if err != nil {
		return err
	}
	b.closers = append(b.closers, func() { _ = t.Close(context.Background()) })
	b.Transport, b.TransportName = t, "kafka"
	return nil
}

// openSQS opens the SQS transport with the AWS SDK's default configuration
// (credentials from the environment, the shared files, SSO or the instance
// role), the region and endpoint of the flags over it.
func openSQS(ctx context.Context, s settings, b *backends, log *slog.Logger) error {
	var query bool
	switch s.SQSProtocol {
	case "", "json":
	case "query":
		query = true
	default:
		return usagef("--sqs-protocol %q: want json or query", s.SQSProtocol)
	}
	var loads []func(*awsconfig.LoadOptions) error
	if s.SQSRegion != "" {
		loads = append(loads, awsconfig.WithRegion(s.SQSRegion))
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx, loads...)
	if err != nil {
		return fmt.Errorf("sqs: aws configuration: %w", err)
	}
	// The SDK's HTTP transport (with any CA bundle the configuration
	// added), in a client whose idle connections Close can end.
	if bc, ok := cfg.HTTPClient.(*awshttp.BuildableClient); ok {
		tr := bc.GetTransport()
		b.closers = append(b.closers, tr.CloseIdleConnections)
		cfg.HTTPClient = &http.Client{Transport: tr}
	}
	if s.SQSEndpoint != "" {
		cfg.BaseEndpoint = aws.String(s.SQSEndpoint)
	}
	var sqsOpts []func(*awssqs.Options)
	if query {
		sqsOpts = append(sqsOpts, func(o *awssqs.Options) { o.Protocol = awsquery.New(sqsschemas.AmazonSQS) })
	}
	t, err := sqs.New(awssqs.NewFromConfig(cfg, sqsOpts...), sns.NewFromConfig(cfg),
		sqs.Options{NamePrefix: s.SQSPrefix, KeepQueuePolicy: s.SQSKeepQueuePolicy, Logger: log})
	if err != nil {
		return err
	}
	b.Transport, b.TransportName = t, "sqs"
	return nil
}
