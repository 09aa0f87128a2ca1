package sqlstore

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/postbus/bus/backend"
)

// fakeConn records what a claim ran on it.
type fakeConn struct {
	mu      sync.Mutex
	settled [][]Stmt
	ends    []TxEnd
	closed  []TxEnd
	fail    error
	lapsed  bool
}

func (f *fakeConn) Settle(_ context.Context, stmts []Stmt, end TxEnd) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return 0, f.fail
	}
	f.settled, f.ends = append(f.settled, stmts), append(f.ends, end)
	var n int64
	for _, s := range stmts {
		n += int64(len(s.Args))
	}
	return n, nil
}

func (f *fakeConn) KeepAlive(context.Context) error { return nil }

func (f *fakeConn) Close(end TxEnd) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = append(f.closed, end)
	return nil
}

func (f *fakeConn) Lapsed(error, time.Duration, time.Duration) bool { return f.lapsed }

func (f *fakeConn) closes() []TxEnd {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]TxEnd(nil), f.closed...)
}

// idsSQL is a LockedSQL whose statements carry one argument per row.
var idsSQL = LockedSQL{
	Delete: func(ids []string) []Stmt {
		args := make([]any, len(ids))
		for i, id := range ids {
			args[i] = id
		}
		return []Stmt{{Query: "delete", Args: args}}
	},
	Fail: func(fs []backend.OutgoingFailure) []Stmt {
		out := make([]Stmt, len(fs))
		for i, f := range fs {
			out[i] = Stmt{Query: "fail", Args: []any{f.ID}}
		}
		return out
	},
}

