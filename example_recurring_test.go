package bus_test

import (
	"context"
	"fmt"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
)

// HourlyReport is the message of the recurring example.
type HourlyReport struct{ Hour time.Time }

// A schedule declared on a bus sends its message at every tick, once
// however many processes declare it. A fake clock stands in for an hour.
func ExampleBus_AddRecurring() {
	ctx := context.Background()
	clock := bustest.NewFakeClock(time.Date(2030, 1, 1, 9, 15, 0, 0, time.UTC))
	b, _ := bus.New(bus.Config{Endpoint: "reports", Clock: clock, Logger: quiet()})
	got := make(chan *bus.Envelope, 1)
	_ = bus.Handle(b, func(ctx context.Context, m HourlyReport) error {
		got <- bus.IncomingMessage(ctx)
		return nil
	})
	err := b.AddRecurring(bus.Recurring{
		Name:     "hourly-report",
		Schedule: bus.Every(time.Hour), // on the hour, UTC; or a robfig/cron schedule
		Message:  func(tick time.Time) any { return HourlyReport{Hour: tick} },
		Options:  []bus.Option{bus.To("reports")},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = b.Start(ctx)
	defer b.Stop(ctx)

	list, _ := b.Recurrings(ctx)
	fmt.Println(list[0].Name, list[0].Schedule, "next at", list[0].Next.Format(time.TimeOnly))
	clock.Advance(45 * time.Minute)
	env := <-got
	fmt.Println(env.Header(bus.HeaderRecurringName), "tick", env.Header(bus.HeaderRecurringTick))
	// Output:
	// hourly-report every 1h0m0s next at 10:00:00
	// hourly-report tick 2030-01-01T10:00:00Z
}
