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
)

// onDelivery is the DeliveryHandler the bus gives its transport. Handlers run
// on the bus's handler context, which Stop cancels only when its own ctx ends.
func (b *Bus) onDelivery(_ context.Context, env *Envelope) error {
	return b.process(b.handlerCtx, env)
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
	return b.process(ctx, env)
}

// process takes one received message to a conclusion: handled, scheduled
// for a delayed retry, or moved to the error queue. It returns an error only
// when none of these happened, so the transport keeps the message.
func (b *Bus) process(ctx context.Context, env *Envelope) error {
	if reason := env.Header(HeaderDecodeError); reason != "" {
		return b.moveToError(ctx, env, "poison", 0, errors.New(reason))
	}
	if b.handlerSet(env.Type) == nil {
		return b.moveToError(ctx, env, "poison", 0, fmt.Errorf("%w %q at endpoint %s", ErrUnknownMessageType, env.Type, b.cfg.Endpoint))
	}
	if delayedRetries(env) == 0 { // a delayed retry reached the queue before
		b.acknowledge(ctx, env, AckPositive, AckReachedQueue)
	}
	maxAttempts := 1 + b.cfg.Retries.Immediate
	for attempt := 1; ; attempt++ {
		if class, ok := expired(env, b.clock.Now(), false); ok {
			return b.discardExpired(ctx, env, class)
		}
		err := b.attempt(ctx, env, attempt)
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
			return b.moveToError(ctx, env, "poison", attempt, err)
		case errors.As(err, &unrecoverable):
			return b.moveToError(ctx, env, "handler", attempt, err)
		case errors.As(err, &retryAfter) && b.store != nil:
			return b.retryLater(ctx, env, retryAfter.Delay, attempt, err)
		case attempt < maxAttempts:
			b.metrics.retried.Add(1)
			b.log.Debug("handler failed; retrying", slog.String(logKeyMessageID, env.ID),
				slog.String(logKeyType, env.Type), slog.Int(logKeyAttempt, attempt), slog.Any(logKeyError, err))
			continue
		}
		if n := delayedRetries(env) + 1; n <= b.cfg.Retries.Delayed && b.store != nil {
			return b.retryLater(ctx, env, b.cfg.Retries.DelayedBackoff(n), attempt, err)
		}
		return b.moveToError(ctx, env, "handler", attempt, err)
	}
}

// retryLater schedules a copy of the message for this endpoint's queue
// after d, counting a delayed retry. The transport's copy is acknowledged
// only once the store has the retry.
func (b *Bus) retryLater(ctx context.Context, env *Envelope, d time.Duration, attempt int, cause error) error {
	retry := env.Clone()
	n := delayedRetries(env) + 1
	retry.SetHeader(HeaderDelayedRetries, strconv.Itoa(n))
	retry.SetHeader(HeaderFailureReason, cause.Error())
	retry.Destination = b.cfg.Endpoint
	retry.DueAt = b.clock.Now().Add(max(d, 0)).UTC()
	if err := b.schedule(context.WithoutCancel(ctx), []*Envelope{retry}); err != nil {
		b.log.Error("cannot schedule a delayed retry; the message stays in the input queue",
			slog.String(logKeyMessageID, env.ID), slog.Any(logKeyError, err))
		return err
	}
	b.metrics.retried.Add(1)
	b.log.Info("handler failed; retrying later", slog.String(logKeyMessageID, env.ID), slog.String(logKeyType, env.Type),
		slog.Int("delayed_retry", n), slog.Duration("after", d), slog.Int(logKeyAttempt, attempt), slog.Any(logKeyError, cause))
	return nil
}

func delayedRetries(env *Envelope) int {
	n, _ := strconv.Atoi(env.Header(HeaderDelayedRetries))
	return n
}

// attempt runs the incoming middleware and the handlers once, then releases
// the messages they sent.
func (b *Bus) attempt(ctx context.Context, env *Envelope, attempt int) error {
	s := &scope{bus: b, incoming: env, attempt: attempt}
	if err := b.runIncoming(withScope(ctx, s), env); err != nil {
		return err
	}
	return s.flush(ctx)
}

// runIncoming runs the incoming pipeline, bounded by Config.HandlerTimeout
// when set: past it the attempt fails even if the handler ignores its ctx
// (the handler's goroutine is then abandoned, and what it sends is dropped
// with its scope).
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
	if err := b.transport.Send(context.WithoutCancel(ctx), b.cfg.ErrorQueue, failed); err != nil {
		b.log.Error("could not move message to the error queue; it stays in the input queue",
			slog.String(logKeyMessageID, env.ID), slog.Any(logKeyError, err))
		return fmt.Errorf("bus: move %s to error queue: %w", env.ID, err)
	}
	b.metrics.movedToError.Add(1)
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
