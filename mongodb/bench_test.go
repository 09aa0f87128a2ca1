package mongodb_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/postbus/bus"
)

// BenchmarkStoreOutgoing measures the scheduling rate: batches of 100
// messages due in an hour, one StoreOutgoing call per batch.
func BenchmarkStoreOutgoing(b *testing.B) {
	const batch = 100
	p := newStore(b, testEnv.client)
	ctx := testCtx(b)
	due := time.Now().Add(time.Hour)
	n := 0
	for b.Loop() {
		msgs := make([]bus.OutgoingMessage, batch)
		for i := range msgs {
			msgs[i] = outgoing(fmt.Sprintf("s-%09d", n), due)
			n++
		}
		if err := p.StoreOutgoing(ctx, msgs); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkClaimDelete measures the dispatch side: claim 100 due messages
// and delete them, as the dispatcher does after the transport accepted them.
func BenchmarkClaimDelete(b *testing.B) {
	const batch = 100
	p := newStore(b, testEnv.client)
	ctx := testCtx(b)
	n := 0
	for b.Loop() {
		b.StopTimer()
		msgs := make([]bus.OutgoingMessage, batch)
		for i := range msgs {
			msgs[i] = outgoing(fmt.Sprintf("c-%09d", n), time.Now().Add(-time.Second))
			n++
		}
		if err := p.StoreOutgoing(ctx, msgs); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		got, err := p.ClaimDueOutgoing(ctx, testTransport, time.Now(), batch, time.Minute)
		if err != nil || len(got) != batch {
			b.Fatalf("claimed %d, %v; want %d", len(got), err, batch)
		}
		mustDelete(b, p, got)
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "msgs/s")
}
