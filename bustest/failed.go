package bustest

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/postbus/bus"
)

// FailedStoreFactory returns a new, empty, isolated failed-message store for
// one test case.
type FailedStoreFactory func(t *testing.T) bus.FailedStore

// FailedStoreTests runs the bus.FailedStore contract against stores made by
// newStore: round trip, repeated failures of one message, listing with
// filters and keyset paging, counting, grouping and deletion. Each case
// deletes what it stored, and the suite checks that the store is empty
// afterwards.
func FailedStoreTests(t *testing.T, newStore FailedStoreFactory) {
	cases := []storeCase[bus.FailedStore]{
		{"RoundTripKeepsEveryField", testFailedRoundTrip},
		{"RepeatedFailuresUpdate", testFailedRepeat},
		{"RepeatsWithinOneBatch", testFailedRepeatBatch},
		{"ListMostRecentFirstWithPaging", testFailedList},
		{"FiltersAndCount", testFailedFilters},
		{"Groups", testFailedGroups},
		{"Delete", testFailedDelete},
		{"LargeBatch", testFailedLargeBatch},
	}
	runStoreCases(t, newStore, cases, func(t *testing.T, s bus.FailedStore) {
		if n, err := s.CountFailed(ctxT(t), bus.FailedQuery{}); err != nil || n != 0 {
			t.Errorf("store not empty after the case (%d messages left, err: %v)", n, err)
		}
	})
}

// failedAt is the failed copy of a message of type typ that failed at
// endpoint with reason at time at, as the ingester stores it.
func failedAt(id, typ, endpoint, reason string, at time.Time) bus.FailedMessage {
	env := &bus.Envelope{
		ID: id, Type: typ, Kind: bus.KindCommand, Body: []byte(`{"id":"` + id + `"}`),
		ContentType: "application/json", Destination: endpoint, Source: "bustest", CorrelationID: "corr-" + id,
		SentAt: at.Add(-time.Minute).UTC(),
		Headers: map[string]string{
			bus.HeaderFailureReason: reason, bus.HeaderFailureKind: "handler", bus.HeaderFailureEndpoint: endpoint,
			bus.HeaderFailureQueue: endpoint, bus.HeaderFailureTime: at.UTC().Format(time.RFC3339Nano),
			bus.HeaderFailureAttempts: "5",
		},
	}
	return bus.FailedFromEnvelope(env, time.Now())
}

// ftime is a failure time on a whole millisecond, which every store keeps
// exactly.
func ftime(offset time.Duration) time.Time {
	return time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).Add(offset)
}

func storeFailed(t *testing.T, s bus.FailedStore, msgs ...bus.FailedMessage) {
	t.Helper()
	if err := s.StoreFailed(ctxT(t), msgs); err != nil {
		t.Fatalf("StoreFailed: %v", err)
	}
}

func getFailed(t *testing.T, s bus.FailedStore, id string) bus.FailedMessage {
	t.Helper()
	m, ok, err := s.GetFailed(ctxT(t), id)
	if err != nil || !ok {
		t.Fatalf("GetFailed(%s) = %v, %v; want the message", id, ok, err)
	}
	return m
}

func deleteFailed(t *testing.T, s bus.FailedStore, ids ...string) {
	t.Helper()
	if n, err := s.DeleteFailed(ctxT(t), ids); err != nil || n != len(ids) {
		t.Fatalf("DeleteFailed(%d ids) = %d, %v", len(ids), n, err)
	}
}

func failedIDs(msgs []bus.FailedMessage) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}

func sameFailed(a, b bus.FailedMessage) bool {
	return a.ID == b.ID && a.Type == b.Type && a.Endpoint == b.Endpoint && a.Queue == b.Queue && a.Kind == b.Kind &&
		a.Reason == b.Reason && a.Group == b.Group && a.Attempts == b.Attempts && a.Failures == b.Failures &&
		a.FirstFailed.Equal(b.FirstFailed) && a.LastFailed.Equal(b.LastFailed) && string(a.Envelope) == string(b.Envelope)
}

