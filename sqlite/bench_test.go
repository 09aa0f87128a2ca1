package sqlite_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/postbus/bus"
)

const benchRows = 100_000

// benchTransport is the transport identity of the benchmarks' rows: the
// in-memory transport's, which BenchmarkBusDispatch's bus uses.
const benchTransport = "memory"

// benchMessages makes n rows with realistic envelopes (about 250 bytes),
// due from due onwards, one microsecond apart.
func benchMessages(prefix string, n int, due time.Time) []bus.OutgoingMessage {
	out := make([]bus.OutgoingMessage, n)
	for i := range out {
		id := fmt.Sprintf("%s-%07d", prefix, i)
		env := &bus.Envelope{
			ID: id, Type: "billing.InvoiceDue", Kind: bus.KindCommand, ContentType: "application/json",
			Body: []byte(`{"invoice":"INV-000123","amount":4200,"currency":"EUR"}`), Source: "billing", Destination: "reminders",
			Headers: map[string]string{"postbus.reply-to": "billing"}, CorrelationID: "corr-" + id,
			SentAt: time.Now(), DueAt: due.Add(time.Duration(i) * time.Microsecond),
		}
		out[i] = bus.OutgoingMessage{ID: id, Kind: bus.KindCommand, Envelope: bus.MarshalEnvelope(env), DueAt: env.DueAt, Transport: benchTransport}
	}
	return out
}

// BenchmarkSchedule stores 100,000 rows per iteration, in batches of the
// given size, one transaction per batch.
func BenchmarkSchedule(b *testing.B) {
	for _, batch := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			msgs := benchMessages("s", benchRows, time.Now().Add(time.Hour))
			for b.Loop() {
				b.StopTimer()
				p := openTemp(b)
				b.StartTimer()
				for i := 0; i < len(msgs); i += batch {
					if err := p.StoreOutgoing(b.Context(), msgs[i:min(i+batch, len(msgs))]); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(benchRows*b.N)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}

// BenchmarkClaimDelete drains 100,000 due rows per iteration the way the
// dispatcher does: claim a batch, then delete it.
func BenchmarkClaimDelete(b *testing.B) {
	for _, batch := range []int{100, 1000} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			msgs := benchMessages("c", benchRows, time.Now().Add(-time.Hour))
			for b.Loop() {
				b.StopTimer()
				p := openTemp(b)
				if err := p.StoreOutgoing(b.Context(), msgs); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				drained := 0
				for {
					got, err := p.ClaimDueOutgoing(b.Context(), benchTransport, time.Now(), batch, time.Minute)
					if err != nil {
						b.Fatal(err)
					}
					if len(got) == 0 {
						break
					}
					claims := make([]bus.Claim, len(got))
					for i := range got {
						claims[i] = got[i].Claim()
					}
					if n, err := p.DeleteOutgoing(b.Context(), claims); err != nil || n != len(got) {
						b.Fatalf("deleted %d of %d claimed rows: %v", n, len(got), err)
					}
					drained += len(got)
				}
				if drained != benchRows {
					b.Fatalf("drained %d rows, want %d", drained, benchRows)
				}
			}
			b.ReportMetric(float64(benchRows*b.N)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}

type benchPing struct{ N int }

// BenchmarkBusDispatch measures a bus draining 100,000 rows that are all due
// at once from the file to its handler over the in-memory transport: claim,
// hand over, delete, receive, handle.
func BenchmarkBusDispatch(b *testing.B) {
	const endpoint = "bench"
	now := time.Now().Add(-time.Second)
	msgs := make([]bus.OutgoingMessage, benchRows)
	for i := range msgs {
		env := &bus.Envelope{
			ID: fmt.Sprintf("d-%07d", i), Type: bus.MessageName(benchPing{}), Kind: bus.KindCommand,
			ContentType: "application/json", Body: fmt.Appendf(nil, `{"N":%d}`, i),
			Source: endpoint, Destination: endpoint, SentAt: now, DueAt: now,
		}
		msgs[i] = bus.OutgoingMessage{ID: env.ID, Kind: env.Kind, Envelope: bus.MarshalEnvelope(env), DueAt: now, Transport: benchTransport}
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	for b.Loop() {
		b.StopTimer()
		p := openTemp(b)
		if err := p.StoreOutgoing(b.Context(), msgs); err != nil {
			b.Fatal(err)
		}
		var handled atomic.Int64
		done := make(chan struct{})
		bb, err := bus.New(bus.Config{Endpoint: endpoint, Persistence: p, Logger: logger})
		if err != nil {
			b.Fatal(err)
		}
		_ = bus.Handle(bb, func(context.Context, benchPing) error {
			if handled.Add(1) == benchRows {
				close(done)
			}
			return nil
		})
		b.StartTimer()
		if err := bb.Start(b.Context()); err != nil {
			b.Fatal(err)
		}
		select {
		case <-done:
		case <-time.After(5 * time.Minute):
			b.Fatalf("handled %d of %d", handled.Load(), benchRows)
		}
		b.StopTimer()
		if err := bb.Stop(b.Context()); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(benchRows*b.N)/b.Elapsed().Seconds(), "msgs/s")
}
