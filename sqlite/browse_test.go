package sqlite_test

import (
	"testing"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
)

func TestScheduledBrowserConformance(t *testing.T) {
	bustest.ScheduledBrowserTests(t, func(t *testing.T) bus.ScheduledBrowser { return openTemp(t) })
}

func TestFailedStoreConformance(t *testing.T) {
	bustest.FailedStoreTests(t, func(t *testing.T) bus.FailedStore { return openTemp(t) })
}
