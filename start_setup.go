package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/postbus/bus/internal/loop"
)

// Start waits for a store that is not reachable yet: a service often
// starts a moment before its database (docker compose up, a rollout with
// a new database). The persistence's Setup and the transport's Provision
// are retried while their error matches ErrStoreUnavailable, after waits
// that double from setupRetryFirst to setupRetryMax (each drawn from its
// upper half, so a fleet started at once does not retry in step), until
// Config.StartTimeout or Start's ctx ends. Any other error fails Start at
// once: retrying cannot fix a wrong password.
const (
	setupRetryFirst = 100 * time.Millisecond
	setupRetryMax   = 2 * time.Second
)

// setupRetryWait returns the wait after failed attempt n (1, 2, …).
var setupRetryWait = ExponentialBackoff(setupRetryFirst, setupRetryMax)

// maxSetupLogs bounds the distinct failures one step of Start logs, for
// a store whose errors differ at every attempt.
const maxSetupLogs = 20

// Log attribute keys of start-up.
const (
	logKeyStore     = "store"
	logKeyTransport = "transport"
	logKeyWaited    = "waited"
)

// storeSetup is what a persistence with a Setup method offers.
type storeSetup interface {
	Setup(ctx context.Context) error
}

// startStep is one step of Start's setup.
type startStep struct {
	what string // "persistence setup"
	key  string // the log key naming the backend: logKeyStore
	name string // the backend's description (describe)
	run  func(ctx context.Context) error
}

// untilReachable runs st under sctx (ctx bounded by StartTimeout) until it
// succeeds, fails with an error that does not match ErrStoreUnavailable,
// or sctx ends. Each distinct failure is logged once, at Warn, with the
// backend's description.
func (b *Bus) untilReachable(ctx, sctx context.Context, st startStep) error {
	began := b.clock.Now()
	seen := map[string]bool{}
	var last error
	for n := 1; ; n++ {
		err := st.run(sctx)
		if err == nil {
			if n > 1 {
				b.log.Info(st.what+" done once the store was reachable",
					slog.String(st.key, st.name), slog.Int(logKeyAttempt, n),
					slog.Duration(logKeyWaited, b.clock.Now().Sub(began)))
			}
			return nil
		}
		unreachable := errors.Is(err, ErrStoreUnavailable)
		switch {
		case sctx.Err() != nil && (unreachable || last != nil && isContextError(err)):
			return b.gaveUp(ctx, st, b.clock.Now().Sub(began), n, lastCause(last, err))
		case !unreachable:
			return b.stepFailed(ctx, sctx, st.what, err)
		}
		last = err
		if msg := err.Error(); !seen[msg] && len(seen) < maxSetupLogs {
			seen[msg] = true
			b.log.Warn(st.what+" failed: store unreachable; Start retries until StartTimeout",
				slog.String(st.key, st.name), slog.Int(logKeyAttempt, n),
				slog.Duration("start_timeout", b.cfg.StartTimeout), slog.Any(logKeyError, err))
		}
		if !loop.Sleep(sctx, b.clock, setupRetryWait(n)) {
			return b.gaveUp(ctx, st, b.clock.Now().Sub(began), n, last)
		}
	}
}

// stepFailed returns Start's error for a step that failed with err, an
// error that does not say the store is unreachable: at once, or when the
// step waited (as broker transports do) until StartTimeout ended.
func (b *Bus) stepFailed(ctx, sctx context.Context, what string, err error) error {
	if ctx.Err() == nil && sctx.Err() != nil {
		return fmt.Errorf("bus: start: %s did not succeed within StartTimeout (%v): %w: %w", what, b.cfg.StartTimeout, ErrStartTimeout, err)
	}
	return fmt.Errorf("bus: %s: %w", what, err)
}

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

// gaveUp returns Start's error when the store stayed unreachable until
// StartTimeout or ctx ended. It matches ErrStoreUnavailable, cause, and
// ErrStartTimeout or ctx's error.
func (b *Bus) gaveUp(ctx context.Context, st startStep, waited time.Duration, attempts int, cause error) error {
	waited = waited.Round(time.Millisecond)
	if err := ctx.Err(); err != nil {
		return &startError{
			msg: fmt.Sprintf("bus: %s: %v after %v and %d attempts; %s unreachable: %v",
				st.what, err, waited, attempts, st.name, cause),
			errs: []error{err, ErrStoreUnavailable, cause},
		}
	}
	return &startError{
		msg: fmt.Sprintf("bus: start: %s: %s still unreachable after %v (StartTimeout %v, %d attempts): %v",
			st.what, st.name, waited, b.cfg.StartTimeout, attempts, cause),
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

// describe names a persistence or transport for logs and errors: its
// String method when it has one (the drivers of this module describe
// their database there, never with a password), else its Go type.
func describe(v any) string {
	if s, ok := v.(fmt.Stringer); ok {
		return s.String()
	}
	return fmt.Sprintf("%T", v)
}
