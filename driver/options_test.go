package driver_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/postbus/bus/driver"
)

func TestChecks(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		p    *driver.Problem
		want string // "" for no problem
	}{
		{driver.NotNegative("Prefetch", -1), "Prefetch: must not be negative"},
		{driver.NotNegative("Prefetch", 0), ""},
		{driver.Positive("Partitions", 0), "Partitions: must be positive"},
		{driver.AtLeast("AckWait", 999*time.Millisecond, time.Second), "AckWait: must be at least 1s"},
		{driver.AtLeast("Block", 10*time.Millisecond, 10*time.Millisecond), ""},
		{driver.AtLeast("Lease", 99*time.Millisecond, 100*time.Millisecond), "Lease: must be at least 100ms"},
		{driver.Between("Replicas", 6, 1, 5), "Replicas: must be between 1 and 5"},
		{driver.WholeSeconds("VisibilityTimeout", 1500*time.Millisecond, time.Second, 12*time.Hour), "VisibilityTimeout: must be whole seconds between 1s and 12h"},
		{driver.WholeSeconds("WaitTime", 20*time.Second, time.Second, 20*time.Second), ""},
		{driver.WholeSeconds("X", 0, time.Second, 90*time.Minute), "X: must be whole seconds between 1s and 1h30m"},
		{driver.Check(false, "Stream", `"a.b" is not a valid stream name`), `Stream: "a.b" is not a valid stream name`},
		{driver.First(nil, driver.Positive("A", 0), driver.Positive("B", 0)), "A: must be positive"},
		{driver.First(nil, nil), ""},
	} {
		got := ""
		if c.p != nil {
			got = c.p.Error()
		}
		if got != c.want {
			t.Errorf("got %q, want %q", got, c.want)
		}
	}
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	n, d := 0, 5*time.Second
	driver.Default(&n, 8)
	driver.Default(&d, time.Second)
	if n != 8 || d != 5*time.Second {
		t.Errorf("got %d, %s; want 8, 5s", n, d)
	}
	l := slog.New(slog.DiscardHandler)
	if driver.Logger(nil) != slog.Default() || driver.Logger(l) != l {
		t.Error("Logger: want slog.Default() for nil, else the logger given")
	}
}