func testFailedRoundTrip(t *testing.T, s bus.FailedStore) {
	want := failedAt("rt-1", "orders.Ship", "shipping", `order "A-17" not found after 3 tries`, ftime(1500*time.Millisecond))
	want.Queue = "shipping-input"
	want.Kind = "poison"
	storeFailed(t, s, want)
	got := getFailed(t, s, "rt-1")
	if !sameFailed(got, want) {
		t.Errorf("GetFailed = %+v,\nwant %+v", got, want)
	}
	if got.Failures != 1 || got.Attempts != 5 || got.Group == "" {
		t.Errorf("Failures, Attempts, Group = %d, %d, %q; want 1, 5, a group", got.Failures, got.Attempts, got.Group)
	}
	if env, err := bus.UnmarshalEnvelope(got.Envelope); err != nil || env.Header(bus.HeaderFailureEndpoint) != "shipping" {
		t.Errorf("stored envelope = %v, %v; want the failed copy with its headers", env, err)
	}
	if _, ok, err := s.GetFailed(ctxT(t), "never-stored"); err != nil || ok {
		t.Errorf("GetFailed of an unknown ID = %v, %v; want false, nil", ok, err)
	}
	deleteFailed(t, s, "rt-1")
}

func testFailedRepeat(t *testing.T, s bus.FailedStore) {
	first := failedAt("rep", "orders.Ship", "shipping", "timeout after 30s", ftime(0))
	storeFailed(t, s, first)
	storeFailed(t, s, first) // the same failure delivered twice
	if got := getFailed(t, s, "rep"); !sameFailed(got, first) {
		t.Errorf("after a duplicate delivery: %+v, want it unchanged", got)
	}
	second := failedAt("rep", "orders.Ship", "shipping", "connection refused", ftime(time.Minute))
	second.Attempts = 7
	storeFailed(t, s, second)
	got := getFailed(t, s, "rep")
	if got.Failures != 2 || !got.FirstFailed.Equal(ftime(0)) || !got.LastFailed.Equal(ftime(time.Minute)) ||
		got.Reason != "connection refused" || got.Attempts != 7 || got.Group != second.Group || string(got.Envelope) != string(second.Envelope) {
		t.Errorf("after a second failure: %+v; want 2 failures, first %v, the second's reason, attempts, group and envelope", got, ftime(0))
	}
	// A failure older than the stored one arrives late: it counts, moves
	// FirstFailed back, and changes nothing else.
	old := failedAt("rep", "orders.Ship", "shipping", "disk full", ftime(-time.Minute))
	storeFailed(t, s, old)
	got = getFailed(t, s, "rep")
	if got.Failures != 3 || !got.FirstFailed.Equal(ftime(-time.Minute)) || !got.LastFailed.Equal(ftime(time.Minute)) || got.Reason != "connection refused" {
		t.Errorf("after a late older failure: %+v; want 3 failures from %v, latest reason kept", got, ftime(-time.Minute))
	}
	deleteFailed(t, s, "rep")
}

func testFailedRepeatBatch(t *testing.T, s bus.FailedStore) {
	a := failedAt("dup", "T", "e", "boom 1", ftime(0))
	b := failedAt("dup", "T", "e", "boom 2", ftime(time.Second))
	storeFailed(t, s, a, a, b, failedAt("other", "T", "e", "boom", ftime(0)))
	got := getFailed(t, s, "dup")
	if got.Failures != 2 || got.Reason != "boom 2" || !got.FirstFailed.Equal(ftime(0)) || !got.LastFailed.Equal(ftime(time.Second)) {
		t.Errorf("one batch with a message twice (and a duplicate): %+v; want 2 failures, reason of the latest", got)
	}
	deleteFailed(t, s, "dup", "other")
}

func testFailedList(t *testing.T, s bus.FailedStore) {
	var msgs []bus.FailedMessage
	for i := range 23 {
		// Pairs share a failure time: they come by ID, descending.
		msgs = append(msgs, failedAt(fmt.Sprintf("l-%02d", i), "T", "e", "r", ftime(time.Duration(i/2)*time.Second)))
	}
	storeFailed(t, s, msgs...)
	var want []string
	for i := len(msgs) - 1; i >= 0; i-- {
		want = append(want, msgs[i].ID)
	}
	for _, limit := range []int{1, 4, 10, 23, 100} {
		if got := listFailedAll(t, s, bus.FailedQuery{}, limit); !slices.Equal(got, want) {
			t.Errorf("pages of %d = %v, want %v", limit, got, want)
		}
	}
	page, err := s.ListFailed(ctxT(t), bus.FailedQuery{})
	if err != nil || !slices.Equal(failedIDs(page), want) {
		t.Errorf("Limit 0 (100) = %v, %v; want %v", failedIDs(page), err, want)
	}
	if len(page) > 0 && !sameFailed(page[0], msgs[22]) {
		t.Errorf("listed message = %+v, want %+v", page[0], msgs[22])
	}
	deleteFailed(t, s, want...)
}

