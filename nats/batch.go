package nats

import (
	"context"

	natsio "github.com/nats-io/nats.go"

	"github.com/postbus/bus"
)

var _ bus.BatchTransport = (*Transport)(nil)

// SendBatch hands every message of batch to the stream with JetStream
// asynchronous publishes, and returns one result per message, in batch
// order (bus.BatchTransport). Each message is sent as Send or Publish
// would send it (a send creates its queue's consumer when missing) and
// settled by its own acknowledgement: nil once the stream stored it (or
// recognised it as a duplicate of a message it stored), an error wrapping
// ErrNoAck when the stream refused it or did not answer (no stream holds
// its subject, for instance), a *NameError for an invalid name, each for
// that message only.
//
// The messages are written one after another without waiting, at most
// Options.PublishWindow awaiting their acknowledgement across the
// transport, while the acknowledgements are awaited in order; a batch
// larger than the window is written as acknowledgements free room.
// Options.PublishTimeout bounds the call. Outages are handled per message
// as in Send: nothing is written while the connection is down, and a
// message whose acknowledgement the connection took with it is written
// again, under the same Nats-Msg-Id, once reconnected.
func (t *Transport) SendBatch(ctx context.Context, batch []bus.Outbound) []error {
	errs := make([]error, len(batch))
	msgs := make([]*natsio.Msg, len(batch))
	origin := originOf(ctx)
	for i, m := range batch {
		var subject string
		if subject, errs[i] = t.subjectOf(ctx, m); errs[i] == nil {
			msgs[i] = encodeMsg(subject, m.Envelope, origin)
		}
	}
	t.publishAll(ctx, msgs, errs)
	return errs
}

// subjectOf checks m's queue or event type and returns its subject, after
// making sure the stream (and for a send, the queue's consumer) exists.
func (t *Transport) subjectOf(ctx context.Context, m bus.Outbound) (string, error) {
	if m.Publish {
		if err := checkName("event type", m.Envelope.Type); err != nil {
			return "", err
		}
		if err := t.ensureStream(ctx); err != nil {
			return "", err
		}
		return t.eventSubject(m.Envelope.Type), nil
	}
	if err := checkName("queue", m.Queue); err != nil {
		return "", err
	}
	if err := t.ensureQueue(ctx, m.Queue); err != nil {
		return "", err
	}
	return t.queueSubject(m.Queue), nil
}
