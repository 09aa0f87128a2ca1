package main

import (
	"cmp"
	"fmt"

	"github.com/postbus/bus"
	"github.com/postbus/bus/kafka"
	"github.com/postbus/bus/redis"
)

// planMore describes what the Redis, Kafka and SQS transports' Provision
// creates for top, queues being top.Queue and top.Queues.
func planMore(s settings, top bus.Topology, queues []string) []string {
	var out []string
	switch {
	case s.RedisURL != "":
		prefix := cmp.Or(s.RedisPrefix, redis.DefaultPrefix)
		for _, q := range queues {
			out = append(out, fmt.Sprintf("redis stream %s:q:%s with the consumer group %s", prefix, q, q))
		}
		for _, e := range top.Events {
			out = append(out, fmt.Sprintf("redis set %s:sub:%s holding %s", prefix, e, top.Queue))
		}
	case s.KafkaBrokers != "":
		prefix := cmp.Or(s.KafkaPrefix, kafka.DefaultTopicPrefix)
		shape := fmt.Sprintf("%d partitions, replication factor %d",
			cmp.Or(s.KafkaPartitions, kafka.DefaultPartitions), cmp.Or(s.KafkaReplication, kafka.DefaultReplicationFactor))
		for _, q := range queues {
			out = append(out, fmt.Sprintf("kafka topic for queue %s (named under %s.q., %s)", q, prefix, shape))
		}
		for _, e := range top.Events {
			out = append(out, fmt.Sprintf("kafka topic for event %s (named under %s.e., %s), read by the group of %s from its end", e, prefix, shape, top.Queue))
		}
	case s.SQSRegion != "" || s.SQSEndpoint != "":
		for _, q := range queues {
			out = append(out, fmt.Sprintf("sqs queue for queue %s%s", q, named(s.SQSPrefix)))
		}
		for _, e := range top.Events {
			out = append(out, fmt.Sprintf("sns topic for event %s%s, with a raw-delivery subscription of the sqs queue of %s", e, named(s.SQSPrefix), top.Queue))
		}
		if len(top.Events) > 0 && !s.SQSKeepQueuePolicy {
			out = append(out, fmt.Sprintf("sqs queue policy of the queue of %s: the bus's topics may send to it (replaces its policy; --sqs-keep-queue-policy keeps it)", top.Queue))
		}
	}
	return out
}

// named says under which prefix SQS and SNS names are, if any.
func named(prefix string) string {
	if prefix == "" {
		return ""
	}
	return " (named under " + prefix + ")"
}
