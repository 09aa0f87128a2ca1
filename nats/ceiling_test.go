package nats_test

import (
	"cmp"
	"context"
	"fmt"
	"testing"
	"time"

	natsio "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/nats"
)

// BenchmarkRawClientCeiling measures what nats.go's jetstream package alone
// reaches on this server with the guarantees the transport gives:
// `senders` goroutines each publish a 1 KiB message with a Nats-Msg-Id and
// wait for its PubAck before the next; one pull consumer (64 messages per
// pull) acknowledges each message. With conns=2 the publishers use a
// connection of their own (the server reads each connection on one
// goroutine). No Postbus code runs, so the figure is the ceiling
// BenchmarkSendToHandler is compared with in docs/transports/nats.md.
// With headers=postbus each message carries the headers the transport
// writes for a command (its wire encoding), and the consumer parses them:
// the cost of the readable header format alone.
//
//	go test -run '^$' -bench RawClientCeiling -benchtime 30000x
func BenchmarkRawClientCeiling(b *testing.B) {
	for _, senders := range []int{8, 32} {
		for _, conns := range []int{1, 2} {
			b.Run(fmt.Sprintf("senders=%d/conns=%d/headers=none", senders, conns), func(b *testing.B) { benchRawClient(b, senders, conns, false) })
		}
		b.Run(fmt.Sprintf("senders=%d/conns=1/headers=postbus", senders), func(b *testing.B) { benchRawClient(b, senders, 1, true) })
	}
}

func benchRawClient(b *testing.B, senders, conns int, headers bool) {
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
	handled := bustest.NewCountdown(int64(b.N))
	subject := rawConsumer(b, js, opts, handled)
	body := make([]byte, 1024)
	bustest.MeasureThroughput(b, senders, handled, func(i int64) error {
		if headers {
			env := command("raw", int(i))
			env.Body = body
			_, err := pubJS.PublishMsg(context.Background(), nats.EncodeMsg(subject, env))
			return err
		}
		_, err := pubJS.Publish(context.Background(), subject, body, jetstream.WithMsgID(fmt.Sprint(i)))
		return err
	})
}

// rawConsumer creates the run's stream and a durable pull consumer on one
// of its subjects (64 messages per pull) that acknowledges each message and
// counts it in handled. It returns the subject.
func rawConsumer(b *testing.B, js jetstream.JetStream, opts nats.Options, handled *bustest.Countdown) string {
	ctx := drivertest.Ctx(b, 0)
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
	cc, err := c.Consume(func(m jetstream.Msg) {
		_ = m.Headers()
		_ = m.Ack()
		handled.Done()
	}, jetstream.PullMaxMessages(64))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cc.Stop)
	return subject
}

// BenchmarkRawClientPipelinedCeiling is the ceiling of a pipelined
// hand-over (BenchmarkSendBatch, a dispatched burst): nats.go's jetstream
// package alone, one goroutine publishing asynchronously with at most
// `window` messages awaiting their PubAck, a second checking every PubAck
// in order. Each message is the transport's wire encoding of a small
// command (a 16-byte body, its Nats-Msg-Id included); the consumer is the
// one of BenchmarkRawClientCeiling.
//
//	go test -run '^$' -bench RawClientPipelinedCeiling -benchtime 50000x
func BenchmarkRawClientPipelinedCeiling(b *testing.B) {
	for _, window := range []int{64, 512} {
		b.Run(fmt.Sprintf("window=%d", window), func(b *testing.B) {
			nc := connect(b, serverURL())
			opts := namespace(b, nc)
			js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(window))
			if err != nil {
				b.Fatal(err)
			}
			handled := bustest.NewCountdown(int64(b.N))
			subject := rawConsumer(b, js, opts, handled)
			msgs := make([]*natsio.Msg, b.N)
			for i := range msgs {
				env := command("raw", i)
				env.Body = make([]byte, 16)
				msgs[i] = nats.EncodeMsg(subject, env)
			}
			futures := make(chan jetstream.PubAckFuture, window)
			checked := make(chan error, 1)
			go func() {
				var first error
				for f := range futures {
					select {
					case <-f.Ok():
					case err := <-f.Err():
						first = cmp.Or(first, err)
					}
				}
				checked <- first
			}()
			b.ResetTimer()
			start := time.Now()
			for _, m := range msgs {
				f, err := js.PublishMsgAsync(m)
				if err != nil {
					b.Fatal(err)
				}
				futures <- f
			}
			close(futures)
			if err := <-checked; err != nil {
				b.Fatal(err)
			}
			bustest.ReportThroughput(b, start, handled)
		})
	}
}
