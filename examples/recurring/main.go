// Command recurring declares two recurring schedules on a bus: a heartbeat
// every second (bus.Every) and a nightly report at 02:30 Berlin time (a
// robfig/cron spec). Every process running this code declares the same
// schedules, and each tick is sent once. It also makes one schedule per
// tenant at runtime (SetRecurring), from data: invoices on weekday
// mornings, each tenant's shifted by its own jitter. It runs for a few
// seconds, shows the heartbeats, triggers the nightly report and one
// tenant's invoices once, lists the schedules and deletes a tenant's.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/postbus/bus"
)

// Heartbeat is sent every second.
type Heartbeat struct{ Tick time.Time }

// BuildReport is sent every night.
type BuildReport struct{ Day time.Time }

// SendInvoices is sent on weekday mornings, per tenant.
type SendInvoices struct{ Tenant string }

// tenants would come from a database: one schedule each, made at runtime.
var tenants = []string{"acme", "globex"}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := run(ctx, os.Stdout, 3); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// run declares the schedules, waits for heartbeats ticks, triggers the
// report and prints the schedules.
func run(ctx context.Context, out io.Writer, heartbeats int) error {
	nightly, err := cron.ParseStandard("CRON_TZ=Europe/Berlin 30 2 * * *")
	if err != nil {
		return err
	}
	b, err := bus.New(bus.Config{Endpoint: "reports", Logger: slog.New(slog.DiscardHandler),
		// The text of runtime schedules is parsed by robfig/cron on every process.
		ParseSchedule: func(s string) (bus.Schedule, error) { return cron.ParseStandard(s) }})
	if err != nil {
		return err
	}
	beats := make(chan time.Time, heartbeats)
	reports := make(chan string, 1)
	_ = bus.Handle(b, func(ctx context.Context, m Heartbeat) error {
		select {
		case beats <- m.Tick:
		default:
		}
		return nil
	})
	_ = bus.Handle(b, func(ctx context.Context, m BuildReport) error {
		reports <- bus.IncomingMessage(ctx).Header(bus.HeaderRecurringName)
		return nil
	})
	invoices := make(chan string, 1)
	_ = bus.Handle(b, func(ctx context.Context, m SendInvoices) error {
		invoices <- m.Tenant
		return nil
	})
	for _, r := range []bus.Recurring{
		{Name: "heartbeat", Schedule: bus.Every(time.Second), Missed: bus.MissedSkip,
			Message: func(tick time.Time) any { return Heartbeat{Tick: tick} }, Options: []bus.Option{bus.To("reports")}},
		{Name: "nightly-report", Schedule: nightly,
			Message: func(tick time.Time) any { return BuildReport{Day: tick} }, Options: []bus.Option{bus.To("reports")}},
	} {
		if err := b.AddRecurring(r); err != nil {
			return err
		}
	}
	if err := b.Start(ctx); err != nil {
		return err
	}
	defer b.Stop(context.Background())
	for range heartbeats {
		select {
		case tick := <-beats:
			fmt.Fprintf(out, "heartbeat: on a whole second: %v\n", tick.Equal(tick.Truncate(time.Second)))
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := b.TriggerRecurring(ctx, "nightly-report"); err != nil {
		return err
	}
	select {
	case name := <-reports:
		fmt.Fprintf(out, "report triggered by schedule %q\n", name)
	case <-ctx.Done():
		return ctx.Err()
	}
	list, err := b.Recurrings(ctx)
	if err != nil {
		return err
	}
	for _, r := range list {
		if !r.Runtime {
			fmt.Fprintf(out, "%s: %s, next within a day: %v\n", r.Name, r.Schedule, time.Until(r.Next) < 24*time.Hour)
		}
	}
	return tenantSchedules(ctx, out, b, invoices)
}

// tenantSchedules makes one schedule per tenant at runtime, triggers one,
// lists them and deletes one: what an admin API would do as tenants come
// and go. Any process on the persistence runs them.
func tenantSchedules(ctx context.Context, out io.Writer, b *bus.Bus, invoices <-chan string) error {
	for _, t := range tenants {
		if err := b.SetRecurring(ctx, bus.RecurringSpec{
			Name:     "invoices-" + t,
			Schedule: "CRON_TZ=Europe/Berlin 0 9 * * 1-5",
			Message:  SendInvoices{Tenant: t},
			Options:  []bus.Option{bus.To("reports")},
			Policy:   bus.RecurringPolicy{Jitter: 30 * time.Minute}, // tenants' invoices spread over half an hour
		}); err != nil {
			return err
		}
	}
	if err := b.TriggerRecurring(ctx, "invoices-acme"); err != nil {
		return err
	}
	select {
	case tenant := <-invoices:
		fmt.Fprintf(out, "invoices triggered for tenant %s\n", tenant)
	case <-ctx.Done():
		return ctx.Err()
	}
	page, err := b.ListRecurrings(ctx, bus.RecurringFilter{Prefix: "invoices-"})
	if err != nil {
		return err
	}
	for _, r := range page {
		fmt.Fprintf(out, "%s: %s, made at runtime: %v\n", r.Name, r.Schedule, r.Runtime)
	}
	if err := b.DeleteRecurring(ctx, "invoices-globex"); err != nil {
		return err
	}
	page, err = b.ListRecurrings(ctx, bus.RecurringFilter{Prefix: "invoices-"})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "after globex left: %d tenant schedule(s)\n", len(page))
	return nil
}
