package kafka_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/postbus/bus/internal/drivertest"
)

// BenchmarkEventLayout compares, with franz-go alone, the two event
// layouts the transport could use: a topic per event type, against one
// events topic whose records carry the type in a header. Four endpoints
// each subscribe to one of four event types; b.N 1 KiB events, spread
// evenly over the types, are produced by 8 goroutines that each wait for
// the acknowledgement (as Publish does), and every endpoint's group consumes
// until it has its own. With one topic, each endpoint fetches every event
// and drops three in four.
//
//	go test -run '^$' -bench EventLayout -benchtime 20000x
func BenchmarkEventLayout(b *testing.B) {
	for _, layout := range []string{"topic-per-type", "one-topic"} {
		b.Run(layout, func(b *testing.B) { benchEventLayout(b, layout) })
	}
}

func benchEventLayout(b *testing.B, layout string) {
	const types = 4
	opts := testOptions(b, seeds)
	topicOf := func(typ int) string {
		if layout == "one-topic" {
			return opts.TopicPrefix + ".events"
		}
		return fmt.Sprintf("%s.e.type%d", opts.TopicPrefix, typ)
	}
	prod, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ProducerLinger(0))
	if err != nil {
		b.Fatal(err)
	}
	defer prod.Close()
	var topics []string
	for typ := range types {
		if t := topicOf(typ); len(topics) == 0 || topics[len(topics)-1] != t {
			topics = append(topics, t)
		}
	}
	if _, err := kadm.NewClient(prod).CreateTopics(drivertest.Ctx(b, 0), int32(opts.Partitions), 1, nil, topics...); err != nil {
		b.Fatal(err)
	}
	per := max(b.N/types, 1)
	var fetched atomic.Int64
	var done sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var clients []*kgo.Client
	for typ := range types {
		cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumerGroup(fmt.Sprintf("%s.g.sub%d", opts.TopicPrefix, typ)),
			kgo.ConsumeTopics(topicOf(typ)), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err != nil {
			b.Fatal(err)
		}
		clients = append(clients, cl)
		want := fmt.Sprint(typ)
		done.Add(1)
		go func() {
			defer done.Done()
			got := 0
			for got < per && ctx.Err() == nil {
				cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
					fetched.Add(1)
					if len(r.Headers) > 0 && string(r.Headers[0].Value) == want {
						got++
					}
				})
			}
		}()
	}
	body := make([]byte, 1024)
	b.SetBytes(1024)
	b.ResetTimer()
	start := time.Now()
	var next atomic.Int64
	var senders sync.WaitGroup
	for range 8 {
		senders.Go(func() {
			for i := next.Add(1) - 1; i < int64(per*types); i = next.Add(1) - 1 {
				typ := int(i % types)
				err := prod.ProduceSync(ctx, &kgo.Record{Topic: topicOf(typ), Value: body,
					Headers: []kgo.RecordHeader{{Key: "postbus-type", Value: []byte(fmt.Sprint(typ))}}}).FirstErr()
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	senders.Wait()
	done.Wait()
	el := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(per*types)/el.Seconds(), "events/s")
	b.ReportMetric(float64(fetched.Load())/float64(per*types), "fetched/event")
	cancel()
	for _, cl := range clients {
		cl.Close()
	}
}
