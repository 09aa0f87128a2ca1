package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/postgres"
)

// bulkRows returns n rows named prefix-%06d, due at due.
func bulkRows(prefix string, n int, due time.Time) []bus.OutgoingMessage {
	out := make([]bus.OutgoingMessage, n)
	for i := range out {
		out[i] = outgoing(fmt.Sprintf("%s-%06d", prefix, i), due)
	}
	return out
}

// A copied call notifies once, with its earliest due time, and only for
// new rows.
func TestBulkStoreNotifiesOnce(t *testing.T) {
	t.Parallel()
	schema, w := listener(t)
	sender := newStore(t, newPool(t, 4), postgres.Options{Schema: schema, NotifyWithin: 2 * time.Hour})

	ctx := ctxTimeout(t, time.Minute)
	base := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	rows := bulkRows("bulk", 3000, base.Add(time.Minute))
	rows[1234].DueAt = base
	for _, call := range [][]bus.OutgoingMessage{rows, rows} { // the second call stores nothing new
		if err := sender.StoreOutgoing(ctx, call); err != nil {
			t.Fatal(err)
		}
	}
	store(t, sender, ctx, "marker", base.Add(3*time.Second))
	for _, want := range []time.Time{base, base.Add(3 * time.Second)} {
		if got := w.next(t, "notification"); !got.Equal(want) {
			t.Fatalf("woken for %v, want %v", got, want)
		}
	}
	if n := storedRows(t, testPool(t), sender); n != 3001 {
		t.Errorf("stored %d rows, want 3001", n)
	}
}

// SendBatch in a caller's transaction: nothing after a rollback; after a
// commit, every row of two batches, each sent twice in the same
// transaction (copied, then through the staging table, twice).
func TestSendBatchInCallerTx(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	store := newStore(t, pool, postgres.Options{})
	b := bustest.StartBus(t, bus.Config{Endpoint: "bulk", Persistence: store, SendOnly: true, Outbox: bus.OutboxConfig{Enabled: true}}, nil)
	batch := func(prefix string, n int) *bus.Batch {
		var bt bus.Batch
		for i := range n {
			bt.Send(bulkJob{N: i}, bus.To("bulk"), bus.DeliverAfter(time.Hour), bus.WithMessageID(fmt.Sprintf("%s-%d", prefix, i)))
		}
		return &bt
	}
	ctx := ctxTimeout(t, time.Minute)
	for _, commit := range []bool{false, true} {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, prefix := range []string{"a", "b", "a", "b"} {
			if err := b.SendBatch(postgres.WithTx(ctx, tx), batch(prefix, 1500)); err != nil {
				t.Fatal(err)
			}
		}
		if commit {
			err = tx.Commit(ctx)
		} else {
			err = tx.Rollback(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		want := 0
		if commit {
			want = 3000
		}
		if n := storedRows(t, pool, store); n != want {
			t.Fatalf("commit %v: %d rows stored, want %d", commit, n, want)
		}
	}
}

// bulkJob is the message of the bulk tests.
type bulkJob struct{ N int }

// A handler with the outbox on sends a batch large enough to be copied in
// the handling's transaction; its immediate messages are dispatched after
// commit, its delayed ones kept, each once.
func TestSendBatchInOutboxHandler(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	store := newStore(t, pool, postgres.Options{})
	jobs := bustest.NewRecorder[bulkJob]()
	var b *bus.Bus
	b = bustest.StartBus(t, bus.Config{Endpoint: "bulk", Persistence: store, Outbox: bus.OutboxConfig{Enabled: true}}, func(bb *bus.Bus) {
		_ = bus.Handle(bb, jobs.Handler)
		_ = bus.Handle(bb, func(ctx context.Context, m PlaceOrder) error {
			if _, ok := postgres.Tx(ctx); !ok {
				return fmt.Errorf("no handling transaction")
			}
			var bt bus.Batch
			for i := range 1200 {
				opt := bus.DeliverAfter(0)
				if i%2 == 1 {
					opt = bus.DeliverAfter(time.Hour)
				}
				bt.Send(bulkJob{N: i}, bus.To("bulk"), opt)
			}
			return b.SendBatch(ctx, &bt)
		})
	})
	if err := b.Send(ctxTimeout(t, time.Minute), PlaceOrder{OrderID: "1"}, bus.To("bulk")); err != nil {
		t.Fatal(err)
	}
	jobs.WaitFor(t, 600)
	time.Sleep(200 * time.Millisecond)
	seen := map[int]bool{}
	for _, m := range jobs.Messages() {
		if m.N%2 == 1 || seen[m.N] {
			t.Fatalf("job %d delivered (again, or before its hour)", m.N)
		}
		seen[m.N] = true
	}
	if n := storedRows(t, pool, store); n != 600 {
		t.Errorf("%d rows stored, want the 600 delayed jobs", n)
	}
}

// BenchmarkStoreOutgoingBulk stores 10,000 rows due in an hour per call:
// the shape of a SendBatch of 10,000 messages.
func BenchmarkStoreOutgoingBulk(b *testing.B) {
	bustest.BenchmarkStoreBulk(b, func(b *testing.B) bus.ScheduledStore {
		return newStore(b, testPool(b), postgres.Options{})
	}, 10_000)
}
