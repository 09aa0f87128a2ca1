package postgres_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/postgres"
)

// laggingClock runs an hour behind the real clock (and the database's), as
// the clock of a badly synchronised host would.
type laggingClock struct{}

func (laggingClock) Now() time.Time { return time.Now().Add(-time.Hour) }

func (laggingClock) NewTimer(d time.Duration) bus.Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time { return r.t.C }
func (r realTimer) Stop() bool          { return r.t.Stop() }

type clockCheck struct{ N int }

func (clockCheck) MessageName() string { return "postgres_test.ClockCheck" }

// TestSenderClockBehindDatabaseIsNotEarly runs a bus whose clock is an hour
// behind the database's. A delay is measured on the database clock, so a
// message sent with DeliverAfter(2s), and a delayed retry 2 s after a
// failure, arrive no sooner than 2 s later on the real clock, not at once
// because their due time on the bus's clock was an hour in the past of the
// database.
func TestSenderClockBehindDatabaseIsNotEarly(t *testing.T) {
	t.Parallel()
	const delay = 2 * time.Second
	pool := testPool(t)

	t.Run("DeliverAfter", func(t *testing.T) {
		t.Parallel()
		rec := bustest.NewRecorder[clockCheck]()
		b := bustest.StartBus(t, bus.Config{Endpoint: "lagging", Clock: laggingClock{}, Persistence: newStore(t, pool, postgres.Options{}),
			Dispatcher: bus.DispatcherConfig{PollInterval: 100 * time.Millisecond}}, func(b *bus.Bus) {
			mustDo(t, bus.Handle(b, rec.Handler))
			mustDo(t, bus.Route[clockCheck](b, "lagging"))
		})
		sent := time.Now()
		if err := b.Send(ctxTimeout(t, time.Minute), clockCheck{N: 1}, bus.DeliverAfter(delay)); err != nil {
			t.Fatal(err)
		}
		rec.WaitFor(t, 1)
		if got := rec.Times()[0].Sub(sent); got < delay {
			t.Errorf("delivered %v after sending with DeliverAfter(%v): early", got.Round(time.Millisecond), delay)
		}
	})

	t.Run("DelayedRetry", func(t *testing.T) {
		t.Parallel()
		var failedAt atomic.Int64
		arrived := make(chan time.Time, 2)
		b := bustest.StartBus(t, bus.Config{Endpoint: "lagging-retry", Clock: laggingClock{}, Persistence: newStore(t, pool, postgres.Options{}),
			Dispatcher: bus.DispatcherConfig{PollInterval: 100 * time.Millisecond},
			Retries:    bus.RetryConfig{Immediate: -1, Delayed: 1, DelayedBackoff: func(int) time.Duration { return delay }},
		}, func(b *bus.Bus) {
			mustDo(t, bus.Handle(b, func(ctx context.Context, m clockCheck) error {
				if failedAt.Load() == 0 {
					failedAt.Store(time.Now().UnixNano())
					return errors.New("not yet")
				}
				arrived <- time.Now()
				return nil
			}))
			mustDo(t, bus.Route[clockCheck](b, "lagging-retry"))
		})
		if err := b.Send(ctxTimeout(t, time.Minute), clockCheck{N: 2}); err != nil {
			t.Fatal(err)
		}
		select {
		case at := <-arrived:
			if got := at.Sub(time.Unix(0, failedAt.Load())); got < delay {
				t.Errorf("delayed retry handled %v after the failure, want at least %v", got.Round(time.Millisecond), delay)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the delayed retry did not arrive within 30 s")
		}
	})
}
