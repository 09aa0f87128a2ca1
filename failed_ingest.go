package bus

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// IngestOptions tune IngestFailed.
type IngestOptions struct {
	// Concurrency bounds the messages stored at once. Default 4.
	Concurrency int
	// Logger receives a line for each message that could not be stored.
	// Default: slog.Default().
	Logger *slog.Logger
}

// IngestFailed consumes the error queue into a FailedStore until ctx ends,
// then returns nil. Each message is stored (FailedFromEnvelope) and
// acknowledged only once StoreFailed succeeded: a message the store did not
// take goes back to the queue for redelivery, so nothing is lost. A message
// delivered twice updates its stored copy (StoreFailed). queue defaults to
// "error", the default Config.ErrorQueue.
//
// Run it in one process per error queue, or in several: the queue's
// consumers compete, and the store is keyed by message ID.
func IngestFailed(ctx context.Context, t Transport, queue string, store FailedStore, opts IngestOptions) error {
	if t == nil || store == nil {
		return &ConfigError{Field: "IngestFailed", Reason: "needs a transport and a failed store"}
	}
	queue = cmp.Or(queue, defaultErrorQueue)
	log := cmp.Or(opts.Logger, slog.Default())
	conc := opts.Concurrency
	if conc <= 0 {
		conc = 4
	}
	h := func(hctx context.Context, env *Envelope) error {
		m := FailedFromEnvelope(env, time.Now())
		if err := store.StoreFailed(hctx, []FailedMessage{m}); err != nil {
			log.Error("could not store a failed message; it stays in the error queue",
				slog.String(logKeyMessageID, m.ID), slog.String("queue", queue), slog.Any(logKeyError, err))
			return fmt.Errorf("bus: store failed message %s: %w", m.ID, err)
		}
		return nil
	}
	if err := t.Receive(ctx, queue, ReceiveOptions{Concurrency: conc}, h); err != nil {
		return fmt.Errorf("bus: ingest %s: %w", queue, err)
	}
	return nil
}

// retryChunk is how many retried messages RetryFailed deletes at once.
const retryChunk = 100

// RetryFailed sends stored failures back to be handled again: each to the
// queue it failed in (FailedMessage.Queue), or, when it has none (an event
// that could not be dispatched), published again; always with the failure
// headers and the old due time removed, so the retry is not measured as a
// late scheduled delivery. A message is deleted from the store only after the
// transport accepted it, so a crash in between retries it twice, never
// loses it. IDs that are not stored are skipped. It returns how many
// messages it retried (sent and deleted), with the first error that
// stopped it.
func RetryFailed(ctx context.Context, t Transport, store FailedStore, ids []string) (int, error) {
	if t == nil || store == nil {
		return 0, &ConfigError{Field: "RetryFailed", Reason: "needs a transport and a failed store"}
	}
	retried := 0
	sent := make([]string, 0, retryChunk)
	flush := func() error {
		if len(sent) == 0 {
			return nil
		}
		n, err := store.DeleteFailed(ctx, sent)
		if err != nil {
			return fmt.Errorf("bus: retry: delete %d sent message(s): %w", len(sent), err)
		}
		retried += n
		sent = sent[:0]
		return nil
	}
	for _, id := range ids {
		if err := ctx.Err(); err != nil {
			return retried, errors.Join(err, flush())
		}
		m, ok, err := store.GetFailed(ctx, id)
		if err != nil {
			return retried, errors.Join(fmt.Errorf("bus: retry %s: %w", id, err), flush())
		}
		if !ok {
			continue
		}
		if err := resend(ctx, t, m); err != nil {
			return retried, errors.Join(err, flush())
		}
		if sent = append(sent, id); len(sent) == retryChunk {
			if err := flush(); err != nil {
				return retried, err
			}
		}
	}
	return retried, flush()
}

// resend hands a stored failure back to the transport without its failure
// headers and due time (clearFailure).
func resend(ctx context.Context, t Transport, m FailedMessage) error {
	env, err := UnmarshalEnvelope(m.Envelope)
	if err != nil {
		return fmt.Errorf("bus: retry %s: %w", m.ID, err)
	}
	clearFailure(env)
	target := m.Queue
	if target == "" && env.Kind == KindEvent {
		if err := t.Publish(ctx, env); err != nil {
			return fmt.Errorf("bus: retry %s: publish: %w", m.ID, err)
		}
		return nil
	}
	target = cmp.Or(target, env.Destination)
	if target == "" {
		return fmt.Errorf("bus: retry %s: %w: no queue to send it to", m.ID, ErrInvalidMessage)
	}
	if err := t.Send(ctx, target, env); err != nil {
		return fmt.Errorf("bus: retry %s: send to %s: %w", m.ID, target, err)
	}
	return nil
}
