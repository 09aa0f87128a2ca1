package sqs

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/postbus/bus"
	"github.com/postbus/bus/driver"
)

// Tuning of the receive loop.
const (
	maxBatch        = 10 // SQS's limit for ReceiveMessage and DeleteMessageBatch
	maxPollers      = 8
	minRetryDelay   = 50 * time.Millisecond
	maxRetryDelay   = 5 * time.Second
	deleteLinger    = 5 * time.Millisecond // how long a delete waits for others to batch with
	deleteParallel  = 4                    // DeleteMessageBatch calls in flight per Receive
	settleTimeout   = 10 * time.Second     // bound of one settling call
	pollersPerBatch = maxBatch             // one poller per this many handler slots
)

// Receive long-polls the queue and calls h for each message, with at most
// opts.Concurrency calls at once. It asks for no more messages than it has
// free handler slots, so no received message waits unhandled; one poller
// runs per 10 slots (at most 8). While h runs, the message's visibility is
// extended every Options.HeartbeatInterval; if an extension fails, the
// delivery ctx is cancelled with cause ErrVisibilityLost, since another
// consumer may then receive the message. A message is deleted (in batches
// of up to 10) when h returns nil, and made visible again at once
// (visibility 0) when it returns an error, so the bus's retries decide
// what happens next.
//
// When ctx ends, Receive cancels its pending long polls, waits for the
// handlers in flight, settles their messages and returns nil. A long poll
// cancelled just as SQS handed it messages leaves them hidden until their
// visibility timeout lapses; they are then received again. A failing
// ReceiveMessage (a network error, a queue deleted meanwhile) is logged and
// retried with backoff up to 5 s until ctx ends, so Receive resumes when
// the service or the queue is back. Receive returns an error only when the
// queue cannot be found or created at the start.
func (t *Transport) Receive(ctx context.Context, queue string, opts bus.ReceiveOptions, h bus.DeliveryHandler) error {
	if err := driver.CheckReceive[errorFamily](queue, h); err != nil {
		return err
	}
	qurl, err := t.queueURL(ctx, queue)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("sqs: receive %s: %w", queue, err)
	}
	conc := max(opts.Concurrency, 1)
	r := &receiver{
		t:    t,
		h:    h,
		qurl: qurl,
		hctx: context.WithoutCancel(ctx),
		log:  t.opts.Logger.With(driver.LogQueue, queue),
	}
	// Received messages wait for a handler in one FIFO queue; the pollers
	// ask only for free handler slots, so none waits long. Those received
	// as Receive stops are still handled.
	pool, err := driver.NewPool(driver.PoolOptions[sqstypes.Message]{Concurrency: conc, Handle: r.handle})
	if err != nil {
		return fmt.Errorf("sqs: receive %s: %w", queue, err)
	}
	del, err := driver.NewBatcher(driver.BatcherOptions[deleteEntry]{
		Max: maxBatch, Linger: deleteLinger, Parallel: deleteParallel, Flush: r.deleteBatch,
	})
	if err != nil {
		pool.Close()
		return fmt.Errorf("sqs: receive %s: %w", queue, err)
	}
	r.pool, r.del = pool, del
	pollers := min((conc+pollersPerBatch-1)/pollersPerBatch, maxPollers)
	var polls sync.WaitGroup
	for range pollers {
		polls.Go(func() { r.poll(ctx) })
	}
	polls.Wait()
	pool.Close()
	del.Close()
	return nil
}

type receiver struct {
	t    *Transport
	h    bus.DeliveryHandler
	qurl string
	hctx context.Context // handlers' parent: outlives Receive's ctx
	pool *driver.Pool[sqstypes.Message]
	del  *driver.Batcher[deleteEntry] // deletes of handled messages
	log  *slog.Logger
}

// poll receives messages for free handler slots until ctx ends.
func (r *receiver) poll(ctx context.Context) {
	delay := minRetryDelay
	for {
		n := r.pool.Acquire(ctx, maxBatch)
		if n == 0 {
			return
		}
		out, err := r.t.sqs.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{
			QueueUrl:                    aws.String(r.qurl),
			MaxNumberOfMessages:         int32(n),
			WaitTimeSeconds:             int32(r.t.opts.WaitTime / time.Second),
			VisibilityTimeout:           int32(r.t.opts.VisibilityTimeout / time.Second),
			MessageAttributeNames:       []string{"All"},
			MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameApproximateReceiveCount},
		})
		var msgs []sqstypes.Message
		if out != nil {
			msgs = out.Messages
		}
		r.pool.Release(n - len(msgs))
		for _, m := range msgs {
			r.pool.Put(m)
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			r.log.Warn("sqs: receive failed; retrying", driver.LogError, err, "retry_in", delay)
			if !driver.Sleep(ctx, delay) {
				return
			}
			delay = min(delay*2, maxRetryDelay)
			continue
		}
		delay = minRetryDelay
	}
}

