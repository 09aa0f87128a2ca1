package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/postbus/bus"
)

// Tick is the message of the recurring workload's schedules.
type Tick struct {
	Schedule int `json:"schedule"`
	Def      int `json:"def,omitempty"` // a runtime schedule's definition (see recurring_runtime.go)
}

// scheduleName is the name of the recurring workload's schedule i.
func scheduleName(i int) string { return fmt.Sprintf("rec-%05d", i) }

// tickID is the journal ID of a handled occurrence: the schedule's name,
// its tick in Unix nanoseconds and the message ID, joined by '|'.
func tickID(name string, tick time.Time, msgID string) string {
	return fmt.Sprintf("%s|%d|%s", name, tick.UnixNano(), msgID)
}

// parseTickID splits a journal ID written by tickID.
func parseTickID(id string) (name string, tick time.Time, msgID string, ok bool) {
	f := strings.Split(id, "|")
	if len(f) != 3 {
		return "", time.Time{}, "", false
	}
	var ns int64
	if _, err := fmt.Sscan(f[1], &ns); err != nil {
		return "", time.Time{}, "", false
	}
	return f[0], time.Unix(0, ns), f[2], true
}

// runRecurringWorker is a worker process of the recurring workload: one
// bus that declares every schedule, receives their occurrences and
// dispatches the store, until SIGTERM. It journals each handled occurrence
// and prints "ready" on stdout once the bus has started (its schedules are
// reconciled by then).
func runRecurringWorker(w workerFlags) error {
	return serveWorker(w, bus.DispatcherConfig{Lease: w.lease}, func(b *bus.Bus, j *journal) error {
		err := bus.Handle(b, func(ctx context.Context, m Tick) error {
			env := bus.IncomingMessage(ctx)
			tick, err := time.Parse(time.RFC3339Nano, env.Header(bus.HeaderRecurringTick))
			if err != nil {
				return bus.Unrecoverable(fmt.Errorf("soak: tick header: %w", err))
			}
			return j.write(eventHandled, tickID(journalName(env.Header(bus.HeaderRecurringName), m.Def), tick, env.ID))
		})
		if err == nil {
			err = bus.Route[Tick](b, w.names.endpoint())
		}
		for i := 0; err == nil && i < w.schedules; i++ {
			err = b.AddRecurring(bus.Recurring{
				Name:     scheduleName(i),
				Schedule: bus.Every(w.every),
				Message:  func(time.Time) any { return Tick{Schedule: i} },
			})
		}
		if err != nil {
			return fmt.Errorf("declare: %w", err)
		}
		return nil
	})
}
