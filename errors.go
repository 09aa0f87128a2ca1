package bus

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. Test for them with errors.Is; the typed errors below wrap
// them and carry the details.
var (
	// ErrClosed is returned by every call on a bus after Stop.
	ErrClosed = errors.New("bus: closed")
	// ErrAlreadyStarted is returned by a second Start.
	ErrAlreadyStarted = errors.New("bus: already started")
	// ErrNoRoute is returned by Send for a command type with no route.
	ErrNoRoute = errors.New("bus: no route for command")
	// ErrConflictingDelivery is matched by the *OptionError returned when
	// DeliverAfter and DeliverAt are both given.
	ErrConflictingDelivery = errors.New("bus: DeliverAfter and DeliverAt are mutually exclusive")
	// ErrDelayedDeliveryNotSupported is returned by a delayed send on a
	// persistence that does not implement ScheduledStore.
	ErrDelayedDeliveryNotSupported = errors.New("bus: delayed delivery not supported by the persistence")
	// ErrInvalidConfig is wrapped by every *ConfigError.
	ErrInvalidConfig = errors.New("bus: invalid config")
	// ErrInvalidOption is wrapped by every *OptionError.
	ErrInvalidOption = errors.New("bus: invalid message option")
	// ErrInvalidMessage is returned for a message that cannot be sent: nil,
	// not serializable, or larger than Config.MaxMessageSize.
	ErrInvalidMessage = errors.New("bus: invalid message")
	// ErrUnknownMessageType marks an incoming message no handler is registered for.
	ErrUnknownMessageType = errors.New("bus: unknown message type")
	// ErrNotInHandler is returned by Reply when ctx does not come from a handler.
	ErrNotInHandler = errors.New("bus: not called from a message handler")
	// ErrHandlerTimeout is the failure of an attempt that ran past Config.HandlerTimeout.
	ErrHandlerTimeout = errors.New("bus: handler timed out")
	// ErrHandlerDone is returned by Send, Publish and Reply called with a
	// handler's ctx after that handling attempt was settled: from a
	// goroutine that outlived the handler, or from a handler abandoned
	// after Config.HandlerTimeout. Such a message was not sent.
	ErrHandlerDone = errors.New("bus: the handler this ctx belongs to has returned")
	// ErrInvalidRegistration is returned by Handle for a handler the bus
	// could never call correctly (see Handle).
	ErrInvalidRegistration = errors.New("bus: invalid handler registration")
	// ErrNoReplyAddress is returned by Reply when the incoming message names no sender.
	ErrNoReplyAddress = errors.New("bus: incoming message has no reply address")
	// ErrBatchReleased is returned to outgoing middleware that passes a
	// message of a SendBatch call on after that call went ahead without
	// it (from a goroutine of its own): the message was not sent.
	ErrBatchReleased = errors.New("bus: batch already released")
	// ErrCannotJoinTx is returned by a bus call made with a ctx that
	// carries a database transaction (an outbox handling's, or a caller's
	// such as postgres.WithTx) when the persistence cannot run the call in
	// that transaction. The bus refuses instead of taking a second
	// connection, which could wait for ever on the one the transaction
	// holds, and whose effects would not follow the transaction's end.
	ErrCannotJoinTx = errors.New("bus: the persistence cannot run this call in the transaction ctx carries")
	// ErrStartTimeout is matched by Start's error when the persistence's
	// Setup or the transport's Provision did not succeed within
	// Config.StartTimeout (the broker or database is down or unreachable).
	ErrStartTimeout = errors.New("bus: start timed out")
)

// ConfigError reports an invalid Config field.
type ConfigError struct {
	Field  string // the Config field, e.g. "Endpoint"
	Reason string
}

// Error describes the failure.
func (e *ConfigError) Error() string {
	return fmt.Sprintf("bus: invalid config: %s: %s", e.Field, e.Reason)
}

// Unwrap returns ErrInvalidConfig.
func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }

