package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// at returns a time s seconds after a fixed origin.
func at(s float64) time.Time {
	return time.Unix(1_000_000, 0).Add(time.Duration(s * float64(time.Second)))
}

func handled(id string, pid int, s float64) event {
	return event{kind: eventHandled, id: id, pid: pid, at: at(s)}
}

func handOver(id string, pid int, s float64) event {
	return event{kind: eventHandOver, id: id, pid: pid, at: at(s)}
}

func kill(pid int, s float64) fault {
	return fault{kind: faultKill, pid: pid, start: at(s), end: at(s)}
}

func TestAnalyzeCountsLostEarlyAndUnknown(t *testing.T) {
	t.Parallel()
	msgs := []*message{
		{id: "a", due: at(0), sent: true},
		{id: "b", due: at(5), sent: true},
		{id: "c", due: at(0), sent: true},
		{id: "d", due: at(0)}, // never sent
	}
	events := []event{
		handled("b", 1, 4), // a second early
		handled("c", 1, 1),
		{kind: eventParked, id: "a", pid: 1, at: at(2)},
		handled("x", 1, 1), // not sent by the producer
	}
	r := analyze(msgs, events, evidence{})
	if len(r.lost) != 1 || r.lost[0] != "a" || r.lostParked != 1 {
		t.Errorf("lost %v (%d parked), want [a] (1 parked)", r.lost, r.lostParked)
	}
	if len(r.early) != 1 || r.early[0].id != "b" || r.early[0].by != time.Second {
		t.Errorf("early %+v, want b by 1s", r.early)
	}
	if r.unsent != 1 || r.sent != 3 || r.unknown != 1 {
		t.Errorf("unsent %d, sent %d, unknown %d; want 1, 3, 1", r.unsent, r.sent, r.unknown)
	}
	if !r.failed() {
		t.Error("failed() = false")
	}
}

