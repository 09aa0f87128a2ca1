package drivertest

import (
	"errors"
	"testing"
)

// TypedError checks that err is a T (errors.As), matches sentinel
// (errors.Is) and reads want, and returns the T: how a driver's tests
// check the typed error of a real invalid call.
func TypedError[T error](tb testing.TB, err, sentinel error, want string) T {
	tb.Helper()
	var typed T
	if !errors.As(err, &typed) {
		tb.Errorf("%v (%T) is not a %T", err, err, typed)
	}
	if !errors.Is(err, sentinel) {
		tb.Errorf("%v does not match %v", err, sentinel)
	}
	if err != nil && err.Error() != want {
		tb.Errorf("error text %q, want %q", err.Error(), want)
	}
	return typed
}
