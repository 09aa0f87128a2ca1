package nats_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
)

// BenchmarkSendToHandler measures send→handler throughput: 8 or 64
// goroutines send 1 KiB commands (each Send waits for its own PubAck) while Receive
// handles them with Concurrency 8. Reported as msgs/s.
func BenchmarkSendToHandler(b *testing.B) {
	for _, senders := range []int{8, 64} {
		b.Run(fmt.Sprintf("senders=%d", senders), func(b *testing.B) { benchSendToHandler(b, senders) })
	}
}

func benchSendToHandler(b *testing.B, senders int) {
	tr, nc, opts := newTransport(b)
	const queue = "bench"
	if err := tr.Provision(drivertest.Ctx(b, 0), bus.Topology{Queue: queue}); err != nil {
		b.Fatal(err)
	}
	handled := drivertest.CountReceived(b, tr, queue, int64(b.N))
	body := make([]byte, 1024)
	b.SetBytes(1024)
	go func() { // diagnostic
		last := handled.Handled()
		for {
			select {
			case <-handled.All():
				return
			case <-time.After(3 * time.Second):
			}
			if h := handled.Handled(); h == last {
				info := consumerInfo(b, nc, opts, queue)
				b.Logf("stall at %d: pending %d ackpending %d waiting %d redelivered %d", h, info.NumPending, info.NumAckPending, info.NumWaiting, info.NumRedelivered)
			} else {
				last = h
			}
		}
	}()
	bustest.MeasureThroughput(b, senders, handled, func(i int64) error {
		env := command(queue, int(i))
		env.Body = body
		return tr.Send(context.Background(), queue, env)
	})
}

// BenchmarkLayout compares the two stream layouts the transport could use,
// with raw JetStream calls: one stream holding 4 queues on 4 subjects (4
// filtered consumers), against 4 streams of one subject each. Each of 4
// queues gets b.N/4 async-published 1 KiB messages, consumed and acked.
func BenchmarkLayout(b *testing.B) {
	for _, layout := range []string{"one-stream", "stream-per-queue"} {
		b.Run(layout, func(b *testing.B) {
			nc := connect(b, serverURL())
			opts := namespace(b, nc)
			js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(512))
			if err != nil {
				b.Fatal(err)
			}
			ctx := drivertest.Ctx(b, 0)
			const queues = 4
			streams := make([]string, queues)
			for q := range queues {
				streams[q] = opts.Stream
				if layout == "stream-per-queue" {
					streams[q] = fmt.Sprintf("%s_%d", opts.Stream, q)
				}
			}
			for q := range queues {
				subj := fmt.Sprintf("%s.q.%d", opts.SubjectPrefix, q)
				cfg := jetstream.StreamConfig{Name: streams[q], Subjects: []string{subj}, Retention: jetstream.InterestPolicy}
				if layout == "one-stream" {
					cfg.Subjects = []string{opts.SubjectPrefix + ".q.*"}
				}
				if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
					b.Fatal(err)
				}
				if layout == "stream-per-queue" {
					b.Cleanup(func() { _ = js.DeleteStream(context.Background(), streams[q]) })
				}
			}
			per := max(b.N/queues, 1)
			var done sync.WaitGroup
			var ccs []jetstream.ConsumeContext
			for q := range queues {
				c, err := js.CreateOrUpdateConsumer(ctx, streams[q], jetstream.ConsumerConfig{
					Durable: fmt.Sprintf("c%d", q), AckPolicy: jetstream.AckExplicitPolicy,
					FilterSubject: fmt.Sprintf("%s.q.%d", opts.SubjectPrefix, q), MaxAckPending: 10_000,
				})
				if err != nil {
					b.Fatal(err)
				}
				var got atomic.Int64
				done.Add(1)
				cc, err := c.Consume(func(m jetstream.Msg) {
					_ = m.Ack()
					if got.Add(1) == int64(per) {
						done.Done()
					}
				}, jetstream.PullMaxMessages(64))
				if err != nil {
					b.Fatal(err)
				}
				ccs = append(ccs, cc)
			}
			body := make([]byte, 1024)
			b.SetBytes(1024)
			b.ResetTimer()
			start := time.Now()
			for i := range per * queues {
				if _, err := js.PublishAsync(fmt.Sprintf("%s.q.%d", opts.SubjectPrefix, i%queues), body); err != nil {
					b.Fatal(err)
				}
			}
			<-js.PublishAsyncComplete()
			done.Wait()
			b.ReportMetric(float64(per*queues)/time.Since(start).Seconds(), "msgs/s")
			b.StopTimer()
			for _, cc := range ccs {
				cc.Stop()
			}
		})
	}
}
