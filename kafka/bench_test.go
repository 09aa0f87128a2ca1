package kafka_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
)

// BenchmarkSendToHandler measures send→handler throughput through the
// transport on the in-process kfake cluster: 8 or 64 goroutines send 1 KiB
// commands (each Send waits for its own produce acknowledgement) while
// Receive handles them with Concurrency 8. Reported as msgs/s.
//
//	go test -run '^$' -bench 'SendToHandler|RawClientCeiling' -benchtime 20000x
func BenchmarkSendToHandler(b *testing.B) {
	for _, senders := range []int{8, 64} {
		b.Run(fmt.Sprintf("senders=%d", senders), func(b *testing.B) { benchSendToHandler(b, senders) })
	}
}

func benchSendToHandler(b *testing.B, senders int) {
	tr, _ := newTransport(b)
	const queue = "bench"
	if err := tr.Provision(drivertest.Ctx(b, 0), bus.Topology{Queue: queue}); err != nil {
		b.Fatal(err)
	}
	handled := drivertest.CountReceived(b, tr, queue, int64(b.N))
	body := make([]byte, 1024)
	b.SetBytes(1024)
	bustest.MeasureThroughput(b, senders, handled, func(i int64) error {
		env := &bus.Envelope{ID: fmt.Sprint("b-", i), Type: "bench.Tick", Kind: bus.KindCommand, Body: body,
			ContentType: "application/json", Destination: queue, Source: "bench", SentAt: time.Now().UTC()}
		return tr.Send(context.Background(), queue, env)
	})
}

// BenchmarkRawClientCeiling does the same work with franz-go alone, no
// Postbus code: `senders` goroutines each produce a 1 KiB record and wait
// for its acknowledgement (ProduceSync) before the next; one group
// consumer polls, counts each record, and commits what it polled every
// 100 ms. It is the ceiling BenchmarkSendToHandler is compared with. With
// partitioner=sticky the records take franz-go's default partitioner,
// which keeps a burst of keyless records on one partition (and so one
// batch); with partitioner=round-robin they are spread over the
// partitions, as the transport spreads keyless messages.
func BenchmarkRawClientCeiling(b *testing.B) {
	for _, senders := range []int{8, 64} {
		for _, rr := range []bool{false, true} {
			name := map[bool]string{false: "sticky", true: "round-robin"}[rr]
			b.Run(fmt.Sprintf("senders=%d/partitioner=%s", senders, name), func(b *testing.B) { benchRawClient(b, senders, rr) })
		}
	}
}

func benchRawClient(b *testing.B, senders int, roundRobin bool) {
	opts := testOptions(b, seeds)
	topic := opts.TopicPrefix + ".q.raw"
	popts := []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.ProducerLinger(0)}
	if roundRobin {
		popts = append(popts, kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	}
	prod, err := kgo.NewClient(popts...)
	if err != nil {
		b.Fatal(err)
	}
	defer prod.Close()
	if _, err := kadm.NewClient(prod).CreateTopics(drivertest.Ctx(b, 0), int32(opts.Partitions), 1, nil, topic); err != nil {
		b.Fatal(err)
	}
	cons, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumerGroup(opts.TopicPrefix+".g.raw"),
		kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.AutoCommitInterval(100*time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	handled := bustest.NewCountdown(int64(b.N))
	ctx, cancel := context.WithCancel(context.Background())
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for ctx.Err() == nil {
			cons.PollFetches(ctx).EachRecord(func(*kgo.Record) { handled.Done() })
		}
	}()
	body := make([]byte, 1024)
	b.SetBytes(1024)
	bustest.MeasureThroughput(b, senders, handled, func(int64) error {
		return prod.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Value: body}).FirstErr()
	})
	cancel()
	<-polled
	cons.Close()
}
