package bus

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/postbus/bus/internal/loop"
)

// onDelivery is the DeliveryHandler the bus gives its transport. The
// handler's ctx derives from the delivery's ctx, so a transport that loses
// the message (a visibility timeout, a revoked partition) cancels the work
// on it; Stop cancels it too, once its own ctx ends.
func (b *Bus) onDelivery(ctx context.Context, env *Envelope) error {
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(b.handlerCtx, cancel)
	defer stop()
	return b.concluded(hctx, b.process(hctx, env))
}

// Receive runs the incoming pipeline for one message handed in from outside
// the transport, such as a serverless function's trigger, on a bus that need
// not be started. It returns nil when the message was handled or moved to
// the error queue, and an error when it must be delivered again. Scheduled
// messages sent by the handler are stored; another, started bus on the same
// store dispatches them.
func (b *Bus) Receive(ctx context.Context, env *Envelope) error {
	if err := b.checkOpen(); err != nil {
		return err
	}
	if env == nil {
		return fmt.Errorf("%w: nil envelope", ErrInvalidMessage)
	}
	return b.concluded(ctx, b.process(ctx, env))
}

// process takes one received message to a conclusion: handled, scheduled
// for a delayed retry, or moved to the error queue. It returns an error only
// when none of these happened, so the transport keeps the message. With an
// Observer, the delivery is observed from here to its conclusion.
func (b *Bus) process(ctx context.Context, env *Envelope) error {
	if b.cfg.Observer != nil {
		return b.observeProcess(ctx, env)
	}
	return b.processMessage(ctx, env)
}

func (b *Bus) processMessage(ctx context.Context, env *Envelope) error {
	if reason := env.Header(HeaderDecodeError); reason != "" {
		return b.moveToError(ctx, env, "poison", 0, errors.New(reason))
	}
	if b.handlerSet(env.Type) == nil {
		return b.moveToError(ctx, env, "poison", 0, fmt.Errorf("%w %q at endpoint %s", ErrUnknownMessageType, env.Type, b.cfg.Endpoint))
	}
	if reason := messageIDProblem(env.ID); reason != "" && b.outbox != nil {
		// A foreign producer's ID the inbox cannot key: handling it would
		// loop on the inbox row, or share one with another ID.
		return b.moveToError(ctx, env, "poison", 0, fmt.Errorf("%w: %s: the outbox's inbox cannot record its handling", ErrInvalidMessage, reason))
	}
	end, skip, err := b.guardOverlap(ctx, env)
	switch {
	case err != nil:
		return err
	case skip:
		return nil
	case end != nil:
		defer end()
	}
	if delayedRetries(env) == 0 { // a delayed retry reached the queue before
		b.acknowledge(ctx, env, AckPositive, AckReachedQueue)
	}
	if !env.DueAt.IsZero() {
		b.metrics.lateness.record(b.clock.Now().Sub(deliverableAt(env)))
	}
	maxAttempts := 1 + b.cfg.Retries.Immediate
	for attempt := 1; ; attempt++ {
		if class, ok := expired(env, b.clock.Now(), false); ok {
			return b.discardExpired(ctx, env, class)
		}
		err := b.attempt(ctx, env, attempt)
		for conflicts := 1; errors.Is(err, ErrSagaConflict) && conflicts < maxSagaConflicts && ctx.Err() == nil; conflicts++ {
			b.metrics.sagaConflicts.Add(1) // not a failure: run again on fresh state
			err = b.attempt(ctx, env, attempt)
		}
		if err == nil {
			b.metrics.handled.Add(1)
			b.acknowledge(ctx, env, AckPositive, AckReceived)
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("bus: handling %s interrupted: %w", env.ID, err)
		}
		if b.cfg.Retries.Policy != nil {
			err = b.cfg.Retries.Policy(env, err)
		}
		var (
			poison        *poisonError
			unrecoverable *unrecoverableError
			retryAfter    *RetryAfterError
		)
		switch {
		case errors.As(err, &poison):
			return b.moveToError(ctx, env, "poison", priorAttempts(env)+attempt, err)
		case errors.As(err, &unrecoverable):
			return b.moveToError(ctx, env, "handler", priorAttempts(env)+attempt, err)
		case errors.As(err, &retryAfter) && b.retryStore != nil:
			return b.retryLater(ctx, env, retryAfter.Delay, attempt, err)
		case attempt < maxAttempts:
			b.metrics.retried.Add(1)
			b.emit(ctx, ObserverEvent{Kind: EventRetry, Reason: "immediate", Envelope: env, Attempt: attempt, Err: err})
			b.log.Debug("handler failed; retrying", slog.String(logKeyMessageID, env.ID),
				slog.String(logKeyType, env.Type), slog.Int(logKeyAttempt, attempt), slog.Any(logKeyError, err))
			continue
		}
		if n := delayedRetries(env) + 1; n <= b.cfg.Retries.Delayed && b.retryStore != nil {
			return b.retryLater(ctx, env, b.cfg.Retries.DelayedBackoff(n), attempt, err)
		}
		return b.moveToError(ctx, env, "handler", priorAttempts(env)+attempt, err)
	}
}

