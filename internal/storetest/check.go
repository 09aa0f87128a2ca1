package storetest

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
)

// CheckReceipts fails t unless receipts hold each of n messages, none
// received before its due time, and no duplicates but those a failure
// explains: with a victim (a process killed mid-dispatch), only rows it
// had claimed (claims), each received once more at most by the survivors;
// without one, with storeFault (a worker logged AbandonedSettle), each
// received twice at most; otherwise none. at is the first due time.
func CheckReceipts(t testing.TB, receipts []Receipt, claims []Claim, n int, at time.Time, victim string, storeFault bool) {
	t.Helper()
	byID := map[string][]Receipt{}
	byProc := map[string]int{}
	early := 0
	var last time.Time
	for _, r := range receipts {
		byID[r.ID] = append(byID[r.ID], r)
		byProc[r.Proc]++
		if r.Received.Before(r.Due) {
			early++
		}
		if r.Received.After(last) {
			last = r.Received
		}
	}
	var procs []string
	for _, p := range slices.Sorted(maps.Keys(byProc)) {
		procs = append(procs, fmt.Sprintf("%s=%d", p, byProc[p]))
	}
	t.Logf("%d receipts of %d messages (%s), %d early; last received %v after the first due time",
		len(receipts), len(byID), strings.Join(procs, " "), early, last.Sub(at).Round(time.Millisecond))
	if len(byID) != n {
		t.Errorf("%d distinct messages received, want %d", len(byID), n)
	}
	if early != 0 {
		t.Errorf("%d messages received before their due time", early)
	}
	if victim == "" {
		checkNoVictim(t, byID, len(receipts), n, storeFault)
		return
	}
	claimed := map[string]bool{}
	for _, c := range claims {
		if c.Proc == victim {
			claimed[c.ID] = true
		}
	}
	// Duplicates are allowed only for rows the killed process had
	// claimed, and then only once by the survivors.
	var dups, bad, takenOver int
	for id, rs := range byID {
		survivors := 0
		for _, r := range rs {
			if r.Proc != victim {
				survivors++
			}
		}
		if len(rs) > 1 {
			dups++
			if survivors > 1 || !claimed[id] {
				bad++
			}
		}
		if survivors == len(rs) && claimed[id] {
			takenOver++
		}
	}
	t.Logf("%d rows claimed by %s were dispatched by the survivors after its lease lapsed; "+
		"%d messages were received twice, %d of them outside the rows %s had claimed", takenOver+dups, victim, dups, bad, victim)
	if bad != 0 {
		t.Errorf("%d duplicated messages were not claimed by the killed process, or were received twice by survivors", bad)
	}
	if takenOver+dups == 0 {
		t.Errorf("%s held no claimed rows when it was killed: the kill was not mid-dispatch", victim)
	}
}

func checkNoVictim(t testing.TB, byID map[string][]Receipt, total, n int, storeFault bool) {
	t.Helper()
	if !storeFault {
		if total != n {
			t.Errorf("%d receipts, want exactly %d: duplicates without any failure", total, n)
		}
		return
	}
	// Duplicates only of rows whose delete the store refused, and each
	// sent once more at most.
	most := 0
	for _, rs := range byID {
		most = max(most, len(rs))
	}
	t.Logf("a worker could not settle rows it handed over (the store refused): %d duplicates", total-n)
	if most > 2 {
		t.Errorf("a message was received %d times; a refused delete explains one more at most", most)
	}
}
