package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/postbus/bus"
)

// fillBrowserFixture stores 60 scheduled messages spread over the next day
// (two overdue) and 37 failures in three groups.
func fillBrowserFixture(t *testing.T, s *bus.MemoryPersistence, now time.Time) {
	t.Helper()
	ctx := context.Background()
	types := []string{"orders.PaymentOverdue", "orders.Reminder", "shipping.Dispatch"}
	var rows []bus.OutgoingMessage
	for i := range 60 {
		id := fmt.Sprintf("0190f5d6-0000-7000-8000-%012d", i)
		var due time.Time
		switch {
		case i < 2:
			due = now.Add(-time.Duration(i+2) * time.Minute) // overdue
		case i < 30:
			due = now.Add(time.Duration(i*2) * time.Minute) // within the hour
		default:
			due = now.Add(time.Duration(i-29) * 47 * time.Minute) // through the day
		}
		typ := types[i%len(types)]
		env := &bus.Envelope{ID: id, Type: typ, Kind: bus.KindCommand, ContentType: "application/json",
			Body: []byte(fmt.Sprintf(`{"order":"o-%d","note":"<script>alert(1)</script>"}`, i)), Source: "sales",
			Destination: "billing", SentAt: now.Add(-time.Hour), DueAt: due, Headers: map[string]string{"tenant": "acme"}}
		rows = append(rows, bus.OutgoingMessage{ID: id, Type: typ, Kind: bus.KindCommand, DueAt: due, Envelope: bus.MarshalEnvelope(env)})
	}
	if err := s.StoreOutgoing(ctx, rows); err != nil {
		t.Fatal(err)
	}
	var failed []bus.FailedMessage
	add := func(n int, typ, endpoint string, reason func(int) string) {
		for i := range n {
			id := fmt.Sprintf("0190f5d6-%s-%04d", typ, i)
			at := now.Add(-time.Duration(i*7+3) * time.Minute)
			env := &bus.Envelope{ID: id, Type: typ, Kind: bus.KindCommand, Body: []byte(`{"card":"4242"}`),
				ContentType: "application/json", Destination: endpoint, Headers: map[string]string{
					bus.HeaderFailureReason: reason(i), bus.HeaderFailureEndpoint: endpoint, bus.HeaderFailureQueue: endpoint,
					bus.HeaderFailureKind: "handler", bus.HeaderFailureAttempts: "5", bus.HeaderFailureTime: at.Format(time.RFC3339Nano)}}
			failed = append(failed, bus.FailedFromEnvelope(env, at))
		}
	}
	add(25, "billing.ChargeCard", "billing", func(i int) string { return fmt.Sprintf("card %d declined by issuer", 4000+i) })
	add(8, "shipping.Dispatch", "shipping", func(i int) string { return fmt.Sprintf(`carrier "dhl" timeout after %ds`, 30+i) })
	add(4, "billing.Refund", "billing", func(int) string { return "refund window closed" })
	if err := s.StoreFailed(ctx, failed); err != nil {
		t.Fatal(err)
	}
}
