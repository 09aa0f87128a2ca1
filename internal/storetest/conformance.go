package storetest

import (
	"reflect"
	"testing"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
)

// Suites names the bustest suites a store should pass.
type Suites struct {
	// Store returns a new, set-up, isolated store for one case. Every
	// store passes bustest.ScheduledMessageTests.
	Store func(t *testing.T) bus.ScheduledStore
	// The capabilities the store declares; each runs its suite, and a
	// store that lacks the interface fails.
	Sagas     bool // bus.SagaStore: bustest.SagaTests
	Recurring bool // bus.RecurringStore: bustest.RecurringTests
	Browser   bool // bus.ScheduledBrowser: bustest.ScheduledBrowserTests
	Failed    bool // bus.FailedStore: bustest.FailedStoreTests
	// Outbox, when not nil, runs bustest.OutboxTests with its harnesses.
	Outbox bustest.OutboxFactory
	// CallerTx, when not nil, runs bustest.CallerTxTests.
	CallerTx *bustest.CallerTxHarness
}

// Conformance runs every suite s names, each as a parallel subtest.
func Conformance(t *testing.T, s Suites) {
	run := func(name string, on bool, suite func(t *testing.T)) {
		if on {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				suite(t)
			})
		}
	}
	run("Scheduled", true, func(t *testing.T) {
		bustest.ScheduledMessageTests(t, s.Store)
	})
	run("Sagas", s.Sagas, func(t *testing.T) {
		bustest.SagaTests(t, func(t *testing.T) bus.SagaStore { return as[bus.SagaStore](t, s.Store(t)) })
	})
	run("Recurring", s.Recurring, func(t *testing.T) {
		bustest.RecurringTests(t, func(t *testing.T) bus.RecurringStore { return as[bus.RecurringStore](t, s.Store(t)) })
	})
	run("Browser", s.Browser, func(t *testing.T) {
		bustest.ScheduledBrowserTests(t, func(t *testing.T) bus.ScheduledBrowser { return as[bus.ScheduledBrowser](t, s.Store(t)) })
	})
	run("Failed", s.Failed, func(t *testing.T) {
		bustest.FailedStoreTests(t, func(t *testing.T) bus.FailedStore { return as[bus.FailedStore](t, s.Store(t)) })
	})
	run("Outbox", s.Outbox != nil, func(t *testing.T) { bustest.OutboxTests(t, s.Outbox) })
	run("CallerTx", s.CallerTx != nil, func(t *testing.T) { bustest.CallerTxTests(t, *s.CallerTx) })
}

// as returns store as a T, failing t when the store lacks the interface
// it declared.
func as[T any](t *testing.T, store bus.ScheduledStore) T {
	t.Helper()
	v, ok := store.(T)
	if !ok {
		t.Fatalf("%T declares a capability it lacks: not a %v", store, reflect.TypeFor[T]())
	}
	return v
}