// OptionError reports an invalid per-message option, such as a negative delay.
// It matches ErrInvalidOption, and Err when set.
type OptionError struct {
	Option string // e.g. "DeliverAfter"
	Reason string
	// Err is a more specific sentinel the error also matches, such as
	// ErrConflictingDelivery for DeliverAfter given with DeliverAt; nil for
	// most refusals.
	Err error
}

// Error describes the failure.
func (e *OptionError) Error() string {
	return fmt.Sprintf("bus: invalid option %s: %s", e.Option, e.Reason)
}

// Unwrap returns ErrInvalidOption.
func (e *OptionError) Unwrap() error { return ErrInvalidOption }

// Is reports whether target is Err (or what Err matches), so
// errors.Is(err, ErrConflictingDelivery) holds for that refusal.
func (e *OptionError) Is(target error) bool { return e.Err != nil && errors.Is(e.Err, target) }

// DelayedDeliveryNotSupportedError is returned by a delayed Send or Publish
// when the configured persistence cannot store scheduled messages.
type DelayedDeliveryNotSupportedError struct {
	Persistence string // the persistence's Go type
}

// Error describes the failure.
func (e *DelayedDeliveryNotSupportedError) Error() string {
	return fmt.Sprintf("bus: delayed delivery is not supported by persistence %s: "+
		"it must implement bus.ScheduledStore; use bus.NewMemoryPersistence() for tests, "+
		"or a durable store such as postgres.New, mysql.New, sqlite.Open, mongodb.New or redis.NewPersistence", e.Persistence)
}

// Is reports whether target is ErrDelayedDeliveryNotSupported.
func (e *DelayedDeliveryNotSupportedError) Is(target error) bool {
	return target == ErrDelayedDeliveryNotSupported
}

// unrecoverableError marks a handler error that must not be retried.
type unrecoverableError struct{ err error }

func (e *unrecoverableError) Error() string { return "unrecoverable: " + e.err.Error() }
func (e *unrecoverableError) Unwrap() error { return e.err }

// Unrecoverable wraps a handler error so the message goes straight to the
// error queue, with no further retries.
func Unrecoverable(err error) error {
	if err == nil {
		return nil
	}
	return &unrecoverableError{err: err}
}

// RetryAfterError asks for the message to be handled again after Delay,
// through the scheduled-message store (for rate limits and the like).
type RetryAfterError struct {
	Err   error
	Delay time.Duration
}

// Error describes the failure.
func (e *RetryAfterError) Error() string {
	return fmt.Sprintf("retry after %s: %v", e.Delay, e.Err)
}

// Unwrap returns the wrapped error.
func (e *RetryAfterError) Unwrap() error { return e.Err }

// RetryAfter wraps a handler error so the message is retried after exactly d
// instead of following the configured backoff.
func RetryAfter(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	return &RetryAfterError{Err: err, Delay: d}
}

// Sentinel errors of recurring schedules (Bus.AddRecurring).
var (
	// ErrInvalidRecurring is wrapped by every *RecurringError.
	ErrInvalidRecurring = errors.New("bus: invalid recurring schedule")
	// ErrUnknownRecurring is returned for a schedule name that is not
	// declared (on this bus, or in the persistence, as each call says).
	ErrUnknownRecurring = errors.New("bus: unknown recurring schedule")
	// ErrRecurringNotSupported is returned by AddRecurring when the
	// persistence does not implement RecurringStore.
	ErrRecurringNotSupported = errors.New("bus: recurring schedules not supported by the persistence")
)

// CriticalError is what Config.OnCriticalError receives when a circuit
// breaker trips.
type CriticalError struct {
	Breaker string    // "store", "fetch" or "dispatch"
	Since   time.Time // when the failures began
	Err     error     // the latest failure
}

// Error describes the failure.
func (e *CriticalError) Error() string {
	return fmt.Sprintf("bus: %s circuit breaker tripped: failing since %s: %v", e.Breaker, e.Since.Format(time.RFC3339), e.Err)
}

// Unwrap returns the latest failure.
func (e *CriticalError) Unwrap() error { return e.Err }
