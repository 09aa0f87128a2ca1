package bus

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/postbus/bus/internal/loop"
)

// Headers that address a timeout to the saga instance that requested it.
const (
	// HeaderSaga names the saga of a timeout message.
	HeaderSaga = "postbus.saga"
	// HeaderSagaCorrelation is the correlation value of its instance.
	HeaderSagaCorrelation = "postbus.saga.correlation"
	// HeaderSagaInstance is the ID of its instance (SagaInstance.ID).
	HeaderSagaInstance = "postbus.saga.instance"
)

// maxSagaConflicts bounds the runs of one handling attempt that lose a
// race for their saga instance; past it the attempt fails like any other.
const maxSagaConflicts = 1000

// sagaCall is one run of a saga handler on one instance, carried in the
// handler's ctx for RequestTimeout and CompleteSaga.
type sagaCall struct {
	info *sagaInfo
	inst *SagaInstance

	mu        sync.Mutex
	timeouts  []string // the instance's pending timeouts after this run
	completed bool
}

type sagaCallKey struct{}

func sagaCallFrom(ctx context.Context) *sagaCall {
	c, _ := ctx.Value(sagaCallKey{}).(*sagaCall)
	return c
}

// runSaga loads the instance a message belongs to, runs the handler on its
// state and saves it, or deletes it when the handler completed the saga.
// A save that lost a race returns an error wrapping ErrSagaConflict, on
// which the bus runs the whole attempt again.
func runSaga[S any](ctx context.Context, info *sagaInfo, role sagaRole, corr string, invoke func(context.Context, *S) error) error {
	b, env, sc := info.bus, IncomingMessage(ctx), scopeFrom(ctx)
	if env == nil || sc == nil {
		return fmt.Errorf("bus: saga %s: %w", info.name, ErrNotInHandler)
	}
	if role == sagaTimeout {
		if env.Header(HeaderSaga) != info.name {
			b.log.Debug("timeout message not addressed to this saga; ignored", slog.String("saga", info.name),
				slog.String(logKeyMessageID, env.ID), slog.String("addressed_to", env.Header(HeaderSaga)))
			return nil
		}
		corr = env.Header(HeaderSagaCorrelation)
	}
	if corr == "" || len(corr) > maxCorrelation {
		return Unrecoverable(fmt.Errorf("bus: saga %s: %s correlates to %q; a correlation value is 1 to %d bytes", info.name, env.Type, corr, maxCorrelation))
	}
	inst, found, err := info.store.LoadSaga(ctx, info.name, corr)
	if err != nil {
		return fmt.Errorf("bus: saga %s: load %q: %w", info.name, corr, err)
	}
	if found && role == sagaTimeout && inst.ID != env.Header(HeaderSagaInstance) {
		found = false // the instance that asked for it completed; this is another one
	}
	if !found {
		if role != sagaStart {
			b.metrics.sagaNotFound.Add(1)
			b.log.Debug("no saga instance for the message; acknowledged without handling", slog.String("saga", info.name),
				slog.String("correlation", corr), slog.String(logKeyMessageID, env.ID), slog.String(logKeyType, env.Type))
			return nil
		}
		inst = SagaInstance{Saga: info.name, Correlation: corr, ID: b.ids.New()}
	}
	var state S
	if found {
		if err := json.Unmarshal(inst.State, &state); err != nil {
			return Unrecoverable(fmt.Errorf("bus: saga %s %q: stored state does not decode into %T: %w", info.name, corr, state, err))
		}
	}
	call := &sagaCall{info: info, inst: &inst, timeouts: slices.Clone(inst.Timeouts)}
	if role == sagaTimeout {
		call.timeouts = slices.DeleteFunc(call.timeouts, func(id string) bool { return id == env.ID })
	}
	if err := invoke(context.WithValue(ctx, sagaCallKey{}, call), &state); err != nil {
		return err
	}
	call.mu.Lock()
	defer call.mu.Unlock()
	if call.completed {
		if found {
			if err := info.store.DeleteSaga(ctx, info.name, corr, inst.Version); err != nil {
				return fmt.Errorf("bus: saga %s %q: complete: %w", info.name, corr, err)
			}
		}
		pending := slices.Clone(call.timeouts)
		if _, ok := b.store.(TxCanceler); ok && b.handlingTxScope(ctx) != nil {
			// In the handling's transaction: a failed handling keeps them.
			for _, id := range pending {
				if _, err := b.cancelOutgoing(ctx, id); err != nil {
					return fmt.Errorf("bus: saga %s %q: complete: cancel timeout %s: %w", info.name, corr, id, err)
				}
			}
			return nil
		}
		// After the commit, when the handling's connection is back in the
		// pool, or after the handler's success without the outbox.
		sc.afterSuccess(func(ctx context.Context) { b.cancelTimeouts(ctx, info.name, corr, pending) })
		return nil
	}
	if inst.State, err = json.Marshal(&state); err != nil {
		return Unrecoverable(fmt.Errorf("bus: saga %s %q: state does not encode as JSON: %w", info.name, corr, err))
	}
	inst.Timeouts = call.timeouts
	if found {
		err = info.store.UpdateSaga(ctx, inst)
	} else {
		err = info.store.InsertSaga(ctx, inst)
	}
	if err != nil {
		return fmt.Errorf("bus: saga %s %q: save: %w", info.name, corr, err)
	}
	return nil
}

