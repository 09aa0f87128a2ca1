package bustest

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/internal/poll"
)

// The bulk case of the scheduled-message contract: what Bus.SendBatch
// relies on when it stores a whole batch with one StoreOutgoing call.

// storeClock reads the store's clock, or the local one for a store without
// a clock of its own.
func storeClock(t *testing.T, s bus.ScheduledStore) time.Time {
	t.Helper()
	c, ok := s.(bus.ClockedStore)
	if !ok {
		return time.Now()
	}
	now, err := c.StoreNow(ctxT(t))
	if err != nil {
		t.Fatalf("StoreNow: %v", err)
	}
	return now
}

// bulkRow is row i of the bulk case: "bulk-%06d".
func bulkRow(i int, due time.Time) bus.OutgoingMessage {
	return row(fmt.Sprintf("bulk-%06d", i), due)
}

// testBulkStore stores 10,000 rows in one call, 1,000 of them due a delay
// after the store's now; stores 3,000 again, 2,000 of them already stored
// (changed, which must not take) and one named twice; has a call with one
// bad row refused whole; then claims until every row came, each once, none
// before its due time, each with the due time and envelope it was first
// stored with.
func testBulkStore(t *testing.T, s bus.ScheduledStore) {
	const (
		n       = 10_000
		delayed = 1_000 // the last rows of the first call
		delay   = time.Second
	)
	now := time.Now()
	past := func(i int) time.Time { return now.Add(-time.Duration(2*n-i) * time.Microsecond) }
	first := make([]bus.OutgoingMessage, n)
	for i := range first {
		first[i] = bulkRow(i, past(i))
		if i >= n-delayed {
			// A store with a clock must use Delay (due a second after it
			// stored the row); one without uses DueAt, the same instant.
			first[i].DueAt, first[i].Delay = now.Add(delay), delay
		}
	}
	before := storeClock(t, s)
	mustStore(t, s, first...)
	after := storeClock(t, s)

	// Again: rows 8,000 to 10,999, the first 2,000 of them already stored
	// and now changed (another type, due in an hour), and one row twice.
	var second []bus.OutgoingMessage
	for i := n - 2_000; i < n+1_000; i++ {
		m := bulkRow(i, past(i))
		if i < n {
			m = bulkRow(i, time.Now().Add(time.Hour))
			m.Type = "bustest.Changed"
		}
		second = append(second, m)
	}
	second = append(second, second[2_500]) // row 10,500 again
	mustStore(t, s, second...)

	// A call with one row the store must refuse stores none of its rows.
	bad := rows("bulk-bad", 1_000, past)
	bad = append(bad, row("", past(0)))
	if err := s.StoreOutgoing(ctxT(t), bad); err == nil {
		t.Fatal("StoreOutgoing with a row without an ID succeeded, want an error and nothing stored")
	}

	want := make(map[string]bus.OutgoingMessage, n+1_000)
	for _, m := range append(first, second[2_000:]...) {
		want[m.ID] = m
	}
	seen := make(map[string]bool, len(want))
	poll.Eventually(t, time.Minute, func() bool {
		for {
			got := claim(t, s, 1_000, time.Hour)
			claimedBy := storeClock(t, s)
			for _, m := range got {
				checkBulkRow(t, s, m, want, seen, claimedBy, before.Add(delay), after.Add(delay))
			}
			if len(got) == 0 {
				return len(seen) >= len(want)
			}
			mustDelete(t, s, got)
		}
	}, "all %d rows claimed", len(want))
}

// checkBulkRow checks one claimed row of testBulkStore: expected, claimed
// once, due no later than the claim, with the due time and envelope it was
// first stored with (a delayed one, in a store with a clock, due within
// [from, to] on that clock).
func checkBulkRow(t *testing.T, s bus.ScheduledStore, m bus.OutgoingMessage, want map[string]bus.OutgoingMessage, seen map[string]bool, claimedBy, from, to time.Time) {
	t.Helper()
	w, ok := want[m.ID]
	switch {
	case strings.HasPrefix(m.ID, "bulk-bad"):
		t.Fatalf("row %s of the refused call was stored", m.ID)
	case !ok:
		t.Fatalf("claimed row %s, which was never stored", m.ID)
	case seen[m.ID]:
		t.Fatalf("row %s claimed twice", m.ID)
	case m.DueAt.After(claimedBy):
		t.Fatalf("row %s claimed before it was due (due %v, store clock after the claim %v)", m.ID, m.DueAt, claimedBy)
	case m.Type != w.Type || !bytes.Equal(m.Envelope, w.Envelope):
		t.Fatalf("row %s has type %q: a second store of its ID replaced the first row", m.ID, m.Type)
	}
	seen[m.ID] = true
	if _, clocked := s.(bus.ClockedStore); w.Delay == 0 || !clocked {
		if d := m.DueAt.Sub(w.DueAt); d < -time.Microsecond || d > time.Microsecond {
			t.Fatalf("row %s due %v, want %v", m.ID, m.DueAt, w.DueAt)
		}
		return
	}
	const slack = time.Millisecond // microsecond storage, millisecond server clocks
	if m.DueAt.Before(from.Add(-slack)) || m.DueAt.After(to.Add(slack)) {
		t.Fatalf("delayed row %s due %v, want between %v and %v (store's now at the call + delay)", m.ID, m.DueAt, from, to)
	}
}
