package rabbitmq

import (
	"context"
	"sync"

	"github.com/postbus/bus"
)

var _ bus.BatchTransport = (*Transport)(nil)

// minPart is the smallest share of a batch worth a publisher channel of its
// own: a smaller batch is written on one channel.
const minPart = 64

// SendBatch hands every message of batch to the broker with publisher
// confirms pipelined, and returns one result per message, in batch order
// (bus.BatchTransport). Each message is sent as Send or Publish would send
// it and settled by its own confirm, tracked by delivery tag: nil once the
// broker acked it; ErrNacked for a nack, ErrUnroutable for a send returned
// as unroutable (its queue does not exist), a *NameError or *FieldError
// for a message that could not be encoded, each for that message only.
//
// A large batch is split into contiguous parts of at least 64 messages, at
// most one per publisher channel (Options.PublisherChannels), written
// concurrently; on each channel the messages are written one after another
// without waiting, at most Options.MaxInFlight unconfirmed, and their
// confirms awaited after. Messages of one batch may therefore reach a queue out of order.
// Outages are handled per message as in Send: a message whose confirm the
// connection took with it is published again once reconnected.
//
// The broker closes a channel that carried a message it refuses outright
// (larger than its max_message_size, for instance): the messages in flight
// on that channel then fail as well, and are kept by the caller to be sent
// again.
func (t *Transport) SendBatch(ctx context.Context, batch []bus.Outbound) []error {
	errs := make([]error, len(batch))
	out := make([]*outgoing, 0, len(batch))
	at := make([]int, 0, len(batch)) // the batch index of each out
	for i, m := range batch {
		o, err := t.prepare(m)
		if err != nil {
			errs[i] = err
			continue
		}
		out = append(out, o)
		at = append(at, i)
	}
	if len(out) > 0 {
		t.publishAll(ctx, out)
	}
	for j, o := range out {
		if o.err != nil {
			errs[at[j]] = failed(batch[at[j]], o.err)
		}
	}
	return errs
}

// publishAll writes batch on the session's publisher channels: in one part
// below 2×minPart messages, else in contiguous parts of at least minPart,
// one per channel, concurrently. Each message's outcome is set.
func (s *session) publishAll(ctx context.Context, batch []*outgoing) {
	parts := max(1, min(len(s.pubs), len(batch)/minPart))
	size := (len(batch) + parts - 1) / parts
	var wg sync.WaitGroup
	for lo := 0; lo < len(batch); lo += size {
		part := batch[lo:min(lo+size, len(batch))]
		p, err := s.publisher()
		if err != nil {
			setErr(part, err)
			continue
		}
		if lo+size >= len(batch) {
			p.publishAll(ctx, part) // the last part on this goroutine
			continue
		}
		wg.Go(func() { p.publishAll(ctx, part) })
	}
	wg.Wait()
}