func listFailedAll(t *testing.T, s bus.FailedStore, q bus.FailedQuery, limit int) []string {
	t.Helper()
	q.Limit = limit
	var out []string
	for range 1000 {
		page, err := s.ListFailed(ctxT(t), q)
		if err != nil {
			t.Fatalf("ListFailed(%+v): %v", q, err)
		}
		if len(page) > limit {
			t.Fatalf("page of %d, over the limit %d", len(page), limit)
		}
		out = append(out, failedIDs(page)...)
		if len(page) < limit {
			return out
		}
		last := page[len(page)-1]
		q.BeforeFailed, q.BeforeID = last.LastFailed, last.ID
	}
	t.Fatal("paging does not end")
	return nil
}

func testFailedFilters(t *testing.T, s bus.FailedStore) {
	var msgs []bus.FailedMessage
	for i := range 30 {
		typ, endpoint := "orders.Ship", "shipping"
		if i%3 == 0 {
			typ = "billing.Invoice"
		}
		if i%2 == 0 {
			endpoint = "billing"
		}
		msgs = append(msgs, failedAt(fmt.Sprintf("flt-%02d", i), typ, endpoint, "order "+strconv.Itoa(i)+" not found", ftime(time.Duration(i)*time.Second)))
	}
	storeFailed(t, s, msgs...)
	group := msgs[1].Group // orders.Ship at shipping
	queries := []bus.FailedQuery{
		{}, {Type: "billing.Invoice"}, {Endpoint: "billing"}, {Type: "orders.Ship", Endpoint: "shipping"},
		{Group: group}, {Group: group, Type: "billing.Invoice"}, {Search: "flt-07"}, {Search: "flt-07", Type: "billing.Invoice"},
		{Search: "nope"}, {Type: "nope"},
	}
	for _, q := range queries {
		var want []string
		for i := len(msgs) - 1; i >= 0; i-- {
			m := msgs[i]
			if (q.Type == "" || m.Type == q.Type) && (q.Endpoint == "" || m.Endpoint == q.Endpoint) &&
				(q.Group == "" || m.Group == q.Group) && (q.Search == "" || m.ID == q.Search) {
				want = append(want, m.ID)
			}
		}
		if got := listFailedAll(t, s, q, 4); !slices.Equal(got, want) {
			t.Errorf("ListFailed(%+v) = %v, want %v", q, got, want)
		}
		q.Limit, q.BeforeFailed, q.BeforeID = 1, ftime(time.Hour), "z"
		if n, err := s.CountFailed(ctxT(t), q); err != nil || n != int64(len(want)) {
			t.Errorf("CountFailed(%+v) = %d, %v; want %d (paging and limit ignored)", q, n, err, len(want))
		}
	}
	deleteFailed(t, s, failedIDs(msgs)...)
}

