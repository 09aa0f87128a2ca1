package main

import (
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
	r := analyze(msgs, events, nil)
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
	cut := fault{kind: faultCut, what: "database", start: at(20), end: at(23)}
	tests := []struct {
		name       string
		events     []event
		faults     []fault
		explained  bool
		nearOutage bool
	}{
		{"first handler killed before its ack", []event{handled("m", 1, 10), handled("m", 2, 11)},
			[]fault{kill(1, 10.5)}, true, false},
		{"first handler killed after the second handling", []event{handled("m", 1, 10), handled("m", 2, 11)},
			[]fault{kill(1, 15)}, false, false},
		{"second handler stopped holding it", []event{handled("m", 2, 10), handled("m", 3, 12.5)},
			[]fault{stop}, true, false},
		{"dispatcher killed before its delete", []event{handOver("m", 4, 9), handled("m", 1, 9.1),
			handOver("m", 2, 40), handled("m", 2, 40.1)}, []fault{kill(4, 9.5)}, true, false},
		{"dispatcher killed after its delete window", []event{handOver("m", 4, 9), handled("m", 1, 9.1),
			handled("m", 2, 12)}, []fault{kill(4, 30)}, false, false},
		{"a worker that never held it", []event{handled("m", 1, 10), handled("m", 2, 11)},
			[]fault{kill(5, 10.5)}, false, false},
		{"a database cut between the handlings", []event{handOver("m", 1, 19.9), handled("m", 1, 20),
			handOver("m", 2, 50), handled("m", 2, 50.1)}, []fault{cut}, false, true},
		{"a failed kill explains nothing", []event{handled("m", 1, 10), handled("m", 2, 11)},
			[]fault{{kind: faultKill, pid: 1, start: at(10.5), end: at(10.5), failed: errFailOnce}}, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := analyze([]*message{{id: "m", due: at(0), sent: true}}, tt.events, tt.faults)
			if len(r.duplicates) != 1 {
				t.Fatalf("duplicates %d, want 1", len(r.duplicates))
			}
			if got := r.explained == 1; got != tt.explained {
				t.Errorf("explained = %v, want %v", got, tt.explained)
			}
			if got := r.nearOutage == 1; got != tt.nearOutage {
				t.Errorf("near an outage = %v, want %v", got, tt.nearOutage)
			}
			if r.failed() == tt.explained {
				t.Errorf("failed() = %v with explained = %v", r.failed(), tt.explained)
			}
		})
	}
}

func TestAnalyzeCountsDuplicatesOfRetriedSendsApart(t *testing.T) {
	t.Parallel()
	cut := fault{kind: faultCut, what: "broker", start: at(9), end: at(12)}
	msgs := []*message{
		{id: "retried", due: at(0), sent: true, retries: 2},
		{id: "cut", due: at(0), sent: true},
		{id: "plain", due: at(0), sent: true},
	}
	events := []event{
		handled("retried", 1, 12.1), handled("retried", 1, 12.1), handled("retried", 2, 12.2),
		handled("cut", 1, 11), handled("cut", 2, 13),
		handled("plain", 1, 20), handled("plain", 2, 21),
	}
	r := analyze(msgs, events, []fault{cut})
	if len(r.duplicates) != 4 || r.explained != 0 || r.afterRetriedSend != 2 || r.nearOutage != 1 {
		t.Errorf("duplicates %d, explained %d, after a retried send %d, near an outage %d; want 4, 0, 2, 1",
			len(r.duplicates), r.explained, r.afterRetriedSend, r.nearOutage)
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
