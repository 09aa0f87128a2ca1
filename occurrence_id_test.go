package bus_test

import (
	"context"
	"testing"
	"time"

	"github.com/postbus/bus"
)

// TestRecurringOccurrenceIDIsTheStoredOccurrencesID: the exported helper
// finds the rows the bus stored for a record's ticks.
func TestRecurringOccurrenceIDIsTheStoredOccurrencesID(t *testing.T) {
	t.Parallel()
	p := bus.NewMemoryPersistence()
	b, err := bus.New(bus.Config{Endpoint: "ids", Persistence: p})
	if err != nil {
		t.Fatal(err)
	}
	type Tick struct{}
	bus.Handle(b, func(context.Context, Tick) error { return nil })
	bus.Route[Tick](b, "ids")
	if err := b.AddRecurring(bus.Recurring{Name: "hourly", Schedule: bus.Every(time.Hour), Message: func(time.Time) any { return Tick{} }}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Stop(ctx) }()
	rec, ok, err := p.LoadRecurring(ctx, "hourly")
	if err != nil || !ok || len(rec.Ticks) == 0 {
		t.Fatalf("record = %+v, %v, %v; want ticks stored", rec, ok, err)
	}
	for _, tick := range rec.Ticks {
		id := bus.RecurringOccurrenceID("hourly", tick)
		if _, found, err := p.GetScheduled(ctx, id); err != nil || !found {
			t.Errorf("no stored occurrence %s for tick %v (err %v)", id, tick, err)
		}
		if trig := bus.RecurringTriggerID("hourly", tick); trig == id {
			t.Errorf("trigger ID equals the tick's ID %s", id)
		}
	}
}
