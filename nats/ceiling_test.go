package nats_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/postbus/bus/bustest"
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
	handled := bustest.NewCountdown(n)
	cc, err := c.Consume(func(m jetstream.Msg) {
		_ = m.Headers()
		_ = m.Ack()
		handled.Done()
	}, jetstream.PullMaxMessages(64))
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Stop()

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
