package driver

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrNoFlush is returned by NewBatcher when BatcherOptions.Flush is nil.
var ErrNoFlush = errors.New("driver: batcher needs a Flush function")

// Batcher groups settlements into broker calls: a Redis XACK of several
// entry IDs, an SQS DeleteMessageBatch of up to ten receipts, a PostgreSQL
// DELETE of many rows. Handlings Add what they settle; the batcher waits
// up to Linger after the first item for others to join, then hands up to
// Max items to Flush, running at most Parallel flushes at once. Items are
// flushed in the order they were added, batch after batch.
//
// Settling outlives the Receive call that started it: a message handled
// as Receive stops is still acknowledged. So a Batcher has no ctx of its
// own; Flush bounds each broker call itself, and Close flushes what is
// pending and waits for every flush.
type Batcher[T any] struct {
	o     BatcherOptions[T]
	in    chan T
	done  chan struct{}
	calls sync.WaitGroup
	slots chan struct{}
	once  sync.Once
}

// BatcherOptions configure a Batcher. Zero values mean the documented
// defaults.
type BatcherOptions[T any] struct {
	// Max is the most items of one Flush. Default 100.
	Max int
	// Linger is how long the first item of a batch waits for others
	// before the batch is flushed; a full batch is flushed at once.
	// Default 0: a batch holds what was added while the previous flush
	// ran (or was already waiting), and nothing waits.
	Linger time.Duration
	// Parallel bounds the Flush calls in flight. Default 1: batches are
	// flushed one after another, in order.
	Parallel int
	// Buffer is how many added items may wait for a flush before Add
	// blocks. Default Max.
	Buffer int
	// Flush settles one batch. It owns the slice. It reports failures
	// itself (a log line, a retry): the items are not offered again.
	// Required.
	Flush func(batch []T)
}

// NewBatcher starts a batcher. It returns ErrNoFlush when o.Flush is nil.
func NewBatcher[T any](o BatcherOptions[T]) (*Batcher[T], error) {
	if o.Flush == nil {
		return nil, ErrNoFlush
	}
	o.Max = cmpOr(o.Max, 100)
	o.Parallel = cmpOr(o.Parallel, 1)
	o.Buffer = cmpOr(o.Buffer, o.Max)
	b := &Batcher[T]{o: o, in: make(chan T, o.Buffer), done: make(chan struct{}), slots: make(chan struct{}, o.Parallel)}
	go b.run()
	return b, nil
}

func cmpOr(v, def int) int {
	if v <= 0 {
		return def
	}
	return v
}

// Add queues x for the next flush. It blocks only while Buffer items wait
// already. Add must not be called after, or at the same time as, Close.
func (b *Batcher[T]) Add(x T) { b.in <- x }

// Close flushes what is pending and waits for every Flush call to return.
// Later calls do nothing.
func (b *Batcher[T]) Close() {
	b.once.Do(func() {
		close(b.in)
		<-b.done
		b.calls.Wait()
	})
}

func (b *Batcher[T]) run() {
	defer close(b.done)
	var (
		batch  []T
		linger *time.Timer
		fire   <-chan time.Time
	)
	flush := func() {
		if linger != nil {
			linger.Stop()
			linger, fire = nil, nil
		}
		if len(batch) == 0 {
			return
		}
		out := batch
		batch = nil
		b.slots <- struct{}{}
		b.calls.Go(func() {
			defer func() { <-b.slots }()
			b.o.Flush(out)
		})
	}
	for {
		select {
		case x, ok := <-b.in:
			if !ok {
				flush()
				return
			}
			batch = append(batch, x)
			b.gather(&batch)
			switch {
			case len(batch) >= b.o.Max:
				flush()
			case b.o.Linger <= 0:
				flush()
			case linger == nil:
				linger = time.NewTimer(b.o.Linger)
				fire = linger.C
			}
		case <-fire:
			linger, fire = nil, nil
			flush()
		}
	}
}

// gather adds to batch, up to Max, the items already waiting.
func (b *Batcher[T]) gather(batch *[]T) {
	for len(*batch) < b.o.Max {
		select {
		case x, ok := <-b.in:
			if !ok {
				return // run sees the close on its next receive
			}
			*batch = append(*batch, x)
		default:
			return
		}
	}
}

// Retry runs try until it succeeds, ctx ends, or the next wait would end
// after until: the retry of an acknowledgement that must land while the
// message is surely still this receiver's (within its lease). Waits start
// at first and double up to a second. It returns try's last error, or
// ctx's when ctx ended while waiting.
func Retry(ctx context.Context, until time.Time, first time.Duration, try func(context.Context) error) error {
	wait := first
	for {
		err := try(ctx)
		if err == nil || time.Now().Add(wait).After(until) {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return errors.Join(err, ctx.Err())
		}
		wait = min(2*wait, time.Second)
	}
}
