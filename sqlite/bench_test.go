package sqlite_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/postbus/bus"
)

const benchRows = 100_000

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
		out[i] = bus.OutgoingMessage{ID: id, Kind: bus.KindCommand, Envelope: bus.MarshalEnvelope(env), DueAt: env.DueAt}
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
					got, err := p.ClaimDueOutgoing(b.Context(), time.Now(), batch, time.Minute)
					if err != nil {
						b.Fatal(err)
					}
					if len(got) == 0 {
						break
					}
					ids := make([]string, len(got))
					for i, m := range got {
						ids[i] = m.ID
					}
					if err := p.DeleteOutgoing(b.Context(), ids); err != nil {
						b.Fatal(err)
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
