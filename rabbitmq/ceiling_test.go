package rabbitmq_test

import (
	"context"
	"fmt"
	"testing"

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
	e := newEnv(b)
	q := e.queue("raw")
	conn, err := amqp.Dial(brokerURL())
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
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

	n := int64(b.N)
	handled := bustest.NewCountdown(n)
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

	body := make([]byte, 1024)
	channels := make(chan *amqp.Channel, senders) // one per sender
	for range senders {
		ch, err := conn.Channel()
		if err != nil {
			b.Fatal(err)
		}
		if err := ch.Confirm(false); err != nil {
			b.Fatal(err)
		}
		channels <- ch
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
