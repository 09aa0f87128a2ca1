package rabbitmq_test

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/postbus/bus/bustest"
)

// BenchmarkRawClientCeiling measures what amqp091-go alone reaches on this
// broker with the guarantees the transport gives: `senders` goroutines each
// publish a persistent 1 KiB message and wait for its confirm before the
// next, one consumer (prefetch 32) acknowledges each message. No Postbus
// code runs, so the figure is the ceiling BenchmarkSendToHandler is
// compared with in docs/transports/rabbitmq.md.
//
//	go test -run '^$' -bench RawClientCeiling -benchtime 20000x
func BenchmarkRawClientCeiling(b *testing.B) {
	for _, queueType := range []string{amqp.QueueTypeQuorum, amqp.QueueTypeClassic} {
		for _, senders := range []int{8, 32} {
			b.Run(fmt.Sprintf("queue=%s/senders=%d", queueType, senders), func(b *testing.B) {
				benchRawClient(b, queueType, senders)
			})
		}
	}
}

func benchRawClient(b *testing.B, queueType string, senders int) {
	conn, q, handled := rawConsumer(b, queueType)
	body := make([]byte, 1024)
	channels := make(chan *amqp.Channel, senders) // one per sender
	for range senders {
		channels <- confirmChannel(b, conn)
	}
	bustest.MeasureThroughput(b, senders, handled, func(int64) error {
		ch := <-channels
		defer func() { channels <- ch }()
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", q, true, false,
			amqp.Publishing{DeliveryMode: amqp.Persistent, Body: body})
		if err != nil {
			return err
		}
		if ok, err := dc.WaitContext(context.Background()); !ok || err != nil {
			return fmt.Errorf("not confirmed: %v", err)
		}
		return nil
	})
}

// rawConsumer connects, declares a durable queue of queueType and starts
// one consumer (prefetch 32) that acknowledges each of b.N messages and
// counts it in the returned countdown.
func rawConsumer(b *testing.B, queueType string) (*amqp.Connection, string, *bustest.Countdown) {
	e := newEnv(b)
	q := e.queue("raw")
	conn, err := amqp.Dial(brokerURL())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	setup, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	args := amqp.Table{}
	if queueType == amqp.QueueTypeQuorum {
		args[amqp.QueueTypeArg] = amqp.QueueTypeQuorum
	}
	if _, err := setup.QueueDeclare(q, true, false, false, false, args); err != nil {
		b.Fatal(err)
	}
	handled := bustest.NewCountdown(int64(b.N))
	cons, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	if err := cons.Qos(32, 0, false); err != nil {
		b.Fatal(err)
	}
	deliveries, err := cons.Consume(q, "", false, false, false, false, nil)
	if err != nil {
		b.Fatal(err)
	}
	go func() {
		for d := range deliveries {
			_ = d.Ack(false)
			handled.Done()
		}
	}()
	return conn, q, handled
}

func confirmChannel(b *testing.B, conn *amqp.Connection) *amqp.Channel {
	ch, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	return ch
}

// BenchmarkRawClientPipelinedCeiling is the ceiling of a pipelined
// hand-over (BenchmarkSendBatch, a dispatched burst): amqp091-go alone on
// a quorum queue, `channels` goroutines each publishing persistent,
// mandatory 16-byte messages on a channel of its own in confirm mode
// without waiting, at most `window` unconfirmed per channel, while a
// second goroutine per channel checks every confirm in order. The consumer
// is the one of BenchmarkRawClientCeiling. The transport's defaults are 4
// publisher channels of 256 unconfirmed messages each.
//
//	go test -run '^$' -bench RawClientPipelinedCeiling -benchtime 50000x
func BenchmarkRawClientPipelinedCeiling(b *testing.B) {
	for _, c := range []struct{ channels, window int }{{1, 256}, {4, 256}} {
		b.Run(fmt.Sprintf("queue=quorum/channels=%d/window=%d", c.channels, c.window), func(b *testing.B) {
			conn, q, handled := rawConsumer(b, amqp.QueueTypeQuorum)
			chans := make([]*amqp.Channel, c.channels)
			for i := range chans {
				chans[i] = confirmChannel(b, conn)
			}
			body := make([]byte, 16)
			per := (b.N + c.channels - 1) / c.channels
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			errs := make(chan error, c.channels)
			for i, ch := range chans {
				n := min(per, b.N-i*per)
				wg.Go(func() { errs <- publishPipelined(ch, q, body, n, c.window) })
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					b.Fatal(err)
				}
			}
			bustest.ReportThroughput(b, start, handled)
		})
	}
}

// publishPipelined publishes n messages on ch with at most window
// unconfirmed, and returns the first failure.
func publishPipelined(ch *amqp.Channel, q string, body []byte, n, window int) error {
	confirms := make(chan *amqp.DeferredConfirmation, window)
	checked := make(chan error, 1)
	go func() {
		var first error
		for dc := range confirms {
			if ok, err := dc.WaitContext(context.Background()); (!ok || err != nil) && first == nil {
				first = fmt.Errorf("not confirmed: %v", err)
			}
		}
		checked <- first
	}()
	var err error
	for range n {
		var dc *amqp.DeferredConfirmation
		dc, err = ch.PublishWithDeferredConfirmWithContext(context.Background(), "", q, true, false,
			amqp.Publishing{DeliveryMode: amqp.Persistent, Body: body})
		if err != nil {
			break
		}
		confirms <- dc
	}
	close(confirms)
	return cmp.Or(err, <-checked)
}