func TestAnalyzeExplainsDuplicates(t *testing.T) {
	t.Parallel()
	stop := fault{kind: faultStop, pid: 3, start: at(9), end: at(12)}
	dbCut := fault{kind: faultCut, what: "database", start: at(20), end: at(23)}
	brokerCut := fault{kind: faultCut, what: "broker", start: at(20), end: at(23)}
	terminate := fault{kind: faultTerminate, what: "6", start: at(20), end: at(20.1)}
	tests := []struct {
		name       string
		sentAt     float64 // the producer's first Send (the message is not delayed)
		events     []event
		faults     []fault
		dbIsBroker bool
		want       string // the cause; "" for unexplained
	}{
		{"first handler killed before its ack", 9, []event{handled("m", 1, 10), handled("m", 2, 11)},
			[]fault{kill(1, 10.5)}, false, causeKillStop},
		{"first handler killed after the second handling", 9, []event{handled("m", 1, 10), handled("m", 2, 11)},
			[]fault{kill(1, 15)}, false, ""},
		{"second handler stopped holding it", 9, []event{handled("m", 2, 10), handled("m", 3, 12.5)},
			[]fault{stop}, false, causeKillStop},
		{"dispatcher killed before its delete", 0, []event{handOver("m", 4, 9), handled("m", 1, 9.1),
			handOver("m", 2, 40), handled("m", 2, 40.1)}, []fault{kill(4, 9.5)}, false, causeKillStop},
		{"dispatcher killed after its delete window", 0, []event{handOver("m", 4, 9), handled("m", 1, 9.1),
			handled("m", 2, 12)}, []fault{kill(4, 30)}, false, ""},
		{"a worker that never held it", 9, []event{handled("m", 1, 10), handled("m", 2, 11)},
			[]fault{kill(5, 10.5)}, false, ""},
		{"a failed kill explains nothing", 9, []event{handled("m", 1, 10), handled("m", 2, 11)},
			[]fault{{kind: faultKill, pid: 1, start: at(10.5), end: at(10.5), failed: errFailOnce}}, false, ""},
		{"no fault at all", 9, []event{handled("m", 1, 10), handled("m", 2, 11)}, nil, false, ""},

		// Cuts and backend terminations. The margin is the p99 latency from
		// Send to first handling, here the one message's, floored at slack.
		{"handled as a broker cut began, its ack lost", 19.8, []event{handled("m", 1, 19.9), handled("m", 2, 24)},
			[]fault{brokerCut}, false, causeConnection},
		{"published as a broker cut began, its confirm lost", 19.9, []event{handled("m", 1, 21), handled("m", 2, 24)},
			[]fault{brokerCut}, false, causeConnection},
		{"handled long before a broker cut", 1, []event{handled("m", 1, 1.1), handled("m", 2, 24)},
			[]fault{brokerCut}, false, ""},
		{"handled twice before a broker cut", 19.8, []event{handled("m", 1, 19.9), handled("m", 2, 19.95)},
			[]fault{brokerCut}, false, ""},
		{"a failed cut explains nothing", 19.8, []event{handled("m", 1, 19.9), handled("m", 2, 24)},
			[]fault{{kind: faultCut, what: "broker", start: at(20), end: at(23), failed: errFailOnce}}, false, ""},
		{"a database cut as the dispatcher deleted the row", 0, []event{handOver("m", 1, 19.9), handled("m", 1, 20),
			handOver("m", 2, 50), handled("m", 2, 50.1)}, []fault{dbCut}, false, causeConnection},
		{"a backend termination while the dispatcher's delete still waited", 0, []event{handOver("m", 1, 16.6), handled("m", 3, 16.7),
			handOver("m", 3, 47), handled("m", 2, 47.1)}, []fault{terminate}, false, causeConnection},
		{"a database cut after the row was dispatched again", 0, []event{handOver("m", 1, 10), handled("m", 3, 10.1),
			handOver("m", 3, 18), handled("m", 2, 25)}, []fault{dbCut}, false, ""},
		{"dispatched again with no database fault in between", 0, []event{handOver("m", 1, 10), handled("m", 3, 10.1),
			handOver("m", 3, 40), handled("m", 2, 40.1)}, []fault{brokerCut}, false, ""},
		{"a database cut never reaches a message on the broker", 19.8, []event{handled("m", 1, 19.9), handled("m", 2, 24)},
			[]fault{dbCut}, false, ""},
		{"a database cut of the PostgreSQL transport", 19.8, []event{handled("m", 1, 19.9), handled("m", 2, 50)},
			[]fault{dbCut}, true, causeConnection},
		{"a backend termination of the PostgreSQL transport", 19.8, []event{handled("m", 1, 19.9), handled("m", 2, 50)},
			[]fault{terminate}, true, causeConnection},
		{"handled after a termination ended the PostgreSQL consumer's liveness lock", 10, []event{handled("m", 1, 20.7), handled("m", 2, 20.8)},
			[]fault{terminate}, true, causeConnection},
		{"handled long after a termination of the PostgreSQL transport", 10, []event{handled("m", 1, 25), handled("m", 2, 25.1)},
			[]fault{terminate}, true, ""},
		{"handled after a termination, on a broker", 10, []event{handled("m", 1, 20.7), handled("m", 2, 20.8)},
			[]fault{terminate}, false, ""},
		{"a backend termination never reaches a message on the broker", 19.8, []event{handled("m", 1, 19.9), handled("m", 2, 50)},
			[]fault{terminate}, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := &message{id: "m", due: at(tt.sentAt), sent: true}
			if slices.ContainsFunc(tt.events, func(ev event) bool { return ev.kind == eventHandOver }) {
				m.delay = time.Second // handed over: the margin is measured on other messages
			}
			msgs := []*message{m}
			r := analyze(msgs, tt.events, evidence{faults: tt.faults, dbIsBroker: tt.dbIsBroker})
			if len(r.duplicates) != 1 {
				t.Fatalf("duplicates %d, want 1", len(r.duplicates))
			}
			if got := r.duplicates[0].cause; got != tt.want {
				t.Errorf("cause %q, want %q", got, tt.want)
			}
			if got := r.explainedBy[tt.want]; tt.want != "" && got != 1 {
				t.Errorf("explained by %s: %d, want 1", tt.want, got)
			}
			if r.failed() != (tt.want == "") {
				t.Errorf("failed() = %v with cause %q", r.failed(), tt.want)
			}
		})
	}
}

func TestAnalyzeExplainsNoMoreDuplicatesThanRetriedSends(t *testing.T) {
	t.Parallel()
	msgs := []*message{
		{id: "retried", due: at(0), sent: true, failures: []sendFailure{{at(0.1), errFailOnce}}},
		{id: "plain", due: at(0), sent: true},
	}
	events := []event{
		// One failed Send may have stored one copy: one duplicate of three
		// handlings is explained, the other is not.
		handled("retried", 1, 1), handled("retried", 2, 1.1), handled("retried", 3, 1.2),
		handled("plain", 1, 1), handled("plain", 2, 2),
	}
	r := analyze(msgs, events, evidence{})
	if len(r.duplicates) != 3 || r.explainedBy[causeRetriedSend] != 1 || len(r.unexplained()) != 2 {
		t.Errorf("duplicates %d, explained by retried sends %d, unexplained %d; want 3, 1, 2",
			len(r.duplicates), r.explainedBy[causeRetriedSend], len(r.unexplained()))
	}
	if !r.failed() {
		t.Error("failed() = false")
	}
	r = analyze(msgs[:1], events[:2], evidence{})
	if r.explainedBy[causeRetriedSend] != 1 || r.failed() {
		t.Errorf("one duplicate of a message sent twice: explained by retried sends %d, failed %v; want 1, false",
			r.explainedBy[causeRetriedSend], r.failed())
	}
}

