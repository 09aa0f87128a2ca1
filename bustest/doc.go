// Package bustest holds the conformance suites every Postbus driver runs
// against its real server: TransportTests for transports and
// ScheduledMessageTests for scheduled-message stores. A driver is done when
// both pass in its own tests:
//
//	func TestConformance(t *testing.T) {
//		bustest.ScheduledMessageTests(t, func(t *testing.T) bus.ScheduledStore {
//			return newStoreInFreshSchema(t)
//		})
//	}
//
// Stores that offer the operations capabilities also run
// ScheduledBrowserTests (bus.ScheduledBrowser) and FailedStoreTests
// (bus.FailedStore).
//
// Each case runs as a subtest on a fresh, isolated store or queue namespace
// from the factory, and checks afterwards that nothing was left behind.
package bustest
