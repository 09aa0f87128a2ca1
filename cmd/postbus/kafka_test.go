package main

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/kafka"
)

func TestKafkaFlagsRetryAndProvision(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	seeds := c.ListenAddrs()
	prefix := drivertest.Unique("pbcli.")
	t.Run("retry", func(t *testing.T) {
		path, id := failedInSQLite(t, "billing")
		tr, err := kafka.New(seeds, kafka.Options{TopicPrefix: prefix, Partitions: 1, Logger: drivertest.Logger(),
			ConsumerOptions: []kgo.Opt{kgo.HeartbeatInterval(50 * time.Millisecond), kgo.FetchMaxWait(200 * time.Millisecond)}})
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close(context.Background())
		checkRetried(t, tr, map[string]string{"POSTBUS_KAFKA_PREFIX": prefix},
			[]string{"--kafka-brokers", strings.Join(seeds, ",")}, path, "billing", id)
	})
	t.Run("provision", func(t *testing.T) {
		runProvision(t, map[string]string{"POSTBUS_KAFKA_BROKERS": strings.Join(seeds, ","), "POSTBUS_KAFKA_PREFIX": prefix},
			append(provisionArgs("shipping"), "--kafka-partitions", "3")...)
		cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		details, err := kadm.NewClient(cl).ListTopics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, d := range details.Sorted() {
			if strings.HasPrefix(d.Topic, prefix+".") && !strings.HasSuffix(d.Topic, ".billing") {
				got = append(got, d.Topic)
				if n := len(d.Partitions); n != 3 {
					t.Errorf("topic %s has %d partitions, want --kafka-partitions 3", d.Topic, n)
				}
			}
		}
		want := []string{prefix + ".e.orders_2EOrderPlaced", prefix + ".q.shipping", prefix + ".q.shipping-deadletter", prefix + ".q.shipping-error"}
		if !slices.Equal(got, want) {
			t.Errorf("topics %v, want %v", got, want)
		}
	})
}