func testFailedGroups(t *testing.T, s bus.FailedStore) {
	if gs, err := s.FailedGroups(ctxT(t), 10); err != nil || len(gs) != 0 {
		t.Errorf("groups of an empty store = %v, %v", gs, err)
	}
	var msgs []bus.FailedMessage
	add := func(n int, prefix, typ, endpoint string, reason func(i int) string, at func(i int) time.Time) {
		for i := range n {
			msgs = append(msgs, failedAt(fmt.Sprintf("%s-%03d", prefix, i), typ, endpoint, reason(i), at(i)))
		}
	}
	add(40, "big", "orders.Ship", "shipping",
		func(i int) string {
			return fmt.Sprintf("order %d not found (request 7f3a9c2e-11b4-4c1d-9a3e-%012d)", i, i)
		},
		func(i int) time.Time { return ftime(time.Duration(i) * time.Second) })
	add(5, "mid", "billing.Invoice", "billing",
		func(i int) string { return fmt.Sprintf(`charge "card-%d" declined after %dms`, i, 100+i) },
		func(i int) time.Time { return ftime(time.Hour + time.Duration(i)*time.Second) })
	add(1, "one", "orders.Ship", "returns",
		func(int) string { return "order 1 not found" }, func(int) time.Time { return ftime(-time.Hour) })
	storeFailed(t, s, msgs...)
	gs, err := s.FailedGroups(ctxT(t), 10)
	if err != nil {
		t.Fatalf("FailedGroups: %v", err)
	}
	want := []bus.FailedGroup{
		{Group: msgs[0].Group, Type: "orders.Ship", Endpoint: "shipping", Reason: bus.NormalizeReason(msgs[0].Reason), Count: 40, FirstFailed: ftime(0), LastFailed: ftime(39 * time.Second)},
		{Group: msgs[40].Group, Type: "billing.Invoice", Endpoint: "billing", Reason: bus.NormalizeReason(msgs[40].Reason), Count: 5, FirstFailed: ftime(time.Hour), LastFailed: ftime(time.Hour + 4*time.Second)},
		{Group: msgs[45].Group, Type: "orders.Ship", Endpoint: "returns", Reason: bus.NormalizeReason(msgs[45].Reason), Count: 1, FirstFailed: ftime(-time.Hour), LastFailed: ftime(-time.Hour)},
	}
	if len(gs) != len(want) {
		t.Fatalf("FailedGroups = %+v, want %d groups", gs, len(want))
	}
	for i := range want {
		g, w := gs[i], want[i]
		if g.Group != w.Group || g.Type != w.Type || g.Endpoint != w.Endpoint || g.Reason != w.Reason || g.Count != w.Count ||
			!g.FirstFailed.Equal(w.FirstFailed) || !g.LastFailed.Equal(w.LastFailed) {
			t.Errorf("group %d = %+v,\nwant %+v", i, g, w)
		}
	}
	if gs, err := s.FailedGroups(ctxT(t), 2); err != nil || len(gs) != 2 || gs[0].Count != 40 || gs[1].Count != 5 {
		t.Errorf("FailedGroups(2) = %+v, %v; want the two largest", gs, err)
	}
	deleteFailed(t, s, failedIDs(msgs)...)
}

func testFailedDelete(t *testing.T, s bus.FailedStore) {
	storeFailed(t, s, failedAt("d1", "T", "e", "r", ftime(0)), failedAt("d2", "T", "e", "r", ftime(0)), failedAt("d3", "T", "e", "r", ftime(0)))
	if n, err := s.DeleteFailed(ctxT(t), []string{"d1", "d3", "never-stored", "d1"}); err != nil || n != 2 {
		t.Errorf("DeleteFailed = %d, %v; want 2 (unknown and repeated IDs ignored)", n, err)
	}
	if _, ok, _ := s.GetFailed(ctxT(t), "d1"); ok {
		t.Error("d1 still stored after DeleteFailed")
	}
	if n, err := s.DeleteFailed(ctxT(t), nil); err != nil || n != 0 {
		t.Errorf("DeleteFailed(nil) = %d, %v", n, err)
	}
	deleteFailed(t, s, "d2")
}

func testFailedLargeBatch(t *testing.T, s bus.FailedStore) {
	msgs := make([]bus.FailedMessage, 2000)
	for i := range msgs {
		msgs[i] = failedAt(fmt.Sprintf("lb-%05d", i), "T", "e", fmt.Sprintf("error %d", i), ftime(time.Duration(i)*time.Millisecond))
	}
	storeFailed(t, s, msgs...)
	if n, err := s.CountFailed(ctxT(t), bus.FailedQuery{Group: msgs[0].Group}); err != nil || n != 2000 {
		t.Errorf("CountFailed of the group = %d, %v; want 2000", n, err)
	}
	if gs, err := s.FailedGroups(ctxT(t), 0); err != nil || len(gs) != 1 || gs[0].Count != 2000 {
		t.Errorf("FailedGroups = %+v, %v; want one group of 2000", gs, err)
	}
	deleteFailed(t, s, failedIDs(msgs)...)
}
