package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Start waits for a store that is not reachable yet: a service often
// starts a moment before its database (docker compose up, a rollout with
// a new database). The persistence's Setup is retried while its error
// matches ErrStoreUnavailable, after waits that double from
// setupRetryFirst to setupRetryMax (each drawn from its upper half, so a
// fleet started at once does not retry in step), until
// Config.StartTimeout or Start's ctx ends. Any other error fails Start at
// once: retrying cannot fix a wrong password.
const (
	setupRetryFirst = 100 * time.Millisecond
	setupRetryMax   = 2 * time.Second
)

// setupRetryWait returns the wait after failed attempt n (1, 2, …).
var setupRetryWait = ExponentialBackoff(setupRetryFirst, setupRetryMax)

// Log attribute keys of start-up.
const (
	logKeyStore  = "store"
	logKeyWaited = "waited"
)

// storeSetup is what a persistence with a Setup method offers.
type storeSetup interface {
	Setup(ctx context.Context) error
}

// setupStore runs s.Setup under sctx (ctx bounded by StartTimeout) until
// it succeeds, fails with an error that does not match
// ErrStoreUnavailable, or sctx ends. Each distinct failure is logged once,
// at Warn, with the store's description.
func (b *Bus) setupStore(ctx, sctx context.Context, s storeSetup) error {
	store := describeStore(b.cfg.Persistence)
	began := b.clock.Now()
	seen := map[string]bool{}
	var last error
	for n := 1; ; n++ {
		err := s.Setup(sctx)
		if err == nil {
			if n > 1 {
				b.log.Info("persistence reachable; setup done",
					slog.String(logKeyStore, store), slog.Int(logKeyAttempt, n),
					slog.Duration(logKeyWaited, b.clock.Now().Sub(began)))
			}
			return nil
		}
		if !errors.Is(err, ErrStoreUnavailable) && !isContextError(err) {
			return fmt.Errorf("bus: persistence setup: %w", err)
		}
		if sctx.Err() != nil {
			return b.setupGaveUp(ctx, store, b.clock.Now().Sub(began), n, lastCause(last, err))
		}
		if !errors.Is(err, ErrStoreUnavailable) {
			return fmt.Errorf("bus: persistence setup: %w", err)
		}
		last = err
		if msg := err.Error(); !seen[msg] && len(seen) < maxSetupLogs {
			seen[msg] = true
			b.log.Warn("persistence unreachable; Start retries its setup until StartTimeout",
				slog.String(logKeyStore, store), slog.Int(logKeyAttempt, n),
				slog.Duration("start_timeout", b.cfg.StartTimeout), slog.Any(logKeyError, err))
		}
		if !sleepCtx(sctx, b.clock, setupRetryWait(n)) {
			return b.setupGaveUp(ctx, store, b.clock.Now().Sub(began), n, last)
		}
	}
}

// maxSetupLogs bounds the distinct failures one Start logs, for a store
// whose errors differ at every attempt.
const maxSetupLogs = 20

// lastCause returns the failure to report when the attempt that failed
// with err was cut short by the end of Start's bound: the one before it
// when err only says that the bound ended, since the earlier one says
// why the store could not be reached.
func lastCause(prev, err error) error {
	if prev != nil && isContextError(err) {
		return prev
	}
	return err
}

// isContextError reports an error that says a ctx ended.
func isContextError(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// setupGaveUp returns Start's error when the persistence could not be set
// up before StartTimeout or ctx ended. It matches ErrStoreUnavailable,
// cause, and ErrStartTimeout or ctx's error.
func (b *Bus) setupGaveUp(ctx context.Context, store string, waited time.Duration, attempts int, cause error) error {
	if err := ctx.Err(); err != nil {
		return &startError{
			msg:  fmt.Sprintf("bus: persistence setup: %v after %v and %d attempts; store %s: %v", err, waited.Round(time.Millisecond), attempts, store, cause),
			errs: []error{err, ErrStoreUnavailable, cause},
		}
	}
	return &startError{
		msg: fmt.Sprintf("bus: start: store %s still unreachable after %v (StartTimeout %v, %d attempts): %v",
			store, waited.Round(time.Millisecond), b.cfg.StartTimeout, attempts, cause),
		errs: []error{ErrStartTimeout, ErrStoreUnavailable, context.DeadlineExceeded, cause},
	}
}

// startError is an error of Start that matches several errors, without
// repeating their texts in its own.
type startError struct {
	msg  string
	errs []error
}

func (e *startError) Error() string   { return e.msg }
func (e *startError) Unwrap() []error { return e.errs }

// describeStore names p for logs and errors: its String method when it has
// one (the stores of this module's drivers describe their database there,
// never with a password), else its Go type.
func describeStore(p Persistence) string {
	if s, ok := p.(fmt.Stringer); ok {
		return s.String()
	}
	return fmt.Sprintf("%T", p)
}
