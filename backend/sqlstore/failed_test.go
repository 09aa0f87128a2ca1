package sqlstore

import (
	"math"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/postbus/bus/backend"
)

func dollar(n int) string { return "$" + strconv.Itoa(n) }
func question(int) string { return "?" }

func TestBinderNumbersOrRepeats(t *testing.T) {
	t.Parallel()
	vals := map[string]any{"a": 1, "b": 2}
	p := newBinder(dollar)
	got := p.fill("x < {a} OR (x = {a} AND y < {b})", vals) + " LIMIT " + p.add(3)
	if want := "x < $1 OR (x = $1 AND y < $2) LIMIT $3"; got != want || !slices.Equal(p.args, []any{1, 2, 3}) {
		t.Errorf("numbered: %q %v, want %q [1 2 3]", got, p.args, want)
	}
	q := newBinder(question)
	got = q.fill("x < {a} OR (x = {a} AND y < {b})", vals)
	if want := "x < ? OR (x = ? AND y < ?)"; got != want || !slices.Equal(q.args, []any{1, 1, 2}) {
		t.Errorf("anonymous: %q %v, want %q [1 1 2]", got, q.args, want)
	}
}

func TestListFailedSQLHoldsOnlyTheSetConditions(t *testing.T) {
	t.Parallel()
	f := NewFailed(&Dialect{Name: "x", Times: NativeTimes{}}, nil, FailedSQL{
		Placeholder: dollar, Table: "f", Select: "SELECT c FROM f", Before: "(l, id) < ({at}, {id})",
		Clean: func(s string) string { return s + "!" },
	})
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	sql, args := ListFailedSQL(f, backend.FailedQuery{Group: "g", Search: "s", BeforeFailed: at, BeforeID: "i"})
	if want := "SELECT c FROM f WHERE failure_group = $1 AND id = $2 AND (l, id) < ($3, $4) ORDER BY last_failed DESC, id DESC LIMIT $5"; sql != want {
		t.Errorf("list: %s\nwant %s", sql, want)
	}
	if want := []any{"g!", "s!", at, "i!", 100}; !slices.Equal(args, want) {
		t.Errorf("list args %v, want %v", args, want)
	}
	sql, args = CountFailedSQL(f, backend.FailedQuery{BeforeFailed: at, Limit: 5})
	if sql != "SELECT count(*) FROM f" || len(args) != 0 {
		t.Errorf("count ignores paging: %s %v", sql, args)
	}
}

func TestListScheduledSQLPicksTheRange(t *testing.T) {
	t.Parallel()
	b := NewBrowser(&Dialect{Name: "x", Times: NativeTimes{}}, nil, BrowseSQL{
		Placeholder: dollar, Select: "SELECT c FROM t",
		All: BrowseRange{From: "d >= {from}", Until: "d < {until}", After: "(d, id) > ({due}, {id})", Order: "d, id"},
		ByType: BrowseRange{From: "(ty, d) >= ({type}, {from})", NoFrom: "(ty, d) >= ({type}, '-infinity')",
			Until: "(ty, d) < ({type}, {until})", NoUntil: "(ty, d) < ({type}, 'infinity')", Order: "ty, d, id"},
	})
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	sql, args := ListScheduledSQL(b, backend.ScheduledQuery{DueBefore: at, Limit: 7})
	if want := "SELECT c FROM t WHERE d < $1 ORDER BY d, id LIMIT $2"; sql != want || !slices.Equal(args, []any{at, 7}) {
		t.Errorf("all: %s %v\nwant %s", sql, args, want)
	}
	sql, args = ListScheduledSQL(b, backend.ScheduledQuery{Type: "T", DueAfter: at})
	if want := "SELECT c FROM t WHERE (ty, d) >= ($1, $2) AND (ty, d) < ($1, 'infinity') ORDER BY ty, d, id LIMIT $3"; sql != want ||
		!slices.Equal(args, []any{"T", at, 100}) {
		t.Errorf("by type: %s %v\nwant %s", sql, args, want)
	}
}

func TestDistinctRoundsKeepOrder(t *testing.T) {
	t.Parallel()
	var msgs []backend.FailedMessage
	for _, id := range []string{"a", "b", "a", "c", "a", "b"} {
		msgs = append(msgs, backend.FailedMessage{ID: id})
	}
	var got [][]string
	for _, r := range distinctRounds(msgs) {
		var ids []string
		for _, m := range r {
			ids = append(ids, m.ID)
		}
		got = append(got, ids)
	}
	want := [][]string{{"a", "b", "c"}, {"a", "b"}, {"a"}}
	if !slices.EqualFunc(got, want, slices.Equal[[]string]) {
		t.Errorf("rounds %v, want %v", got, want)
	}
}

func TestUnixNanosClampFarTimes(t *testing.T) {
	t.Parallel()
	u := UnixTimes{Unit: time.Nanosecond}
	far, early := time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC)
	if got := u.Arg(far); got != int64(math.MaxInt64) {
		t.Errorf("year 9999: %v, want MaxInt64", got)
	}
	if got := u.Arg(early); got != int64(math.MinInt64) {
		t.Errorf("year 1000: %v, want MinInt64", got)
	}
	if got := u.Arg(time.Unix(0, 42)); got != int64(42) {
		t.Errorf("in range: %v", got)
	}
}
