package postgres

import (
	"errors"
	"fmt"
)

// Sentinel errors; the typed errors below wrap them.
var (
	// ErrInvalidName is wrapped by every *InvalidNameError.
	ErrInvalidName = errors.New("postgres: invalid name")
	// ErrInvalidOption is wrapped by every *OptionError.
	ErrInvalidOption = errors.New("postgres: invalid option")
	// ErrInvalidRow is wrapped by every *InvalidRowError.
	ErrInvalidRow = errors.New("postgres: invalid row")
	// ErrNilPool is returned by New when it is given no pool.
	ErrNilPool = errors.New("postgres: nil pool")
)

// InvalidNameError reports a schema or table name that is not a plain
// identifier. Names are never interpolated unchecked into SQL.
type InvalidNameError struct {
	Field  string // "Schema" or "Table"
	Name   string // the rejected name
	Reason string
}

// Error describes the failure.
func (e *InvalidNameError) Error() string {
	return fmt.Sprintf("postgres: invalid %s name %q: %s", e.Field, e.Name, e.Reason)
}

// Unwrap returns ErrInvalidName.
func (e *InvalidNameError) Unwrap() error { return ErrInvalidName }

// OptionError reports an invalid numeric option.
type OptionError struct {
	Field  string
	Reason string
}

// Error describes the failure.
func (e *OptionError) Error() string {
	return fmt.Sprintf("postgres: invalid option %s: %s", e.Field, e.Reason)
}

// Unwrap returns ErrInvalidOption.
func (e *OptionError) Unwrap() error { return ErrInvalidOption }

// InvalidRowError reports a row StoreOutgoing cannot store. It is returned
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
