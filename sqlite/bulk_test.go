package sqlite_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/sqlite"
)

// BenchmarkStoreOutgoingBulk stores 10,000 rows due in an hour per call:
// the shape of a SendBatch of 10,000 messages, in one transaction.
func BenchmarkStoreOutgoingBulk(b *testing.B) {
	bustest.BenchmarkStoreBulk(b, func(b *testing.B) bus.ScheduledStore { return openTemp(b) }, 10_000)
}

// SendBatch in a caller's transaction: nothing after a rollback, every
// message after a commit.
func TestSendBatchInCallerTx(t *testing.T) {
	t.Parallel()
	p := openTemp(t)
	b := bustest.StartBus(t, bus.Config{Endpoint: "bulk", Persistence: p, SendOnly: true, Outbox: bus.OutboxConfig{Enabled: true}}, nil)
	ctx := t.Context()
	for _, commit := range []bool{false, true} {
		var batch bus.Batch
		for i := range 500 {
			batch.Send(bulkJob{N: i}, bus.To("bulk"), bus.DeliverAfter(time.Hour), bus.WithMessageID(fmt.Sprintf("job-%d", i)))
		}
		tx, err := p.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.SendBatch(sqlite.WithTx(ctx, tx), &batch); err != nil {
			t.Fatal(err)
		}
		if commit {
			err = tx.Commit()
		} else {
			err = tx.Rollback()
		}
		if err != nil {
			t.Fatal(err)
		}
		var n, want int
		if err := p.DB().QueryRowContext(ctx, "SELECT count(*) FROM outgoing_messages").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if commit {
			want = 500
		}
		if n != want {
			t.Fatalf("commit %v: %d rows stored, want %d", commit, n, want)
		}
	}
}

// bulkJob is the message of the bulk tests.
type bulkJob struct{ N int }
