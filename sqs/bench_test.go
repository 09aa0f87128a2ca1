package sqs_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/sqs"
)

// Against goaws these benchmarks measure the emulator more than the
// transport: it serves every call under one lock and scans its queue on
// each, and now and then a ReceiveMessage response is lost to a connection
// the HTTP client closed while reading it (the SDK retries, so the
// messages of the lost response return only after the 5 s visibility
// timeout; seen with the bare client as much as with the transport). The
// useful figure is "cpu-µs/msg", the CPU this process (the transport or the
// bare client, with the AWS SDK) spends per message; the emulator's CPU is
// not in it.
//
//	go test -run '^$' -bench 'SendToHandler|RawClientCeiling' -benchtime 3000x

// BenchmarkSendToHandler: 8 goroutines send 1 KiB commands through the
// transport (each Send waits for SendMessage) while Receive handles them
// with Concurrency 8.
func BenchmarkSendToHandler(b *testing.B) {
	tr := newTransport(b, sqs.Options{VisibilityTimeout: 5 * time.Second, WaitTime: time.Second})
	const queue = "bench"
	if err := tr.Provision(drivertest.Ctx(b, 0), bus.Topology{Queue: queue}); err != nil {
		b.Fatal(err)
	}
	handled := drivertest.CountReceived(b, tr, queue, int64(b.N))
	body := make([]byte, 1024)
	for i := range body {
		body[i] = 'a' + byte(i%26)
	}
	cpu := cpuTime()
	bustest.MeasureThroughput(b, 8, handled, func(i int64) error {
		env := &bus.Envelope{ID: "b-" + strconv.FormatInt(i, 10), Type: "bench.Command", Kind: bus.KindCommand, Body: body,
			ContentType: "application/json", Source: "bench", Destination: queue, SentAt: time.Now()}
		return tr.Send(context.Background(), queue, env)
	})
	b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/float64(b.N), "cpu-µs/msg")
}

// BenchmarkRawClientCeiling does the same work with the AWS SDK alone: 8
// goroutines SendMessage a 1 KiB body (no attributes); one loop receives 10
// at a time (long polling) and deletes each batch with DeleteMessageBatch.
// No Postbus code runs.
func BenchmarkRawClientCeiling(b *testing.B) {
	sc, _ := newClients(b)
	ctx := drivertest.Ctx(b, 0)
	name := bustest.Namespace() + "-raw"
	out, err := sc.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(name),
		Attributes: map[string]string{"VisibilityTimeout": "5"}})
	if err != nil {
		b.Fatal(err)
	}
	qurl := out.QueueUrl
	b.Cleanup(func() { _, _ = sc.DeleteQueue(context.Background(), &awssqs.DeleteQueueInput{QueueUrl: qurl}) })
	body := fmt.Sprintf("%01024d", 0)
	handled := bustest.NewCountdown(int64(b.N))
	rctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for rctx.Err() == nil {
			got, err := sc.ReceiveMessage(rctx, &awssqs.ReceiveMessageInput{QueueUrl: qurl, MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
			if err != nil || len(got.Messages) == 0 {
				continue
			}
			entries := make([]sqstypes.DeleteMessageBatchRequestEntry, len(got.Messages))
			for i, m := range got.Messages {
				entries[i] = sqstypes.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle}
			}
			if _, err := sc.DeleteMessageBatch(rctx, &awssqs.DeleteMessageBatchInput{QueueUrl: qurl, Entries: entries}); err != nil {
				continue
			}
			for range got.Messages {
				handled.Done()
			}
		}
	})
	cpu := cpuTime()
	bustest.MeasureThroughput(b, 8, handled, func(int64) error {
		_, err := sc.SendMessage(context.Background(), &awssqs.SendMessageInput{QueueUrl: qurl, MessageBody: aws.String(body)})
		return err
	})
	b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/float64(b.N), "cpu-µs/msg")
	cancel()
	wg.Wait()
}

// cpuTime is the user and system CPU time of this process.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
