package storetest

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

func TestWorkerSpecRoundTrip(t *testing.T) {
	t.Parallel()
	want := WorkerSpec{Space: "pb_x", Name: "p2", Lease: 3 * time.Second, LookAhead: time.Second, HangAfter: -1}
	got, err := ParseWorkerSpec(want.Args())
	if err != nil || got != want {
		t.Fatalf("ParseWorkerSpec(Args()) = %+v, %v; want %+v", got, err, want)
	}
	if _, err := ParseWorkerSpec([]string{"-name", "p"}); err == nil {
		t.Error("a spec without -space parsed")
	}
}

func TestTicks(t *testing.T) {
	t.Parallel()
	at := time.Now()
	msgs := Ticks(4, at, time.Second)
	if len(msgs) != 4 || !msgs[0].DueAt.Equal(at) || !msgs[2].DueAt.Equal(at.Add(500*time.Millisecond)) {
		t.Fatalf("Ticks = %+v", msgs)
	}
	env, err := bus.UnmarshalEnvelope(msgs[3].Envelope)
	if err != nil || env.Type != TickType || env.ID != msgs[3].ID || msgs[3].Transport != TransportIdentity {
		t.Fatalf("tick envelope %+v, %v", env, err)
	}
}

func TestClaimLoggerLogsOnlyClaims(t *testing.T) {
	t.Parallel()
	var logged [][]string
	l := ClaimLogger(func(_ context.Context, ids []string) error { logged = append(logged, ids); return nil })
	ctx := t.Context()
	_, _ = l.Due(ctx)(nil, nil)
	_, _ = l.Due(ctx)([]bus.OutgoingMessage{{ID: "x"}}, errors.New("claim failed"))
	_, _ = l.Due(ctx)([]bus.OutgoingMessage{{ID: "a"}, {ID: "b"}}, nil)
	_, _ = l.Ahead(ctx)(bus.AheadClaim{Rows: []bus.OutgoingMessage{{ID: "c"}}}, nil)
	if want := [][]string{{"a", "b"}, {"c"}}; !reflect.DeepEqual(logged, want) {
		t.Errorf("logged %v, want %v", logged, want)
	}
}

// TestCheckReceipts runs the check on receipts it should pass and on some
// it should fail.
func TestCheckReceipts(t *testing.T) {
	t.Parallel()
	at := time.Now()
	r := func(id, proc string) Receipt {
		return Receipt{ID: id, Proc: proc, Due: at, Received: at.Add(time.Millisecond)}
	}
	cases := []struct {
		name     string
		receipts []Receipt
		claims   []Claim
		victim   string
		fault    bool
		ok       bool
	}{
		{"once each", []Receipt{r("a", "p1"), r("b", "p3")}, nil, "", false, true},
		{"a duplicate", []Receipt{r("a", "p1"), r("a", "p3"), r("b", "p1")}, nil, "", false, false},
		{"a duplicate the store explains", []Receipt{r("a", "p1"), r("a", "p3"), r("b", "p1")}, nil, "", true, true},
		{"early", []Receipt{r("a", "p1"), {ID: "b", Proc: "p1", Due: at, Received: at.Add(-time.Second)}}, nil, "", false, false},
		{"a lost message", []Receipt{r("a", "p1")}, nil, "", false, false},
		{"taken over", []Receipt{r("a", "p2"), r("a", "p1"), r("b", "p3")}, []Claim{{"a", "p2"}, {"b", "p2"}}, "p2", false, true},
		{"a duplicate the kill does not explain", []Receipt{r("a", "p1"), r("a", "p3"), r("b", "p3")}, []Claim{{"b", "p2"}}, "p2", false, false},
		{"a kill before any claim", []Receipt{r("a", "p1"), r("b", "p3")}, nil, "p2", false, false},
	}
	for _, c := range cases {
		rec := &recorder{TB: t}
		CheckReceipts(rec, c.receipts, c.claims, 2, at, c.victim, c.fault)
		if rec.failed == c.ok {
			t.Errorf("%s: failed = %v, want %v", c.name, rec.failed, !c.ok)
		}
	}
}

// recorder is a testing.TB that notes failures instead of reporting them.
type recorder struct {
	testing.TB
	failed bool
}

func (r *recorder) Helper()               {}
func (r *recorder) Logf(string, ...any)   {}
func (r *recorder) Errorf(string, ...any) { r.failed = true }
