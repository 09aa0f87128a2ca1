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

// process takes one received message to a conclusion: handled, or moved to
// the error queue. It returns an error only when neither happened, so the
// transport keeps the message.
func (b *Bus) process(ctx context.Context, env *Envelope) error {
	if reason := env.Header(HeaderDecodeError); reason != "" {
		return b.moveToError(ctx, env, "poison", 0, errors.New(reason))
	}
	hs := b.handlerSet(env.Type)
	if hs == nil {
		return b.moveToError(ctx, env, "poison", 0, fmt.Errorf("%w %q at endpoint %s", ErrUnknownMessageType, env.Type, b.cfg.Endpoint))
	}
	maxAttempts := 1 + b.cfg.Retries.Immediate
	for attempt := 1; ; attempt++ {
		err := b.attempt(ctx, env)
		if err == nil {
			b.metrics.handled.Add(1)
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("bus: handling %s interrupted: %w", env.ID, err)
		}
		var poison *poisonError
		if errors.As(err, &poison) {
			return b.moveToError(ctx, env, "poison", attempt, err)
		}
		var unrecoverable *unrecoverableError
		if errors.As(err, &unrecoverable) || attempt >= maxAttempts {
			return b.moveToError(ctx, env, "handler", attempt, err)
		}
		b.metrics.retried.Add(1)
		b.log.Debug("handler failed; retrying", slog.String(logKeyMessageID, env.ID),
			slog.String(logKeyType, env.Type), slog.Int(logKeyAttempt, attempt), slog.Any(logKeyError, err))
	}
}

// attempt runs the incoming middleware and the handlers once, then releases
// the messages they sent.
func (b *Bus) attempt(ctx context.Context, env *Envelope) error {
	s := &scope{bus: b, incoming: env}
	hctx := withScope(ctx, s)
	if err := b.incoming(hctx, env); err != nil {
		return err
	}
	return s.flush(ctx)
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
	failed.SetHeader(HeaderFailureQueue, cmp.Or(env.Destination, b.cfg.Endpoint))
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