func newTestClaims(slots int, keepAlive bool) *LockedClaims {
	return NewLockedClaims(&Dialect{Name: "test"}, idsSQL, LockedConfig{
		Slots: func() int { return slots }, SlotWait: 10 * time.Millisecond, KeepAlive: keepAlive,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
}

func opener(conn ClaimConn, ids ...string) OpenFunc {
	return func(context.Context) (ClaimConn, []string, error) { return conn, ids, nil }
}

func TestLockedSettleCommitsWithTheLastRow(t *testing.T) {
	t.Parallel()
	r := newTestClaims(2, true)
	s := r.Settler(SettleOps{Delete: "delete", Release: "release", Fail: "fail"})
	conn := &fakeConn{}
	ctx := context.Background()
	if err := r.Claim(ctx, "tok", time.Minute, opener(conn, "a", "b", "c"), nil); err != nil {
		t.Fatal(err)
	}
	if !r.Held("a") || r.HeldCount() != 3 {
		t.Fatalf("held: %v, %d", r.Held("a"), r.HeldCount())
	}
	n, err := s.ReleaseOutgoing(ctx, []backend.Claim{{ID: "c", Token: "tok"}, {ID: "c", Token: "tok"}, {ID: "x", Token: "tok"}})
	if n != 1 || err != nil || len(conn.settled) != 0 {
		t.Fatalf("release of one row = %d, %v, %d statements; want 1, nil, none sent", n, err, len(conn.settled))
	}
	n, err = s.DeleteOutgoing(ctx, []backend.Claim{{ID: "a", Token: "tok"}, {ID: "a", Token: "other"}})
	if n != 1 || err != nil || conn.ends[0] != EndNone {
		t.Fatalf("delete of one row = %d, %v, end %v", n, err, conn.ends)
	}
	n, err = s.RecordOutgoingFailures(ctx, []backend.OutgoingFailure{{ID: "b", Token: "tok"}})
	if n != 1 || err != nil || conn.ends[1] != EndCommit {
		t.Fatalf("failure of the last row = %d, %v, end %v; want a commit", n, err, conn.ends)
	}
	if got := conn.closes(); len(got) != 1 || got[0] != EndNone || r.Get("tok") != nil || r.HeldCount() != 0 {
		t.Fatalf("after the last row: closes %v, open %v, held %d", got, r.Get("tok"), r.HeldCount())
	}
	if n, err := s.DeleteOutgoing(ctx, []backend.Claim{{ID: "b", Token: "tok"}}); n != 0 || err != nil {
		t.Fatalf("settle of an ended claim = %d, %v", n, err)
	}
}

func TestLockedReleaseOfEveryRowRollsBack(t *testing.T) {
	t.Parallel()
	r := newTestClaims(1, true)
	conn := &fakeConn{}
	ctx := context.Background()
	if err := r.Claim(ctx, "tok", time.Minute, opener(conn, "a"), nil); err != nil {
		t.Fatal(err)
	}
	if n, err := r.Settler(SettleOps{}).ReleaseOutgoing(ctx, []backend.Claim{{ID: "a", Token: "tok"}}); n != 1 || err != nil {
		t.Fatalf("release = %d, %v", n, err)
	}
	if len(conn.ends) != 1 || conn.ends[0] != EndRollback {
		t.Fatalf("ends %v; want a rollback", conn.ends)
	}
}

func TestLockedSettleErrorEndsTheClaim(t *testing.T) {
	t.Parallel()
	for _, lapsed := range []bool{false, true} {
		r := newTestClaims(1, true)
		conn := &fakeConn{fail: errors.New("broken"), lapsed: lapsed}
		ctx := context.Background()
		if err := r.Claim(ctx, "tok", time.Minute, opener(conn, "a", "b"), nil); err != nil {
			t.Fatal(err)
		}
		_, err := r.Settler(SettleOps{Delete: "delete"}).DeleteOutgoing(ctx, []backend.Claim{{ID: "a", Token: "tok"}})
		if lapsed != (err == nil) {
			t.Errorf("lapsed %v: error %v", lapsed, err)
		}
		if got := conn.closes(); len(got) != 1 || got[0] != EndRollback || r.Get("tok") != nil {
			t.Errorf("lapsed %v: closes %v", lapsed, got)
		}
	}
}

func TestLockedSlotsBoundOpenClaims(t *testing.T) {
	t.Parallel()
	r := newTestClaims(1, true)
	ctx := context.Background()
	first := &fakeConn{}
	if err := r.Claim(ctx, "one", time.Minute, opener(first, "a"), nil); err != nil {
		t.Fatal(err)
	}
	opened := false
	open := func(context.Context) (ClaimConn, []string, error) {
		opened = true
		return &fakeConn{}, []string{"b"}, nil
	}
	if err := r.Claim(ctx, "two", time.Minute, open, nil); err != nil || opened {
		t.Fatalf("claim with no slot = %v, opened %v", err, opened)
	}
	var held []string
	join := func(_ context.Context, conn ClaimConn, h []string) ([]string, bool, error) {
		if conn != first {
			t.Error("joined another connection")
		}
		held = h
		return []string{"b"}, false, nil
	}
	if err := r.Claim(ctx, "two", time.Minute, open, join); err != nil || opened || len(held) != 1 {
		t.Fatalf("joined claim = %v, opened %v, held %v", err, opened, held)
	}
	if r.Get("two") != r.Get("one") || !r.Held("b") {
		t.Fatal("the joined claim is not the open one's")
	}
	r.RollbackAll()
	if got := first.closes(); len(got) != 1 || got[0] != EndRollback || r.HeldCount() != 0 {
		t.Fatalf("rollback: closes %v, held %d", got, r.HeldCount())
	}
}

func TestLockedClaimExpiresWithoutKeepAlive(t *testing.T) {
	t.Parallel()
	r := newTestClaims(1, false)
	conn := &fakeConn{}
	if err := r.Claim(context.Background(), "tok", 20*time.Millisecond, opener(conn, "a"), nil); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(conn.closes()) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if got := conn.closes(); len(got) != 1 || got[0] != EndCommit || r.Get("tok") != nil {
		t.Fatalf("expired claim: closes %v", got)
	}
}
