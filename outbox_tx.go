package bus

import (
	"context"
	"fmt"
	"reflect"
)

// The handling's transaction.
//
// Inside an outbox handling, every bus call that reads or writes the store
// runs in the handling's transaction, never on a second connection: the
// transaction holds one of the pool's connections for the whole handling,
// so a call that asked the pool for another could wait for ever once every
// connection is held by a handling (on SQLite, whose pool has one, at
// once), and its effects would survive the handling's rollback.
//
//   - Send, Publish, Reply, SendBatch and RequestTimeout queue their
//     messages in the handling's scope; they are stored in the transaction
//     just before it commits (HandlingTx.StoreOutgoing). Another bus on the
//     same persistence, called with the handling's ctx, stores what it
//     would store (delayed messages, batches) in the transaction at once.
//   - Saga state is loaded and saved in it (SagaStore reads the
//     transaction from ctx); CompleteSaga cancels the instance's timeouts
//     in it when the store is a TxCanceler, and after the commit otherwise.
//   - CancelScheduled cancels in it (TxCanceler), or fails with
//     ErrCannotJoinTx.
//   - ScheduledBacklog, which reads the store through other queries, fails
//     with ErrCannotJoinTx.

// handlingTxScope returns the scope of the outbox handling ctx belongs to
// when that handling's transaction is on this bus's persistence, and nil
// otherwise.
func (b *Bus) handlingTxScope(ctx context.Context) *scope {
	s := scopeFrom(ctx)
	if s == nil || s.tx == nil || !samePersistence(s.bus.cfg.Persistence, b.cfg.Persistence) {
		return nil
	}
	return s
}

// samePersistence reports whether a and b are one persistence, without
// comparing values whose type cannot be compared.
func samePersistence(a, b Persistence) bool {
	t := reflect.TypeOf(a)
	return t == reflect.TypeOf(b) && t != nil && t.Comparable() && a == b
}

// cancelOutgoing cancels the row id in the transaction ctx carries, when
// the store can and ctx carries one, and otherwise on the store. Inside an
// outbox handling it never falls back to the store: a store that cannot
// join the handling's transaction is ErrCannotJoinTx, and a handling
// already settled is ErrHandlerDone.
func (b *Bus) cancelOutgoing(ctx context.Context, id string) (bool, error) {
	s := b.handlingTxScope(ctx)
	if s != nil && s.settled() {
		return false, ErrHandlerDone
	}
	if tc, ok := b.store.(TxCanceler); ok {
		cancelled, joined, err := tc.CancelOutgoingInTx(ctx, id)
		if joined || err != nil {
			return cancelled, err
		}
	}
	if s != nil {
		return false, b.cannotJoin("cancel")
	}
	return b.store.CancelOutgoing(ctx, id)
}

// storeInHandlingTx stores messages that this bus would store (delayed
// ones, a batch) with the ctx of an outbox handling of another bus on the
// same persistence: in that handling's transaction, as rows of this bus
// (immediate ones of a batch due at once), released when it commits. It
// reports false when ctx carries no such handling.
func (b *Bus) storeInHandlingTx(ctx context.Context, ps ...pending) (bool, error) {
	s := b.handlingTxScope(ctx)
	if s == nil {
		return false, nil
	}
	if s.settled() {
		return false, ErrHandlerDone
	}
	now := b.clock.Now()
	if err := s.tx.StoreOutgoing(ctx, b.outboxRows(ps, now)); err != nil {
		return false, fmt.Errorf("bus: store %d message(s) in the handling's transaction: %w", len(ps), err)
	}
	b.metrics.scheduled.Add(uint64(len(ps)))
	s.afterSuccess(func(context.Context) {
		if d := b.dispatcher.Load(); d != nil {
			d.Poke(now)
		}
	})
	return true, nil
}

// checkNoTx refuses a call that would read or write the store outside the
// transaction that ctx carries: an outbox handling's, or a caller's.
func (b *Bus) checkNoTx(ctx context.Context, call string) error {
	if b.handlingTxScope(ctx) != nil {
		return b.cannotJoin(call)
	}
	if tc, ok := b.cfg.Persistence.(TxCarrier); ok && tc.CarriesTx(ctx) {
		return fmt.Errorf("%w: %s with a ctx that carries the caller's transaction: %T cannot do it in that transaction; "+
			"call it with a ctx without one", ErrCannotJoinTx, call, b.cfg.Persistence)
	}
	return nil
}

func (b *Bus) cannotJoin(call string) error {
	return fmt.Errorf("%w: %s with the ctx of an outbox handling: %T cannot do it in the handling's transaction",
		ErrCannotJoinTx, call, b.cfg.Persistence)
}
