package sqlite_test

import (
	"context"
	"testing"
	"time"

	"github.com/postbus/bus"
)

// TestListScheduledFarBounds lists with bounds beyond what Unix
// nanoseconds hold: they are clamped, so every row is within them.
func TestListScheduledFarBounds(t *testing.T) {
	t.Parallel()
	p := openTemp(t)
	ctx := context.Background()
	due := time.Now().Add(time.Hour).Truncate(time.Second)
	if err := p.StoreOutgoing(ctx, []bus.OutgoingMessage{{ID: "far", Kind: bus.KindCommand, Envelope: []byte("x"), DueAt: due}}); err != nil {
		t.Fatal(err)
	}
	got, err := p.ListScheduled(ctx, bus.ScheduledQuery{
		DueAfter:  time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC),
		DueBefore: time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC),
	})
	if err != nil || len(got) != 1 || got[0].ID != "far" || !got[0].DueAt.Equal(due) {
		t.Fatalf("ListScheduled between years 1000 and 9999 = %+v, %v; want the row far", got, err)
	}
	if _, err := p.CancelOutgoing(ctx, "far"); err != nil {
		t.Fatal(err)
	}
}
