package backend

import "errors"

// Sentinel errors that stores and transports return; package bus names
// the same values.
var (
	// ErrMalformedEnvelope is returned when encoded envelope bytes cannot be decoded.
	ErrMalformedEnvelope = errors.New("bus: malformed envelope")

	// ErrStoreUnavailable is matched by a persistence's error when the
	// store cannot be reached: the database is down, not up yet, or
	// refuses connections for now (starting up, shutting down, too many
	// connections), or the network fails. Retrying later may succeed.
	// Errors that retrying cannot fix (wrong password, unknown database,
	// missing privileges, a schema error) do not match it. Persistences
	// mark such errors with StoreUnavailable; Start retries the
	// persistence's Setup while its error matches, until
	// Config.StartTimeout, and its error then matches it too.
	ErrStoreUnavailable = errors.New("bus: store unavailable")
	// ErrPermanent is matched by a transport's error for a message it can
	// never hand over as it is: its queue does not exist (unroutable), it
	// is larger than the broker accepts, the broker's rules refuse it.
	// Transports mark such errors with Permanent. The dispatcher stops
	// retrying a scheduled message that fails so after the retry budget of
	// the endpoint that scheduled it, and moves it to the error queue.
	ErrPermanent = errors.New("bus: permanent failure")
)

// PermanentError marks a transport failure that retrying cannot fix (see
// ErrPermanent). Transports return it through Permanent; errors.Is(err,
// ErrPermanent) finds it however deeply it is wrapped, and errors.Is and
// errors.As still find the transport's own error inside.
type PermanentError struct {
	Err error // the transport's error
}

// Error returns the transport's error text.
func (e *PermanentError) Error() string { return e.Err.Error() }

// Is reports whether target is ErrPermanent.
func (e *PermanentError) Is(target error) bool { return target == ErrPermanent }

// Unwrap returns the transport's error.
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent marks err, a transport's failure to hand a message over, as one
// that retrying cannot fix: the message's queue does not exist, the message
// is too large, the broker's rules refuse it. Failures of the connection
// (the broker is down, a timeout) are transient: do not mark them. It
// returns nil for nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// StoreUnavailableError marks a persistence's failure to reach its store
// (see ErrStoreUnavailable). Persistences return it through
// StoreUnavailable; errors.Is(err, ErrStoreUnavailable) finds it however
// deeply it is wrapped, and errors.Is and errors.As still find the
// persistence's own error inside.
type StoreUnavailableError struct {
	Err error // the persistence's error
}

// Error returns the persistence's error text.
func (e *StoreUnavailableError) Error() string { return e.Err.Error() }

// Is reports whether target is ErrStoreUnavailable.
func (e *StoreUnavailableError) Is(target error) bool { return target == ErrStoreUnavailable }

// Unwrap returns the persistence's error.
func (e *StoreUnavailableError) Unwrap() error { return e.Err }

// StoreUnavailable marks err, a persistence's failure, as one of reaching
// the store, which retrying later may fix: a refused or lost connection, a
// timeout, a database that is starting up or shutting down. Errors the
// store returned because of what was asked (wrong password, unknown
// database, permission denied, a schema error) are not unavailability: do
// not mark them. It returns nil for nil.
func StoreUnavailable(err error) error {
	if err == nil {
		return nil
	}
	return &StoreUnavailableError{Err: err}
}
