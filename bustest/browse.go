package bustest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/internal/poll"
)

// BrowserFactory returns a new, empty, isolated scheduled store that
// operators can browse, for one test case.
type BrowserFactory func(t *testing.T) bus.ScheduledBrowser

// ScheduledBrowserTests runs the bus.ScheduledBrowser contract against
// stores made by newStore: listing by due time and type with keyset
// paging, get by ID, the backlog statistics, the due-time histogram and
// send-now. Like ScheduledMessageTests it uses wall-clock times, and checks
// after each case that no row was left behind.
func ScheduledBrowserTests(t *testing.T, newStore BrowserFactory) {
	cases := []storeCase[bus.ScheduledBrowser]{
		{"ListByDueThenIDWithPaging", testBrowseList},
		{"ListFiltersByTypeAndDue", testBrowseFilters},
		{"GetReturnsEveryField", testBrowseGet},
		{"StatsCountAndOverdue", testBrowseStats},
		{"OverdueIsCapped", testBrowseOverdueCap},
		{"Histogram", testBrowseHistogram},
		{"SendNow", testBrowseSendNow},
	}
	runStoreCases(t, newStore, cases, func(t *testing.T, s bus.ScheduledBrowser) { assertEmpty(t, s) })
}

// typedRow is a row of the message type typ.
func typedRow(id, typ string, due time.Time) bus.OutgoingMessage {
	r := row(id, due)
	r.Type = typ
	return r
}

func list(t *testing.T, s bus.ScheduledBrowser, q bus.ScheduledQuery) []bus.OutgoingMessage {
	t.Helper()
	got, err := s.ListScheduled(ctxT(t), q)
	if err != nil {
		t.Fatalf("ListScheduled(%+v): %v", q, err)
	}
	return got
}

// listAll pages through q, limit rows at a time.
func listAll(t *testing.T, s bus.ScheduledBrowser, q bus.ScheduledQuery, limit int) []string {
	t.Helper()
	q.Limit = limit
	var out []string
	for range 1000 {
		page := list(t, s, q)
		if len(page) > limit {
			t.Fatalf("page of %d rows, over the limit %d", len(page), limit)
		}
		out = append(out, ids(page)...)
		if len(page) < limit {
			return out
		}
		last := page[len(page)-1]
		q.AfterDue, q.AfterID = last.DueAt, last.ID
	}
	t.Fatal("paging does not end")
	return nil
}

func cancelAll(t *testing.T, s bus.ScheduledStore, msgs []bus.OutgoingMessage) {
	t.Helper()
	for _, m := range msgs {
		mustCancel(t, s, m.ID)
	}
}

// base is a due time an hour ahead, on a whole second, so rows stay
// unclaimable and every store keeps the times exactly.
func base() time.Time { return time.Now().Add(time.Hour).Truncate(time.Second) }

func testBrowseList(t *testing.T, s bus.ScheduledBrowser) {
	b := base()
	// Equal due times come out by ID.
	msgs := []bus.OutgoingMessage{
		typedRow("e", "T1", b.Add(3*time.Second)), typedRow("a", "T1", b.Add(time.Second)),
		typedRow("c", "T2", b.Add(2*time.Second)), typedRow("b", "T2", b.Add(2*time.Second)),
		typedRow("d", "T1", b.Add(2*time.Second)), typedRow("f", "T2", b.Add(4*time.Second)),
		typedRow("g", "T1", b.Add(4*time.Second)),
	}
	mustStore(t, s, msgs...)
	want := []string{"a", "b", "c", "d", "e", "f", "g"}
	for _, limit := range []int{1, 2, 3, 7, 100} {
		if got := listAll(t, s, bus.ScheduledQuery{}, limit); !slices.Equal(got, want) {
			t.Errorf("pages of %d = %v, want %v", limit, got, want)
		}
	}
	if got := ids(list(t, s, bus.ScheduledQuery{})); !slices.Equal(got, want) {
		t.Errorf("Limit 0 (100) = %v, want %v", got, want)
	}
	for _, m := range list(t, s, bus.ScheduledQuery{Limit: 1}) {
		if m.ID != "a" || m.Type != "T1" || m.Kind != bus.KindCommand || !m.DueAt.Equal(b.Add(time.Second)) || m.Transport != suiteTransport {
			t.Errorf("listed row = %+v, want a of type T1 due %v", m, b.Add(time.Second))
		}
		if _, err := bus.UnmarshalEnvelope(m.Envelope); err != nil {
			t.Errorf("listed envelope does not decode: %v", err)
		}
	}
	cancelAll(t, s, msgs)
}