// cancelTimeouts cancels a completed instance's pending timeouts. One that
// a dispatcher is handing over already is not cancelled; it arrives and is
// dropped, since its instance is gone.
func (b *Bus) cancelTimeouts(ctx context.Context, saga, corr string, ids []string) {
	if b.store == nil {
		return
	}
	cctx, cancel := loop.Detach(ctx, b.cfg.Dispatcher.SendTimeout)
	defer cancel()
	for _, id := range ids {
		if _, err := b.store.CancelOutgoing(cctx, id); err != nil {
			b.log.Warn("cannot cancel the timeout of a completed saga; it will arrive and be dropped",
				slog.String("saga", saga), slog.String("correlation", corr), slog.String(logKeyMessageID, id), slog.Any(logKeyError, err))
		}
	}
}

// RequestTimeout schedules msg for the saga instance being handled, due
// after d: when it is due, the saga's SagaTimeout handler for its type runs
// on the instance's state. It is an ordinary delayed message to this
// endpoint, stored in the persistence (so it survives a restart when the
// persistence is durable), released only if the handler succeeds, and
// cancelled when the instance completes. opts may add headers and the like;
// the destination and the due time are the timeout's own.
//
// ctx must be the ctx of a saga handler; msg's type must be registered on
// the saga with SagaTimeout.
func RequestTimeout(ctx context.Context, msg any, d time.Duration, opts ...Option) error {
	call, sc := sagaCallFrom(ctx), scopeFrom(ctx)
	if call == nil || sc == nil {
		return fmt.Errorf("bus: RequestTimeout: %w: call it with the ctx of a saga handler", ErrNotInHandler)
	}
	if msg == nil {
		return fmt.Errorf("bus: RequestTimeout: %w: nil message", ErrInvalidMessage)
	}
	b := call.info.bus
	if name := b.names.of(msg); !call.info.isTimeout(name) {
		return fmt.Errorf("bus: RequestTimeout: %w: saga %s has no SagaTimeout handler for %s", ErrInvalidMessage, call.info.name, name)
	}
	id := sc.nextID(b.cfg.Endpoint)
	address := func(o *sendOptions) error {
		o.headers = setKey(o.headers, HeaderSaga, call.info.name)
		o.headers[HeaderSagaCorrelation] = call.inst.Correlation
		o.headers[HeaderSagaInstance] = call.inst.ID
		return nil
	}
	all := append(slices.Clone(opts), To(b.cfg.Endpoint), DeliverAfter(d), WithMessageID(id), address)
	if err := b.Send(ctx, msg, all...); err != nil {
		return err
	}
	call.mu.Lock()
	defer call.mu.Unlock()
	call.timeouts = append(call.timeouts, id)
	return nil
}

// CompleteSaga marks the saga instance being handled as complete: when the
// handler returns nil, its state is deleted and its pending timeouts are
// cancelled. A later message for it finds no instance (a start message
// starts a new one). Outside a saga handler it does nothing.
func CompleteSaga(ctx context.Context) {
	if call := sagaCallFrom(ctx); call != nil {
		call.mu.Lock()
		call.completed = true
		call.mu.Unlock()
	}
}
