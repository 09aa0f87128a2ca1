package postgres

import (
	"errors"
	"fmt"

	"github.com/postbus/bus"
	"github.com/postbus/bus/driver"
)

// Sentinel errors; the typed errors below wrap them.
var (
	// ErrInvalidName is wrapped by every *NameError.
	ErrInvalidName = errors.New("postgres: invalid name")
	// ErrInvalidOptions is wrapped by every *OptionsError.
	ErrInvalidOptions = errors.New("postgres: invalid options")
	// ErrInvalidRow is wrapped by every *InvalidRowError.
	ErrInvalidRow = errors.New("postgres: invalid row")
	// ErrNilPool is returned by New when it is given no pool.
	ErrNilPool = errors.New("postgres: nil pool")
)

// NameError reports a schema or table name that is not a plain
// identifier. Names are never interpolated unchecked into SQL.
type NameError struct {
	Field  string // "Schema" or "Table"
	Name   string // the rejected name
	Reason string
}

// Error describes the failure.
func (e *NameError) Error() string {
	return fmt.Sprintf("postgres: invalid %s name %q: %s", e.Field, e.Name, e.Reason)
}

// Unwrap returns ErrInvalidName.
func (e *NameError) Unwrap() error { return ErrInvalidName }

// errorFamily makes the driver kit's typed errors PostgreSQL's.
type errorFamily struct{}

func (errorFamily) Sentinels() driver.Sentinels {
	return driver.Sentinels{Transport: "postgres", InvalidOptions: ErrInvalidOptions, InvalidName: ErrInvalidName}
}

// OptionsError reports an invalid Options or TransportOptions field: Field
// names it, Reason says why. It matches ErrInvalidOptions.
type OptionsError = driver.OptionsError[errorFamily]

// InvalidRowError reports a row StoreOutgoing or StoreFailed cannot store,
// or a message ID BeginHandling cannot key an inbox row by. It is returned
// before anything is sent to the database.
type InvalidRowError struct {
	ID     string
	Reason string
}

// Error describes the failure.
func (e *InvalidRowError) Error() string {
	return fmt.Sprintf("postgres: invalid row %q: %s", e.ID, e.Reason)
}

// Unwrap returns ErrInvalidRow.
func (e *InvalidRowError) Unwrap() error { return ErrInvalidRow }

// ErrOtherDatabase is wrapped by every *OtherDatabaseError.
var ErrOtherDatabase = errors.New("postgres: transaction on another database than the store's")

// OtherDatabaseError reports a transaction passed with WithTx that is
// connected to another database than the store's pool. Nothing was stored.
type OtherDatabaseError struct {
	Store  string // the store's database, when known
	Tx     string // the transaction's database, when known
	Reason string
}

// Error describes the failure.
func (e *OtherDatabaseError) Error() string {
	if e.Store == "" && e.Tx == "" {
		return fmt.Sprintf("%v: %s", ErrOtherDatabase, e.Reason)
	}
	return fmt.Sprintf("%v: the store is on %s, the transaction on %s: %s", ErrOtherDatabase, e.Store, e.Tx, e.Reason)
}

// Unwrap returns ErrOtherDatabase.
func (e *OtherDatabaseError) Unwrap() error { return ErrOtherDatabase }

// ErrTransportClosed is returned by Send and Publish after Close.
var ErrTransportClosed = errors.New("postgres: transport closed")

// ErrMessageTooLarge is wrapped by every *OversizeError.
var ErrMessageTooLarge = errors.New("postgres: message too large")

// OversizeError reports a body larger than TransportOptions.MaxMessageSize.
// It is returned before anything is stored.
type OversizeError struct {
	ID   string // the message ID
	Size int    // the body's size in bytes
	Max  int    // TransportOptions.MaxMessageSize
}

// Error describes the failure.
func (e *OversizeError) Error() string {
	return fmt.Sprintf("postgres: message %s has a %d-byte body, more than MaxMessageSize %d", e.ID, e.Size, e.Max)
}

// Unwrap returns ErrMessageTooLarge.
func (e *OversizeError) Unwrap() error { return ErrMessageTooLarge }

// Is reports whether target is bus.ErrPermanent: sending the message again
// cannot help, so the dispatcher does not retry a scheduled one for ever.
func (e *OversizeError) Is(target error) bool { return target == bus.ErrPermanent }

// ErrLeaseLost is the cause of a delivery context cancelled because the
// message's lease lapsed and another consumer claimed it
// (context.Cause(ctx) returns it).
var ErrLeaseLost = errors.New("postgres: lease on the message lost")