func testBrowseFilters(t *testing.T, s bus.ScheduledBrowser) {
	b := base()
	var msgs []bus.OutgoingMessage
	for i := range 20 {
		typ := "orders.Ship"
		if i%3 == 0 {
			typ = "billing.Invoice"
		}
		msgs = append(msgs, typedRow(fmt.Sprintf("f-%02d", i), typ, b.Add(time.Duration(i)*time.Minute)))
	}
	mustStore(t, s, msgs...)
	var wantType, wantWindow, wantBoth []string
	for i, m := range msgs {
		in := i >= 5 && i < 15
		if m.Type == "billing.Invoice" {
			wantType = append(wantType, m.ID)
			if in {
				wantBoth = append(wantBoth, m.ID)
			}
		}
		if in {
			wantWindow = append(wantWindow, m.ID)
		}
	}
	window := bus.ScheduledQuery{DueAfter: b.Add(5 * time.Minute), DueBefore: b.Add(15 * time.Minute)}
	if got := listAll(t, s, bus.ScheduledQuery{Type: "billing.Invoice"}, 2); !slices.Equal(got, wantType) {
		t.Errorf("Type filter = %v, want %v", got, wantType)
	}
	if got := listAll(t, s, window, 3); !slices.Equal(got, wantWindow) {
		t.Errorf("due window [5m, 15m) = %v, want %v", got, wantWindow)
	}
	window.Type = "billing.Invoice"
	if got := listAll(t, s, window, 1); !slices.Equal(got, wantBoth) {
		t.Errorf("type and window = %v, want %v", got, wantBoth)
	}
	if got := list(t, s, bus.ScheduledQuery{Type: "no.Such"}); len(got) != 0 {
		t.Errorf("unknown type listed %v", ids(got))
	}
	cancelAll(t, s, msgs)
}

func testBrowseGet(t *testing.T, s bus.ScheduledBrowser) {
	want := typedRow("get-me", "orders.Ship", base())
	want.Kind = bus.KindEvent
	mustStore(t, s, want)
	got, ok, err := s.GetScheduled(ctxT(t), "get-me")
	if err != nil || !ok {
		t.Fatalf("GetScheduled = %v, %v; want the row", ok, err)
	}
	if got.ID != want.ID || got.Type != want.Type || got.Kind != want.Kind || string(got.Envelope) != string(want.Envelope) ||
		!got.DueAt.Equal(want.DueAt) || got.Transport != want.Transport || got.Failures != 0 || got.Token != "" {
		t.Errorf("GetScheduled = %+v, want %+v", got, want)
	}
	if env, err := bus.UnmarshalEnvelope(got.Envelope); err != nil || env.ID != "get-me" {
		t.Errorf("envelope decodes to %v, %v", env, err)
	}
	if _, ok, err := s.GetScheduled(ctxT(t), "never-stored"); err != nil || ok {
		t.Errorf("GetScheduled of an unknown ID = %v, %v; want false, nil", ok, err)
	}
	mustCancel(t, s, "get-me")
}

func stats(t *testing.T, s bus.ScheduledBrowser) bus.ScheduledStats {
	t.Helper()
	st, err := s.StatsScheduled(ctxT(t), time.Now())
	if err != nil {
		t.Fatalf("StatsScheduled: %v", err)
	}
	return st
}

func testBrowseStats(t *testing.T, s bus.ScheduledBrowser) {
	if st := stats(t, s); st.Count != 0 || st.Overdue != 0 || !st.OldestOverdue.IsZero() {
		t.Errorf("stats of an empty store = %+v", st)
	}
	now := time.Now().Truncate(time.Second)
	msgs := []bus.OutgoingMessage{
		row("late-a", now.Add(-30*time.Second)), row("late-b", now.Add(-20*time.Second)),
		row("late-c", now.Add(-10*time.Second)), row("later-d", now.Add(time.Hour)), row("later-e", now.Add(2*time.Hour)),
	}
	mustStore(t, s, msgs...)
	st := stats(t, s)
	if st.Count != 5 || st.Estimated || st.Overdue != 3 || !st.OldestOverdue.Equal(now.Add(-30*time.Second)) {
		t.Errorf("stats = %+v; want 5 rows (exact), 3 overdue, oldest due %v", st, now.Add(-30*time.Second))
	}
	// A leased row is being delivered: not overdue.
	held := claim(t, s, 1, time.Hour)
	if !slices.Equal(ids(held), []string{"late-a"}) {
		t.Fatalf("claimed %v, want [late-a]", ids(held))
	}
	st = stats(t, s)
	if st.Count != 5 || st.Overdue != 2 || !st.OldestOverdue.Equal(now.Add(-20*time.Second)) {
		t.Errorf("stats with late-a leased = %+v; want 5 rows, 2 overdue, oldest due %v", st, now.Add(-20*time.Second))
	}
	mustDelete(t, s, held)
	cancelAll(t, s, msgs[1:])
}