// handle runs the handler on one message and settles it.
func (r *receiver) handle(m sqstypes.Message) {
	attrs := make(map[string]string, len(m.MessageAttributes))
	for k, v := range m.MessageAttributes {
		if v.StringValue != nil {
			attrs[k] = *v.StringValue
		}
	}
	env := decode(aws.ToString(m.Body), attrs)
	receipt := aws.ToString(m.ReceiptHandle)
	dctx, cancel := context.WithCancelCause(r.hctx)
	defer cancel(nil)
	stop := r.heartbeat(dctx, cancel, receipt, env.ID)
	err := r.h(dctx, env)
	stop()
	if err == nil {
		r.del.Add(deleteEntry{receipt, env.ID})
		return
	}
	ctx, done := context.WithTimeout(r.hctx, settleTimeout)
	defer done()
	_, err = r.t.sqs.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{
		QueueUrl:          aws.String(r.qurl),
		ReceiptHandle:     aws.String(receipt),
		VisibilityTimeout: 0,
	})
	if err != nil {
		r.log.Warn("sqs: could not make a failed message visible again; it returns after its visibility timeout",
			driver.LogMessageID, env.ID, driver.LogError, err)
	}
}

// heartbeat extends the visibility of the message every HeartbeatInterval
// until stop is called; stop returns once no extension is in flight, so
// none can follow the message's settlement. When an extension fails, or
// the last good one is older than the visibility timeout, it cancels the
// delivery with ErrVisibilityLost and stops.
func (r *receiver) heartbeat(ctx context.Context, cancel context.CancelCauseFunc, receipt, id string) (stop func()) {
	quit := make(chan struct{})
	done := make(chan struct{})
	vis := r.t.opts.VisibilityTimeout
	go func() {
		defer close(done)
		tick := time.NewTicker(r.t.opts.HeartbeatInterval)
		defer tick.Stop()
		good := time.Now()
		for {
			select {
			case <-quit:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			cctx, cdone := context.WithTimeout(ctx, vis-time.Since(good))
			start := time.Now()
			_, err := r.t.sqs.ChangeMessageVisibility(cctx, &awssqs.ChangeMessageVisibilityInput{
				QueueUrl:          aws.String(r.qurl),
				ReceiptHandle:     aws.String(receipt),
				VisibilityTimeout: int32(vis / time.Second),
			})
			cdone()
			if err == nil {
				good = start
				continue
			}
			select {
			case <-quit: // stopped meanwhile: the failure no longer matters
				return
			default:
			}
			r.log.Warn("sqs: visibility extension failed; the handler's context is cancelled", driver.LogMessageID, id, driver.LogError, err)
			cancel(fmt.Errorf("%w: %w", ErrVisibilityLost, err))
			return
		}
	}()
	return func() {
		close(quit)
		<-done
	}
}

// deleteEntry is a handled message to delete.
type deleteEntry struct{ receipt, id string }

// deleteBatch deletes handled messages in one DeleteMessageBatch call.
func (r *receiver) deleteBatch(b []deleteEntry) {
	entries := make([]sqstypes.DeleteMessageBatchRequestEntry, len(b))
	for i, e := range b {
		entries[i] = sqstypes.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(e.receipt)}
	}
	ctx, cancel := context.WithTimeout(r.hctx, settleTimeout)
	defer cancel()
	out, err := r.t.sqs.DeleteMessageBatch(ctx, &awssqs.DeleteMessageBatchInput{QueueUrl: aws.String(r.qurl), Entries: entries})
	if err != nil {
		r.log.Warn("sqs: deleting handled messages failed; they will be delivered again", "count", len(b), driver.LogError, err)
		return
	}
	for _, f := range out.Failed {
		id := aws.ToString(f.Id)
		if i, err := strconv.Atoi(id); err == nil && i >= 0 && i < len(b) {
			id = b[i].id
		}
		r.log.Warn("sqs: deleting a handled message failed; it will be delivered again",
			driver.LogMessageID, id, "code", aws.ToString(f.Code), driver.LogError, aws.ToString(f.Message))
	}
}
