package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/postbus/bus"
	"github.com/postbus/bus/kafka"
)

// kafkaDriver uses the run's own topic prefix (bench-<run>). Without
// -kafka-seeds it starts an in-process kfake cluster for the run, in this
// process (so -instances cannot share it); with them, the owner deletes
// the run's topics and groups at the end.
func kafkaDriver() transportDriver {
	return transportDriver{
		open: func(ctx context.Context, o *options, run string, owner bool) (bus.Transport, func(), error) {
			var cluster *kfake.Cluster
			seeds := strings.Split(o.kafkaSeeds, ",")
			if o.kafkaSeeds == "" {
				c, err := kfake.NewCluster(kfake.NumBrokers(1))
				if err != nil {
					return nil, nil, fmt.Errorf("in-process kafka cluster: %w", err)
				}
				cluster, seeds = c, c.ListenAddrs()
			}
			prefix := "bench-" + run
			t, err := kafka.New(seeds, kafka.Options{TopicPrefix: prefix, Logger: o.logger})
			if err != nil {
				if cluster != nil {
					cluster.Close()
				}
				return nil, nil, err
			}
			cleanup := func() {
				_ = t.Close(context.Background())
				if cluster != nil {
					cluster.Close()
					return
				}
				if owner {
					if err := deleteKafkaPrefix(seeds, prefix); err != nil {
						o.logger.Error("cannot delete the run's topics", "prefix", prefix, "error", err)
					}
				}
			}
			return t, cleanup, nil
		},
	}
}

// deleteKafkaPrefix deletes the topics and consumer groups named under prefix.
func deleteKafkaPrefix(seeds []string, prefix string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	topics, err := adm.ListTopics(ctx)
	if err != nil {
		return err
	}
	var mine []string
	for _, name := range topics.Names() {
		if strings.HasPrefix(name, prefix+".") {
			mine = append(mine, name)
		}
	}
	if len(mine) > 0 {
		if _, err := adm.DeleteTopics(ctx, mine...); err != nil {
			return err
		}
	}
	groups, err := adm.ListGroups(ctx)
	if err != nil {
		return err
	}
	var gs []string
	for _, g := range groups.Groups() {
		if strings.HasPrefix(g, prefix+".") {
			gs = append(gs, g)
		}
	}
	if len(gs) > 0 {
		_, err = adm.DeleteGroups(ctx, gs...)
	}
	return err
}