func testBrowseOverdueCap(t *testing.T, s bus.ScheduledBrowser) {
	n := bus.OverdueCap + 50
	past := time.Now().Add(-time.Minute)
	msgs := rows("cap", n, func(i int) time.Time { return past.Add(time.Duration(i) * time.Millisecond) })
	for i := 0; i < n; i += 2000 {
		mustStore(t, s, msgs[i:min(i+2000, n)]...)
	}
	st := stats(t, s)
	if st.Count != int64(n) && !st.Estimated {
		t.Errorf("Count = %d (exact), want %d", st.Count, n)
	}
	if st.Overdue != bus.OverdueCap {
		t.Errorf("Overdue = %d, want the cap %d", st.Overdue, bus.OverdueCap)
	}
	for left := n; left > 0; {
		got := claim(t, s, 1000, time.Hour)
		if len(got) == 0 {
			t.Fatalf("%d rows left but none claimable", left)
		}
		mustDelete(t, s, got)
		left -= len(got)
	}
}

func testBrowseHistogram(t *testing.T, s bus.ScheduledBrowser) {
	b := base()
	msgs := []bus.OutgoingMessage{
		row("h-before", b.Add(-time.Second)), row("h-0a", b), row("h-0b", b.Add(30*time.Second)),
		row("h-1", b.Add(time.Minute)), row("h-4", b.Add(5*time.Minute-time.Second)), row("h-after", b.Add(5*time.Minute)),
	}
	mustStore(t, s, msgs...)
	got, err := s.DueHistogram(ctxT(t), b, time.Minute, 5)
	if err != nil {
		t.Fatalf("DueHistogram: %v", err)
	}
	if want := []int64{2, 1, 0, 0, 1}; !slices.Equal(got, want) {
		t.Errorf("DueHistogram = %v, want %v", got, want)
	}
	got, err = s.DueHistogram(ctxT(t), b.Add(-time.Hour), 2*time.Hour, 1)
	if err != nil || !slices.Equal(got, []int64{6}) {
		t.Errorf("one wide bucket = %v, %v; want [6]", got, err)
	}
	for _, bad := range []struct {
		width time.Duration
		n     int
	}{{0, 5}, {time.Minute, 0}, {-time.Minute, 3}, {time.Minute, bus.MaxHistogramBuckets + 1}} {
		if _, err := s.DueHistogram(ctxT(t), b, bad.width, bad.n); !errors.Is(err, bus.ErrInvalidQuery) {
			t.Errorf("DueHistogram(%v, %d) error = %v, want ErrInvalidQuery", bad.width, bad.n, err)
		}
	}
	cancelAll(t, s, msgs)
}

func testBrowseSendNow(t *testing.T, s bus.ScheduledBrowser) {
	b := base()
	mustStore(t, s, row("soon", b), row("later", b.Add(time.Hour)), row("held", time.Now().Add(-time.Second)))
	held := claim(t, s, 10, time.Hour)
	if !slices.Equal(ids(held), []string{"held"}) {
		t.Fatalf("claimed %v, want [held]", ids(held))
	}
	if ok, err := s.SendNow(ctxT(t), "held"); err != nil || ok {
		t.Errorf("SendNow of a leased row = %v, %v; want false, nil", ok, err)
	}
	if ok, err := s.SendNow(ctxT(t), "never-stored"); err != nil || ok {
		t.Errorf("SendNow of an unknown row = %v, %v; want false, nil", ok, err)
	}
	before := time.Now()
	if ok, err := s.SendNow(ctxT(t), "soon"); err != nil || !ok {
		t.Fatalf("SendNow = %v, %v; want true, nil", ok, err)
	}
	if g, _, _ := s.GetScheduled(ctxT(t), "soon"); g.DueAt.After(time.Now().Add(time.Minute)) || g.DueAt.Before(before.Add(-time.Minute)) {
		t.Errorf("after SendNow the row is due %v, want about now", g.DueAt)
	}
	got := waitClaimIDs(t, s, 1)
	if !slices.Equal(ids(got), []string{"soon"}) {
		t.Fatalf("claimed %v after SendNow, want [soon]", ids(got))
	}
	if g, ok, err := s.GetScheduled(ctxT(t), "later"); err != nil || !ok || !g.DueAt.Equal(b.Add(time.Hour)) {
		t.Errorf("the other row = %+v, %v, %v; want it untouched", g, ok, err)
	}
	mustDelete(t, s, append(held, got...))
	mustCancel(t, s, "later")
}

// waitClaimIDs claims until n rows came, for up to 10 s: a store with a
// clock of its own may run a little behind the test's.
func waitClaimIDs(t *testing.T, s bus.ScheduledStore, n int) []bus.OutgoingMessage {
	t.Helper()
	var out []bus.OutgoingMessage
	poll.Eventually(t, 10*time.Second, func() bool {
		out = append(out, claim(t, s, n-len(out), time.Hour)...)
		return len(out) >= n
	}, "%d claimable rows", n)
	return out
}
