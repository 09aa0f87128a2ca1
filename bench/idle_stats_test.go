package main

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/postbus/bus"
)

// TestPostgresIdleCountExcludesEarlierInserts stores rows through the
// run's pool, then counts the scans of the run's tables across a quiet
// window longer than a PostgreSQL backend holds back its statistics (ten
// seconds). Nothing runs in the window, so the count must be 0: the scans
// of the INSERTs (an index check per row) belong to the scheduling before
// it, not to the idle figure of the backlog workload.
func TestPostgresIdleCountExcludesEarlierInserts(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	o := &options{postgresURL: postgresURL(t), logger: slog.New(slog.DiscardHandler), run: newRunID(), workload: "backlog"}
	pd := postgresDriver()
	p, cleanup, err := pd.open(ctx, o, o.run, true)
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	store := p.(bus.ScheduledStore)
	if err := p.(interface{ Setup(context.Context) error }).Setup(ctx); err != nil {
		t.Fatal(err)
	}
	for round := range 4 {
		msgs := make([]bus.OutgoingMessage, 200)
		for i := range msgs {
			msgs[i] = bus.OutgoingMessage{ID: fmt.Sprintf("idle-%d-%03d", round, i), Kind: bus.KindCommand,
				Envelope: []byte("x"), DueAt: time.Now().Add(time.Hour), Transport: "memory"}
		}
		if err := store.StoreOutgoing(ctx, msgs); err != nil {
			t.Fatal(err)
		}
	}
	q0, err := pd.idleQueries(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(11 * time.Second) // past PGSTAT_IDLE_INTERVAL
	q1, err := pd.idleQueries(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if q1 != q0 {
		t.Errorf("%d scans counted across a window in which nothing ran, want 0", q1-q0)
	}
}
