package bustest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/internal/poll"
)

// testIDsByteForByte: IDs that differ only in bytes a careless store would
// clean away (invalid UTF-8, NUL) are never merged into one row, and a row
// the store cannot key never blocks the claim of the others. A store may
// refuse such an ID (StoreOutgoing fails, nothing of that call is stored);
// what it stores it returns byte for byte.
func testIDsByteForByte(t *testing.T, s bus.ScheduledStore) {
	due := time.Now().Add(-time.Second)
	mustStore(t, s, row("good-before", due))
	stored := []string{"good-before"}
	for _, id := range []string{"msg-\xff", "msg-\xfe", "a\x00b", "ab"} {
		if err := s.StoreOutgoing(ctxT(t), []bus.OutgoingMessage{row(id, due)}); err == nil {
			stored = append(stored, id)
		}
	}
	mustStore(t, s, row("good-after", due))
	stored = append(stored, "good-after")
	got, err := s.ClaimDueOutgoing(ctxT(t), suiteTransport, time.Now(), 100, time.Minute)
	if err != nil {
		t.Fatalf("ClaimDueOutgoing with rows %q stored: %v", stored, err)
	}
	have := ids(got)
	slices.Sort(have)
	slices.Sort(stored)
	if !slices.Equal(have, stored) {
		t.Fatalf("claimed %q, want every stored ID once, byte for byte: %q", have, stored)
	}
	mustDelete(t, s, got)
}

// testEqualTimesInDueOrder: rows stored in one call a microsecond apart,
// absolute or relative to the store's clock, are claimed in due order
// whatever their IDs: the dispatcher gives the rows of one ordering key
// due times a microsecond apart to keep them in send order.
func testMicrosecondApartInDueOrder(t *testing.T, s bus.ScheduledStore) {
	const n = 20
	base := time.Now().Add(-time.Second).Truncate(time.Microsecond)
	var msgs []bus.OutgoingMessage
	var want []string
	for i := range n {
		id := fmt.Sprintf("abs-%02d", n-i) // IDs sort against the due order
		msgs = append(msgs, row(id, base.Add(time.Duration(i)*time.Microsecond)))
		want = append(want, id)
	}
	mustStore(t, s, msgs...)
	got := claim(t, s, 100, time.Minute)
	if !slices.Equal(ids(got), want) {
		t.Errorf("claimed %q, want due order %q", ids(got), want)
	}
	mustDelete(t, s, got)

	msgs, want = msgs[:0], want[:0]
	for i := range n {
		id := fmt.Sprintf("rel-%02d", n-i)
		// As the bus stores them: DueAt for a store without a clock of
		// its own, Delay for one with.
		m := row(id, base.Add(time.Duration(i)*time.Microsecond))
		m.Delay = time.Nanosecond + time.Duration(i)*time.Microsecond
		msgs = append(msgs, m)
		want = append(want, id)
	}
	mustStore(t, s, msgs...)
	var all []bus.OutgoingMessage
	poll.Eventually(t, 30*time.Second, func() bool {
		all = append(all, claim(t, s, 100, time.Minute)...)
		return len(all) >= n
	}, "%d rows claimed", n)
	if !slices.Equal(ids(all), want) {
		t.Errorf("claimed %q, want due order %q", ids(all), want)
	}
	mustDelete(t, s, all)
}
