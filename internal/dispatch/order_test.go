package dispatch

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/postbus/bus/backend"
)

// row is a claimed row of an envelope with ordering key key ("" for none),
// due at due seconds; key "!" makes a row that does not decode.
func row(id, key string, due int) backend.OutgoingMessage {
	at := time.Date(2030, 1, 1, 12, 0, due, 0, time.UTC)
	if key == "!" {
		return backend.OutgoingMessage{ID: id, DueAt: at, Envelope: []byte("not an envelope")}
	}
	env := &backend.Envelope{ID: id, Type: "t", OrderingKey: key}
	return backend.OutgoingMessage{ID: id, DueAt: at, Envelope: backend.MarshalEnvelope(env)}
}

func TestKeyLanes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		rows  []backend.OutgoingMessage
		lanes [][]int
		bad   []int // rows that do not decode
	}{
		{"none", nil, [][]int{}, nil},
		{"no keys: a lane each", []backend.OutgoingMessage{row("a", "", 1), row("b", "", 1), row("c", "", 0)},
			[][]int{{0}, {1}, {2}}, nil},
		{"one key: one lane in due order", []backend.OutgoingMessage{row("a", "k", 3), row("b", "k", 1), row("c", "k", 2)},
			[][]int{{1, 2, 0}}, nil},
		{"equal due times keep claim order", []backend.OutgoingMessage{row("a", "k", 1), row("b", "k", 1), row("c", "k", 0)},
			[][]int{{2, 0, 1}}, nil},
		{"lanes in the claim order of their first row",
			[]backend.OutgoingMessage{row("a", "", 5), row("b", "k2", 2), row("c", "k1", 1), row("d", "k2", 1), row("e", "", 0), row("f", "k1", 0)},
			[][]int{{0}, {3, 1}, {5, 2}, {4}}, nil},
		{"a row that does not decode is a lane of its own",
			[]backend.OutgoingMessage{row("a", "k", 1), row("b", "!", 0), row("c", "k", 0)},
			[][]int{{2, 0}, {1}}, []int{1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dec, lanes := keyLanes(tc.rows)
			if !reflect.DeepEqual(lanes, tc.lanes) {
				t.Errorf("lanes %v, want %v", lanes, tc.lanes)
			}
			if len(dec) != len(tc.rows) {
				t.Fatalf("%d rows decoded, want %d", len(dec), len(tc.rows))
			}
			for i, d := range dec {
				bad := false
				for _, j := range tc.bad {
					bad = bad || i == j
				}
				switch {
				case bad && !errors.Is(d.err, backend.ErrMalformedEnvelope):
					t.Errorf("row %d: err %v, want ErrMalformedEnvelope", i, d.err)
				case !bad && (d.err != nil || d.env.ID != tc.rows[i].ID):
					t.Errorf("row %d: decoded %v, %v; want envelope %s", i, d.env, d.err, tc.rows[i].ID)
				}
			}
		})
	}
}

// The hand-over decodes a row without the dispatch policy headers.
func TestKeyLanesDropPolicyHeaders(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		headers map[string]string
		want    map[string]string
	}{
		{"none", nil, nil},
		{"only the policy: no headers", map[string]string{backend.HeaderDispatchRetries: "3", backend.HeaderDispatchBackoff: "1s"}, nil},
		{"others kept", map[string]string{backend.HeaderDispatchRetries: "3", "x": "y"}, map[string]string{"x": "y"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := &backend.Envelope{ID: "a", Headers: tc.headers}
			dec, _ := keyLanes([]backend.OutgoingMessage{{ID: "a", Envelope: backend.MarshalEnvelope(env)}})
			if dec[0].err != nil || !reflect.DeepEqual(dec[0].env.Headers, tc.want) {
				t.Errorf("headers %v (err %v), want %v", dec[0].env.Headers, dec[0].err, tc.want)
			}
		})
	}
}

// A key held behind a failed row holds back the later rows of the key,
// each KeyStep after the one before, until the failed row comes back or
// its retry and a lease have passed.
func TestHeldKeysHeldBack(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	other := errors.New("otherwise")
	for _, tc := range []struct {
		name  string
		rows  []backend.OutgoingMessage
		at    time.Duration // after now
		waits []time.Duration
		left  bool // the key is still held afterwards
	}{
		{"another key passes", []backend.OutgoingMessage{row("x", "j", 0), row("y", "", 0)}, 0, []time.Duration{-1, -1}, true},
		{"later rows of the key, one step apart", []backend.OutgoingMessage{row("b", "k", 0), row("c", "k", 0)}, 0,
			[]time.Duration{time.Second + 4*KeyStep, time.Second + 5*KeyStep}, true},
		{"the failed row releases its key", []backend.OutgoingMessage{row("lead", "k", 0), row("c", "k", 0)}, 0,
			[]time.Duration{-1, -1}, false},
		{"after its retry and a lease, the key is free", []backend.OutgoingMessage{row("b", "k", 0)}, time.Minute + time.Second + 1,
			[]time.Duration{-1}, false},
		{"until then it is held", []backend.OutgoingMessage{row("b", "k", 0)}, time.Minute + time.Second,
			[]time.Duration{time.Second + 4*KeyStep}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			hk := heldKeys{"k": {leader: "lead", wait: time.Second, n: 3, until: now.Add(time.Second + time.Minute)}}
			for i := range tc.rows {
				err := hk.heldBack(&tc.rows[i], now.Add(tc.at), other)
				var held *heldBackError
				switch want := tc.waits[i]; {
				case want < 0 && err != other:
					t.Errorf("row %s: %v, want it through", tc.rows[i].ID, err)
				case want >= 0 && (!errors.As(err, &held) || held.wait != want):
					t.Errorf("row %s: %v, want held back %v", tc.rows[i].ID, err, want)
				}
			}
			if _, ok := hk["k"]; ok != tc.left {
				t.Errorf("key still held: %v, want %v", ok, tc.left)
			}
		})
	}
}
