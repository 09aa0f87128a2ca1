package bus_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
)

// While the transport holds the confirms of one batch, the dispatcher
// claims the next (batches of 10 rows): a burst drains at the pace of the slower of the two
// steps, not of their sum. Every row still arrives once, and no row is
// deleted before its own confirm.
func TestClaimOverlapsTheHandOverInFlight(t *testing.T) {
	t.Parallel()
	clock := bustest.NewFakeClock(time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC))
	tr := newBatchTransport()
	tr.gate = make(chan struct{})
	store := bus.NewMemoryPersistence()
	b := bustest.StartBus(t, bus.Config{Endpoint: "sales", Transport: tr, Persistence: store, Clock: clock,
		Dispatcher: bus.DispatcherConfig{BatchSize: 10}}, nil)
	const n = 30
	for i := range n {
		if err := b.Send(ctxT(t), PlaceOrder{ID: "x"}, bus.To("billing"), bus.DeliverAfter(time.Second), bus.WithMessageID(fmt.Sprintf("m-%02d", i))); err != nil {
			t.Fatal(err)
		}
	}
	var size int
	advanceUntil(t, clock, "the first hand-over", func() bool {
		select {
		case size = <-tr.calls:
			return true
		default:
			return false
		}
	})
	if size != 10 {
		t.Fatalf("first SendBatch of %d messages, want 10", size)
	}
	// The second batch is claimed while the first waits for its confirms,
	// and nothing is deleted yet.
	leased := func() (n int) {
		for _, r := range scheduledRows(t, store) {
			if r.Token != "" {
				n++
			}
		}
		return n
	}
	deadline := time.Now().Add(10 * time.Second)
	for leased() < 20 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := leased(); got < 20 {
		t.Fatalf("%d of %d rows claimed while the first batch waited for its confirms, want the first two batches (20)", got, n)
	}
	if got := store.Len(); got != n {
		t.Fatalf("%d rows left while the first batch is unconfirmed, want %d", got, n)
	}
	close(tr.gate)
	advanceUntil(t, clock, "every message", func() bool {
		for len(tr.calls) > 0 {
			<-tr.calls
		}
		return tr.Len("billing") >= n
	})
	waitFor(t, "every row deleted", func() bool { return store.Len() == 0 })
	if got := tr.Len("billing"); got != n {
		t.Errorf("%d messages in billing, want %d: each row once", got, n)
	}
}
