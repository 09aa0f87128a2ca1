package nats_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/nats"
)

// A batch mixing sends, events whose subject no stream holds (the stream
// was created beforehand for queues only, and the transport uses it as it
// is), a bad queue name and a message over the server's maximum payload:
// each message gets its own outcome, and exactly the acknowledged sends
// are stored and delivered.
func TestSendBatchSettlesEachMessageByItsOwnAck(t *testing.T) {
	t.Parallel()
	nc := connect(t, serverURL())
	opts := namespace(t, nc)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(drivertest.Ctx(t, 0), jetstream.StreamConfig{
		Name: opts.Stream, Subjects: []string{opts.SubjectPrefix + ".q.*"}, Retention: jetstream.InterestPolicy,
	}); err != nil {
		t.Fatal(err)
	}
	tr := mustNew(t, nc, opts)
	const queue = "batch"
	if err := tr.Provision(drivertest.Ctx(t, 0), bus.Topology{Queue: queue}); err != nil {
		t.Fatal(err)
	}

	const n = 300
	batch := make([]bus.Outbound, n)
	wantOK := make(map[string]bool)
	for i := range batch {
		env := command(queue, i)
		out := bus.Outbound{Queue: queue, Envelope: env}
		switch {
		case i%10 == 4:
			env.Kind, env.Destination, out.Publish = bus.KindEvent, "", true // no stream for events
		case i%100 == 7:
			out.Queue = ""
		case i%100 == 8:
			env.Body = make([]byte, nc.MaxPayload()+1)
		default:
			wantOK[env.ID] = true
		}
		batch[i] = out
	}
	errs := tr.SendBatch(drivertest.Ctx(t, 0), batch)
	if len(errs) != n {
		t.Fatalf("%d results for %d messages", len(errs), n)
	}
	for i, err := range errs {
		ok := wantOK[batch[i].Envelope.ID]
		switch {
		case ok && err != nil:
			t.Errorf("message %d: %v", i, err)
		case !ok && err == nil:
			t.Errorf("message %d (publish %v, queue %q, %d bytes) succeeded, want an error",
				i, batch[i].Publish, batch[i].Queue, len(batch[i].Envelope.Body))
		case batch[i].Queue == "" && !batch[i].Publish && !errors.Is(err, nats.ErrInvalidName):
			t.Errorf("message %d to an empty queue name: got %v, want ErrInvalidName", i, err)
		case batch[i].Publish && !errors.Is(err, nats.ErrNoAck):
			t.Errorf("event %d without a stream: got %v, want ErrNoAck", i, err)
		}
	}
	if got := streamMsgs(t, nc, opts); got != uint64(len(wantOK)) {
		t.Errorf("the stream holds %d messages, want %d", got, len(wantOK))
	}
	r := startReceive(t, tr, queue, 8, nil)
	drivertest.Eventually(t, 30*time.Second, func() bool { return r.distinct() == len(wantOK) }, "every acknowledged send delivered")
	for id := range wantOK {
		if r.count(id) == 0 {
			t.Errorf("acknowledged message %s not delivered", id)
		}
	}
}

// A batch larger than the publish window is written as acknowledgements
// free room, and every message is acknowledged.
func TestSendBatchLargerThanTheWindow(t *testing.T) {
	t.Parallel()
	nc := connect(t, serverURL())
	opts := namespace(t, nc)
	opts.PublishWindow = 16
	tr := mustNew(t, nc, opts)
	const queue = "wide"
	batch := make([]bus.Outbound, 200)
	for i := range batch {
		batch[i] = bus.Outbound{Queue: queue, Envelope: command(queue, i)}
	}
	for i, err := range tr.SendBatch(drivertest.Ctx(t, 0), batch) {
		if err != nil {
			t.Errorf("message %d: %v", i, err)
		}
	}
	if got := streamMsgs(t, nc, opts); got != uint64(len(batch)) {
		t.Errorf("the stream holds %d messages, want %d", got, len(batch))
	}
}

// BenchmarkSendBatch measures the pipelined hand-over as the dispatcher
// makes it: one goroutine calls SendBatch with `size` commands (16-byte
// bodies) at a time, and one Receive with concurrency 8 handles them. It
// reports msgs/s from the first call to the last message handled;
// BenchmarkRawClientPipelinedCeiling is its ceiling.
//
//	go test -run '^$' -bench SendBatch -benchtime 50000x
func BenchmarkSendBatch(b *testing.B) {
	for _, size := range []int{100, 500} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			tr, _, _ := newTransport(b)
			const queue = "bench"
			if err := tr.Provision(drivertest.Ctx(b, 0), bus.Topology{Queue: queue}); err != nil {
				b.Fatal(err)
			}
			handled := drivertest.CountReceived(b, tr, queue, int64(b.N))
			batches := make([][]bus.Outbound, 0, b.N/size+1)
			for lo := 0; lo < b.N; lo += size {
				batch := make([]bus.Outbound, min(size, b.N-lo))
				for i := range batch {
					env := command(queue, lo+i)
					env.Body = make([]byte, 16)
					batch[i] = bus.Outbound{Queue: queue, Envelope: env}
				}
				batches = append(batches, batch)
			}
			b.ResetTimer()
			start := time.Now()
			for _, batch := range batches {
				for _, err := range tr.SendBatch(context.Background(), batch) {
					if err != nil {
						b.Fatal(err)
					}
				}
			}
			bustest.ReportThroughput(b, start, handled)
		})
	}
}
