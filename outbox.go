package bus

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/postbus/bus/internal/loop"
)

// Transactional outbox and inbox.
//
// With Config.Outbox.Enabled, each handling of a message runs in one
// database transaction opened by the persistence (an OutboxStore): the
// inbox row (endpoint, message ID) first, then the handler's own writes
// (drivers expose the transaction through the handler's ctx, such as
// postgres.Tx), then every message the handler sent, immediate ones as rows
// due at once, then commit. A second delivery of a message ID the endpoint
// already handled skips the handler. After commit the bus wakes its
// dispatcher, which hands the rows to the transport: database effects
// happen once per message, transport delivery stays at least once with
// stable IDs.

// OutboxConfig turns on the transactional outbox and inbox.
type OutboxConfig struct {
	// Enabled runs every handling in one database transaction with its
	// outgoing messages and an inbox row. The persistence must implement
	// OutboxStore (postgres.New, sqlite.Open); New refuses others.
	Enabled bool
	// Retention is how long inbox rows are kept, so a redelivery within it
	// is recognised as a duplicate. Older rows are deleted in batches by
	// a purge that runs beside the dispatcher. Default 7 days.
	Retention time.Duration
}

// defaultInboxRetention is OutboxConfig.Retention's default.
const defaultInboxRetention = 7 * 24 * time.Hour

// dueNow is the Delay of an outbox row for an immediate message: due at
// once on the store's clock.
const dueNow = time.Nanosecond

// attemptInOutbox is one handling attempt inside the outbox transaction.
func (b *Bus) attemptInOutbox(ctx context.Context, env *Envelope, attempt int) error {
	tx, handled, err := b.outbox.BeginHandling(ctx, b.cfg.Endpoint, env.ID)
	if err != nil {
		return fmt.Errorf("bus: outbox: begin handling %s: %w", env.ID, err)
	}
	if handled {
		b.metrics.duplicates.Add(1)
		b.log.Info("message already handled by this endpoint; skipped", slog.String(logKeyMessageID, env.ID),
			slog.String(logKeyType, env.Type))
		return nil
	}
	rollback := func() {
		rctx, cancel := loop.Detach(ctx, settleTimeout)
		defer cancel()
		if rerr := tx.Rollback(rctx); rerr != nil {
			b.log.Warn("outbox: rollback failed", slog.String(logKeyMessageID, env.ID), slog.Any(logKeyError, rerr))
		}
	}
	s := &scope{bus: b, incoming: env, attempt: attempt, tx: tx}
	if err := b.runIncoming(tx.Context(withScope(ctx, s)), env); err != nil {
		s.finish()
		rollback()
		return err
	}
	now := b.clock.Now()
	out := s.finish()
	if len(out) > 0 {
		sctx := ctx
		if b.dispatcher.Load() != nil {
			sctx = context.WithValue(ctx, localDispatcherKey{}, true)
		}
		if err := tx.StoreOutgoing(sctx, b.outboxRows(out, now)); err != nil {
			rollback()
			return fmt.Errorf("bus: outbox: store %d message(s): %w", len(out), err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		rollback()
		return fmt.Errorf("bus: outbox: commit: %w", err)
	}
	s.succeeded(ctx)
	if len(out) > 0 {
		b.metrics.scheduled.Add(uint64(len(out)))
		if d := b.dispatcher.Load(); d != nil {
			d.Poke(now)
		}
	}
	return nil
}

// outboxRows turns a handling's messages into store rows: delayed ones as
// usual, immediate ones due at once.
func (b *Bus) outboxRows(out []pending, now time.Time) []OutgoingMessage {
	markDueNow(out, now)
	return b.rows(out, now)
}

// markDueNow gives the immediate messages among ps the delay of a row due
// at once on the store's clock.
func markDueNow(ps []pending, now time.Time) {
	for i := range ps {
		if ps[i].env.DueAt.IsZero() || !ps[i].env.DueAt.After(now) {
			ps[i].delay = dueNow
		}
	}
}

// storeInCallerTx stores messages sent outside a handler in the caller's
// transaction, when ctx carries one (postgres.WithTx), whether or not the
// outbox is on: they are sent after the caller commits, and not at all
// when it rolls back.
func (b *Bus) storeInCallerTx(ctx context.Context, ps ...pending) (bool, error) {
	o := b.outbox
	if o == nil {
		if o, _ = b.cfg.Persistence.(OutboxStore); o == nil {
			return false, nil
		}
	}
	if tc, ok := o.(TxCarrier); ok && !tc.CarriesTx(ctx) {
		return false, nil // the common case, without building rows
	}
	now := b.clock.Now()
	stored, err := o.StoreOutgoingInCallerTx(ctx, b.outboxRows(ps, now))
	if err != nil {
		if len(ps) == 1 {
			return false, fmt.Errorf("bus: outbox: store %s in the caller's transaction: %w", ps[0].env.ID, err)
		}
		return false, fmt.Errorf("bus: outbox: store %d messages in the caller's transaction: %w", len(ps), err)
	}
	if stored {
		b.metrics.scheduled.Add(uint64(len(ps)))
	}
	return stored, nil
}

type localDispatcherKey struct{}

// LocalDispatcher reports whether the rows a HandlingTx stores with ctx
// will be sent by a dispatcher in this process, woken as soon as the
// handling commits (and at each row's due time). A store that notifies
// other processes of new rows (PostgreSQL NOTIFY) may skip the
// notification for them: it costs every commit, and nobody else needs it.
func LocalDispatcher(ctx context.Context) bool {
	v, _ := ctx.Value(localDispatcherKey{}).(bool)
	return v
}
