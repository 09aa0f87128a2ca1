package rabbitmq_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/rabbitmq"
)

// A batch mixing sends to an existing queue, sends to a missing queue,
// events, a bad queue name and an envelope that cannot be encoded: each
// message gets its own outcome, and only the confirmed sends are in the
// queue. The batch is large enough to be split over every publisher
// channel.
func TestSendBatchSettlesEachMessageByItsOwnConfirm(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tr := e.transport(e.options())
	q := e.queue("batch")
	e.provision(tr, bus.Topology{Queue: q})
	missing := e.prefix + "missing"

	const n = 600
	batch := make([]bus.Outbound, n)
	want := make([]error, n) // nil, or the sentinel the result must match
	sent := 0
	for i := range batch {
		env := newEnvelope("T", []byte(fmt.Sprint(i)))
		out := bus.Outbound{Queue: q, Envelope: env}
		switch {
		case i%7 == 3:
			out.Queue, want[i] = missing, rabbitmq.ErrUnroutable
		case i%50 == 11:
			out.Queue, want[i] = "", rabbitmq.ErrInvalidName
		case i%50 == 12:
			env.ID, want[i] = strings.Repeat("x", 300), bus.ErrInvalidMessage
		case i%10 == 5:
			out.Publish = true // no queue is bound: dropped, and confirmed
		default:
			sent++
		}
		batch[i] = out
	}
	errs := tr.SendBatch(ctxT(t, time.Minute), batch)
	if len(errs) != n {
		t.Fatalf("%d results for %d messages", len(errs), n)
	}
	for i, err := range errs {
		switch {
		case want[i] == nil && err != nil:
			t.Errorf("message %d (to %q): %v", i, batch[i].Queue, err)
		case want[i] != nil && !errors.Is(err, want[i]):
			t.Errorf("message %d (to %q): got %v, want %v", i, batch[i].Queue, err, want[i])
		}
	}
	drivertest.Eventually(t, 10*time.Second, func() bool { return e.ready(q) == sent }, "the confirmed sends in the queue")
}

// A queue that rejects publishes beyond its length nacks the messages over
// the limit: those fail with ErrNacked, the others of the same batch are
// confirmed.
func TestSendBatchNackFailsOnlyTheNackedMessages(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tr := e.transport(e.options())
	q := e.queue("bounded")
	if err := e.admin(func(ch *amqp.Channel) error {
		// A classic queue: a quorum queue applies the limit only
		// approximately while publishes are in flight.
		_, err := ch.QueueDeclare(q, true, false, false, false, amqp.Table{
			amqp.QueueTypeArg: amqp.QueueTypeClassic, "x-max-length": int32(3), "x-overflow": "reject-publish"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	batch := make([]bus.Outbound, 8)
	for i := range batch {
		batch[i] = bus.Outbound{Queue: q, Envelope: newEnvelope("T", nil)}
	}
	var ok, nacked int
	for i, err := range tr.SendBatch(ctxT(t, 30*time.Second), batch) {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, rabbitmq.ErrNacked):
			nacked++
		default:
			t.Errorf("message %d: %v", i, err)
		}
	}
	if ok != 3 || nacked != 5 {
		t.Errorf("%d confirmed, %d nacked; want 3 and 5", ok, nacked)
	}
	if r := e.ready(q); r != 3 {
		t.Errorf("%d messages in the queue, want 3", r)
	}
}

// BenchmarkSendBatch measures the pipelined hand-over as the dispatcher
// makes it: one goroutine calls SendBatch with `size` commands (16-byte
// bodies) at a time, on a quorum queue that one Receive with concurrency 8
// drains. It reports msgs/s from the first call to the last message
// handled; BenchmarkRawClientPipelinedCeiling is its ceiling.
//
//	go test -run '^$' -bench SendBatch -benchtime 50000x
func BenchmarkSendBatch(b *testing.B) {
	for _, size := range []int{100, 500} {
		b.Run(fmt.Sprintf("queue=quorum/batch=%d", size), func(b *testing.B) {
			e := newEnv(b)
			tr := e.transport(e.options())
			q := e.queue("bench")
			e.provision(tr, bus.Topology{Queue: q})
			handled := bustest.NewCountdown(int64(b.N))
			receive(b, tr, q, 8, func(context.Context, *bus.Envelope) error {
				handled.Done()
				return nil
			})
			benchSendBatch(b, handled, size, func(ctx context.Context, batch []bus.Outbound) []error {
				return tr.SendBatch(ctx, batch)
			}, q)
		})
	}
}

// benchSendBatch is the timed part of BenchmarkSendBatch.
func benchSendBatch(b *testing.B, handled *bustest.Countdown, size int, send func(context.Context, []bus.Outbound) []error, q string) {
	batches := make([][]bus.Outbound, 0, b.N/size+1)
	for lo := 0; lo < b.N; lo += size {
		batch := make([]bus.Outbound, min(size, b.N-lo))
		for i := range batch {
			batch[i] = bus.Outbound{Queue: q, Envelope: newEnvelope("bench.Msg", make([]byte, 16))}
		}
		batches = append(batches, batch)
	}
	b.ResetTimer()
	start := time.Now()
	for _, batch := range batches {
		for _, err := range send(context.Background(), batch) {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	bustest.ReportThroughput(b, start, handled)
}