func TestCutMarginIsTheP99SendToHandlingLatency(t *testing.T) {
	t.Parallel()
	var msgs []*message
	var events []event
	for i := range 200 {
		id := fmt.Sprint(i)
		m := &message{id: id, due: at(float64(i)), sent: true}
		latency := 0.1
		if i >= 196 {
			latency = 5 // the slowest 2%, after the cut
		}
		switch {
		case i == 0:
			m.delay = time.Second // delayed, failing and retried messages do not count
			latency = 60
		case i == 1:
			m.fail = failLater
			latency = 60
		case i == 2:
			m.failures = []sendFailure{{at(2), errFailOnce}}
			latency = 60
		case i >= 3 && i <= 5:
			latency = 60 // held up by the cut below
		}
		msgs = append(msgs, m)
		events = append(events, handled(id, 1, float64(i)+latency))
	}
	cut := fault{kind: faultCut, what: "broker", start: at(10), end: at(13)}
	if got := cutMargin(msgs, events, []fault{cut}); got != 5*time.Second {
		t.Errorf("margin %s, want 5s", got)
	}
	if got := cutMargin(msgs[:1], nil, nil); got != slack {
		t.Errorf("margin with no latency measured %s, want %s", got, slack)
	}
}

func TestParseEventSkipsTornLines(t *testing.T) {
	t.Parallel()
	if ev, ok := parseEvent("h 1000 42 run-000001"); !ok || ev.pid != 42 || ev.id != "run-000001" || ev.at.UnixNano() != 1000 {
		t.Errorf("parseEvent = %+v, %v", ev, ok)
	}
	for _, line := range []string{"", "h 1000 42", "x 1000 42 id", "h 10x0 42 id", "hd 1000 42 id"} {
		if _, ok := parseEvent(line); ok {
			t.Errorf("parseEvent(%q) accepted a torn line", line)
		}
	}
}

func TestPrintSendFailuresGroupsErrorsByKind(t *testing.T) {
	t.Parallel()
	msgs := []*message{
		{id: "r-1", failures: []sendFailure{{at(0), fmt.Errorf("send r-1: dial 127.0.0.1:4001: %w", errFailOnce)}}},
		{id: "r-2", failures: []sendFailure{{at(0), fmt.Errorf("send r-2: dial 127.0.0.1:4002: %w", errFailOnce)}}},
		{id: "r-3"},
	}
	var b strings.Builder
	printSendFailures(&b, msgs)
	want := "failed Sends retried 2:\n  2× send <id>: dial 127.0.0.1:<port>: " + errFailOnce.Error() + "\n"
	if b.String() != want {
		t.Errorf("got %q, want %q", b.String(), want)
	}
}

// The report measures how late each delayed message's first handling came,
// and counts those held up 15 s or more (a lease waited out).
func TestAnalyzeMeasuresTheLatenessOfDelayedMessages(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var msgs []*message
	var events []event
	for i, late := range []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 31 * time.Second} {
		m := &message{id: fmt.Sprint("d", i), delay: time.Second, due: t0, sent: true}
		msgs = append(msgs, m)
		events = append(events, event{id: m.id, kind: eventHandled, at: t0.Add(late)})
	}
	now := &message{id: "now", due: t0, sent: true}
	msgs = append(msgs, now)
	events = append(events, event{id: now.id, kind: eventHandled, at: t0.Add(40 * time.Second)})
	r := analyze(msgs, events, evidence{})
	if got := len(r.late); got != 3 {
		t.Fatalf("%d delayed messages measured, want 3 (a message sent at once is not delayed)", got)
	}
	if got := r.lateAtLeast(lateReported); got != 1 {
		t.Errorf("%d late by 15 s or more, want 1", got)
	}
	if got := r.lateQuantile(0.5); got != 20*time.Millisecond {
		t.Errorf("p50 %v, want 20ms", got)
	}
	if got := r.lateQuantile(1); got != 31*time.Second {
		t.Errorf("max %v, want 31s", got)
	}
}

// A delayed message due during a database cut was held by a claim the cut
// ended: handed over by its holder as the connections came back and by
// another dispatcher that claimed the freed row, it is explained by the
// cut; one due well before the cut is not.
func TestAnalyzeExplainsARowDueDuringADatabaseCut(t *testing.T) {
	t.Parallel()
	dbCut := fault{kind: faultCut, what: "database", start: at(20), end: at(23)}
	for _, tt := range []struct {
		due  float64
		want string
	}{{21.5, causeConnection}, {12, ""}} {
		m := &message{id: "m", due: at(tt.due), delay: 10 * time.Second, sent: true}
		events := []event{handOver("m", 1, 23.3), handled("m", 1, 23.4), handOver("m", 2, 24), handled("m", 2, 24.1)}
		r := analyze([]*message{m}, events, evidence{faults: []fault{dbCut}})
		if len(r.duplicates) != 1 {
			t.Fatalf("due %v: duplicates %d, want 1", tt.due, len(r.duplicates))
		}
		if got := r.duplicates[0].cause; got != tt.want {
			t.Errorf("due %v: cause %q, want %q", tt.due, got, tt.want)
		}
	}
}