// attempt runs the incoming middleware and the handlers once, then releases
// the messages they sent; with an Observer, between StartAttempt and
// EndAttempt.
func (b *Bus) attempt(ctx context.Context, env *Envelope, attempt int) error {
	if b.cfg.Observer != nil {
		return b.observeAttempt(ctx, env, attempt)
	}
	return b.runAttempt(ctx, env, attempt)
}

func (b *Bus) runAttempt(ctx context.Context, env *Envelope, attempt int) error {
	if b.outbox != nil {
		return b.attemptInOutbox(ctx, env, attempt)
	}
	s := &scope{bus: b, incoming: env, attempt: attempt}
	if err := b.runIncoming(withScope(ctx, s), env); err != nil {
		s.finish() // what it sent is dropped; later sends fail
		return err
	}
	if err := s.flush(ctx); err != nil {
		return err
	}
	s.succeeded(ctx)
	return nil
}

// runIncoming runs the incoming pipeline, bounded by Config.HandlerTimeout
// when set: past it the attempt fails even if the handler ignores its ctx.
// The handler's goroutine is then abandoned: it keeps running until it
// returns, outside the Concurrency bound, and whatever it sends afterwards
// fails with ErrHandlerDone.
func (b *Bus) runIncoming(ctx context.Context, env *Envelope) error {
	if b.cfg.HandlerTimeout <= 0 {
		return b.incoming(ctx, env)
	}
	tctx, cancel := context.WithTimeout(ctx, b.cfg.HandlerTimeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- b.incoming(tctx, env) }()
	select {
	case err := <-done:
		return err
	case <-tctx.Done():
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w: handler ran longer than HandlerTimeout %v", ErrHandlerTimeout, b.cfg.HandlerTimeout)
	}
}

// invokeHandlers is the last step of the incoming pipeline. A panic in a
// handler is a failure like any other.
func (b *Bus) invokeHandlers(ctx context.Context, env *Envelope) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("handler panic: %v", r)
			b.log.Error("handler panicked", slog.String(logKeyMessageID, env.ID),
				slog.String(logKeyType, env.Type), slog.Any("panic", r), slog.String("stack", string(debug.Stack())))
		}
	}()
	hs := b.handlerSet(env.Type)
	if hs == nil {
		return fmt.Errorf("%w %q", ErrUnknownMessageType, env.Type)
	}
	msg, err := hs.decode(b.cfg.Serializer, env.Body)
	if err != nil {
		return &poisonError{fmt.Errorf("undecodable %s body: %w", env.Type, err)}
	}
	for _, fn := range hs.funcs {
		if err := fn(ctx, msg); err != nil {
			return err
		}
	}
	return nil
}

// moveToError sends the message to the error queue with headers saying why,
// where and when. The message is acknowledged only if that succeeded.
func (b *Bus) moveToError(ctx context.Context, env *Envelope, kind string, attempts int, cause error) error {
	failed := env.Clone()
	failed.SetHeader(HeaderFailureReason, cause.Error())
	failed.SetHeader(HeaderFailureKind, kind)
	failed.SetHeader(HeaderFailureEndpoint, b.cfg.Endpoint)
	// Replay sends the message back to this queue; an event that never
	// reached a queue (a failed dispatch) has none and is published again.
	if queue := env.Destination; queue != "" || kind != "dispatch" {
		failed.SetHeader(HeaderFailureQueue, cmp.Or(queue, b.cfg.Endpoint))
	}
	failed.SetHeader(HeaderFailureTime, b.clock.Now().UTC().Format(time.RFC3339Nano))
	failed.SetHeader(HeaderFailureAttempts, strconv.Itoa(attempts))
	sctx, cancel := loop.Detach(ctx, b.cfg.Dispatcher.SendTimeout)
	defer cancel()
	if err := b.transport.Send(sctx, b.cfg.ErrorQueue, finalCopy(failed)); err != nil {
		b.log.Error("could not move message to the error queue; it stays in the input queue",
			slog.String(logKeyMessageID, env.ID), slog.Any(logKeyError, err))
		return fmt.Errorf("bus: move %s to error queue: %w", env.ID, err)
	}
	b.metrics.movedToError.Add(1)
	b.emit(ctx, ObserverEvent{Kind: EventErrorQueue, Envelope: env, Reason: kind, Attempt: attempts, Err: cause})
	b.log.Warn("message moved to the error queue", slog.String(logKeyMessageID, env.ID),
		slog.String(logKeyType, env.Type), slog.String("kind", kind), slog.Int(logKeyAttempt, attempts),
		slog.Any(logKeyError, cause))
	return nil
}

// poisonError marks a message that can never be handled (its body does not
// decode): it goes to the error queue without retries.
type poisonError struct{ err error }

func (e *poisonError) Error() string { return e.err.Error() }
func (e *poisonError) Unwrap() error { return e.err }
