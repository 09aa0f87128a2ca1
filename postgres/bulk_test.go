package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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

// BenchmarkStoreOutgoingBulk stores 10,000 and 100,000 rows due in an hour
// per call: the shape of a SendBatch of that many messages, copied in.
//
//	go test -run '^$' -bench 'StoreOutgoingBulk|RawCopyCeiling' -benchtime 5x
func BenchmarkStoreOutgoingBulk(b *testing.B) {
	benchBulk(b, func(b *testing.B, schema string) func(context.Context, []bus.OutgoingMessage) error {
		return newStore(b, testPool(b), postgres.Options{Schema: schema}).StoreOutgoing
	})
}

// BenchmarkRawCopyCeiling is what pgx alone reaches with the same rows:
// one COPY of the same columns straight into a table made by Setup, in a
// transaction. No bus, no savepoint, no clock read: the ceiling of a bulk
// store on this server, set by its index maintenance and WAL.
func BenchmarkRawCopyCeiling(b *testing.B) {
	benchBulk(b, func(b *testing.B, schema string) func(context.Context, []bus.OutgoingMessage) error {
		pool := testPool(b)
		newStore(b, pool, postgres.Options{Schema: schema})
		table := pgx.Identifier{schema, postgres.DefaultTable}
		columns := []string{"id", "kind", "envelope", "due_at", "available_at", "transport", "message_type"}
		return func(ctx context.Context, msgs []bus.OutgoingMessage) error {
			rows := make([][]any, len(msgs))
			for i, m := range msgs {
				rows[i] = []any{m.ID, int16(m.Kind), m.Envelope, m.DueAt, m.DueAt, m.Transport, m.Type}
			}
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				_, err := tx.CopyFrom(ctx, table, columns, pgx.CopyFromRows(rows))
				return err
			})
		}
	})
}

// benchBulk times store with calls of 10,000 and 100,000 rows (built
// beforehand), on a store in a fresh schema that open makes, and reports
// rows/s.
func benchBulk(b *testing.B, open func(b *testing.B, schema string) func(context.Context, []bus.OutgoingMessage) error) {
	for _, size := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("rows=%d", size), func(b *testing.B) {
			store := open(b, freshSchema(b, testPool(b)))
			due := time.Now().Add(time.Hour)
			n := 0
			for b.Loop() {
				b.StopTimer()
				msgs := bulkRows(fmt.Sprintf("b%d", n), size, due)
				b.StartTimer()
				if err := store(b.Context(), msgs); err != nil {
					b.Fatal(err)
				}
				n++
			}
			b.ReportMetric(float64(n*size)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}
