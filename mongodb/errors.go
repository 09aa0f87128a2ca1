package mongodb

import (
	"errors"
	"fmt"
)

// Sentinel errors; the typed errors below wrap them.
var (
	// ErrInvalidOptions is wrapped by every *OptionsError.
	ErrInvalidOptions = errors.New("mongodb: invalid options")
	// ErrInvalidArgument is wrapped by every *ArgumentError.
	ErrInvalidArgument = errors.New("mongodb: invalid argument")
)

// OptionsError reports a bad argument to New: a nil database or an invalid
// Options field.
type OptionsError struct {
	Field  string // "db", "Collection" or "ClaimsCollection"
	Reason string
}

// Error describes the failure.
func (e *OptionsError) Error() string {
	return fmt.Sprintf("mongodb: invalid options: %s %s", e.Field, e.Reason)
}

// Unwrap returns ErrInvalidOptions.
func (e *OptionsError) Unwrap() error { return ErrInvalidOptions }

// ArgumentError reports a bad argument to a store method: a lease that is
// not positive (ClaimDueOutgoing) or a message without an ID
// (StoreOutgoing). Nothing was read or written. Invalid collection names are
// reported by New as an *OptionsError.
type ArgumentError struct {
	Method   string // "ClaimDueOutgoing" or "StoreOutgoing"
	Argument string // "lease" or "msgs[i].ID"
	Reason   string
}

// Error describes the failure.
func (e *ArgumentError) Error() string {
	return fmt.Sprintf("mongodb: %s: %s %s", e.Method, e.Argument, e.Reason)
}

// Unwrap returns ErrInvalidArgument.
func (e *ArgumentError) Unwrap() error { return ErrInvalidArgument }
