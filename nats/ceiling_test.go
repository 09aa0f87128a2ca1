package nats_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// BenchmarkRawClientCeiling measures what nats.go's jetstream package alone
// reaches on this server with the guarantees the transport gives:
// `senders` goroutines each publish a 1 KiB message with a Nats-Msg-Id and
// wait for its PubAck before the next; one pull consumer (64 messages per
// pull) acknowledges each message. With conns=2 the publishers use a
// connection of their own (the server reads each connection on one
// goroutine). No Postbus code runs, so the figure is the ceiling
// BenchmarkSendToHandler is compared with in docs/transports/nats.md.
//
//	go test -run '^$' -bench RawClientCeiling -benchtime 30000x
func BenchmarkRawClientCeiling(b *testing.B) {
	for _, senders := range []int{8, 32} {
		for _, conns := range []int{1, 2} {
			b.Run(fmt.Sprintf("senders=%d/conns=%d", senders, conns), func(b *testing.B) { benchRawClient(b, senders, conns) })
		}
	}
}

func benchRawClient(b *testing.B, senders, conns int) {
	nc := connect(b, serverURL())
	opts := namespace(b, nc)
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	pubJS := js
	if conns == 2 {
		if pubJS, err = jetstream.New(connect(b, serverURL())); err != nil {
			b.Fatal(err)
		}
	}
	ctx := testCtx(b)
	subject := opts.SubjectPrefix + ".q.raw"
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: opts.Stream, Subjects: []string{opts.SubjectPrefix + ".q.*"}, Retention: jetstream.InterestPolicy,
	}); err != nil {
		b.Fatal(err)
	}
	c, err := js.CreateOrUpdateConsumer(ctx, opts.Stream, jetstream.ConsumerConfig{
		Durable: "raw", AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: subject, MaxAckPending: 10_000,
	})
	if err != nil {
		b.Fatal(err)
	}
	n := int64(b.N)
	var handled atomic.Int64
	all := make(chan struct{})
	cc, err := c.Consume(func(m jetstream.Msg) {
		_ = m.Ack()
		if handled.Add(1) == n {
			close(all)
		}
	}, jetstream.PullMaxMessages(64))
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Stop()

	body := make([]byte, 1024)
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for range senders {
		wg.Go(func() {
			for i := next.Add(1); i <= n; i = next.Add(1) {
				if _, err := pubJS.Publish(context.Background(), subject, body, jetstream.WithMsgID(fmt.Sprint(i))); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	select {
	case <-all:
	case <-time.After(2 * time.Minute):
		b.Fatalf("handled %d of %d", handled.Load(), n)
	}
	b.ReportMetric(float64(n)/time.Since(start).Seconds(), "msgs/s")
	b.StopTimer()
}
