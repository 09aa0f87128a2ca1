package e2e_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/internal/drivertest"
)

// Tick is the message every end-to-end test schedules.
type Tick struct{ N int }

// recorder knows when each scheduled message is due and records every
// handler call, by message ID, so tests assert outcomes: all delivered,
// none early, how many times.
type recorder struct {
	mu         sync.Mutex
	due        map[string]time.Time
	got        map[string][]time.Time
	unexpected int
}

func newRecorder() *recorder {
	return &recorder{due: map[string]time.Time{}, got: map[string][]time.Time{}}
}

func (r *recorder) expect(id string, due time.Time) {
	r.mu.Lock()
	r.due[id] = due
	r.mu.Unlock()
}

// handle is the handler of Tick.
func (r *recorder) handle(ctx context.Context, _ Tick) error {
	now := time.Now()
	id := bus.IncomingMessage(ctx).ID
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.due[id]; !ok {
		r.unexpected++
	}
	r.got[id] = append(r.got[id], now)
	return nil
}

// received counts the expected messages handled at least once.
func (r *recorder) received() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for id := range r.due {
		if len(r.got[id]) > 0 {
			n++
		}
	}
	return n
}

func (r *recorder) calls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, ts := range r.got {
		n += len(ts)
	}
	return n
}

// waitAll waits until every expected message was handled at least once.
func (r *recorder) waitAll(t testing.TB, timeout time.Duration) {
	t.Helper()
	r.mu.Lock()
	n := len(r.due)
	r.mu.Unlock()
	drivertest.Eventually(t, timeout, func() bool { return r.received() == n }, "all %d messages handled", n)
}

// check asserts the outcome: every expected message handled, none before
// its due time, no unknown message, and, when exactlyOnce, no duplicate.
// It logs the counts and the lateness.
func (r *recorder) check(t testing.TB, exactlyOnce bool) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	var missing, early, dups int
	var late []time.Duration
	for id, due := range r.due {
		ts := r.got[id]
		if len(ts) == 0 {
			missing++
			if missing <= 5 {
				t.Errorf("message %s (due %s) never handled", id, due.Format(time.StampMilli))
			}
			continue
		}
		dups += len(ts) - 1
		first := slices.MinFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
		for _, at := range ts {
			if at.Before(due) {
				early++
				if early <= 5 {
					t.Errorf("message %s handled %v before its due time", id, due.Sub(at))
				}
			}
		}
		late = append(late, first.Sub(due))
	}
	slices.Sort(late)
	pct := func(p float64) time.Duration {
		if len(late) == 0 {
			return 0
		}
		return late[int(p*float64(len(late)-1))].Round(time.Millisecond)
	}
	t.Logf("%d messages: %d handled, %d missing, %d early, %d duplicate calls, %d unexpected; lateness p50 %v p99 %v max %v",
		len(r.due), len(r.due)-missing, missing, early, dups, r.unexpected, pct(0.5), pct(0.99), pct(1))
	if missing > 0 {
		t.Errorf("%d of %d messages never handled", missing, len(r.due))
	}
	if early > 0 {
		t.Errorf("%d handler calls before the due time", early)
	}
	if r.unexpected > 0 {
		t.Errorf("%d handler calls for messages this test never scheduled", r.unexpected)
	}
	if exactlyOnce && dups > 0 {
		t.Errorf("%d duplicate handler calls, want exactly once", dups)
	}
}

// schedule sends n Ticks to endpoint, due from first over spread, split
// between the buses, with a few concurrent senders per bus. Due times are
// whole milliseconds, which every store keeps exactly.
func schedule(t testing.TB, rec *recorder, buses []*bus.Bus, endpoint, prefix string, n int, first time.Time, spread time.Duration) {
	t.Helper()
	first = first.Truncate(time.Millisecond)
	const senders = 16
	ctx := ctxT(t, 2*time.Minute)
	var wg sync.WaitGroup
	errs := make(chan error, senders*len(buses))
	for bi, b := range buses {
		for s := range senders {
			wg.Go(func() {
				for i := bi*senders + s; i < n; i += senders * len(buses) {
					id := fmt.Sprintf("%s-%05d", prefix, i)
					due := first.Add(spread * time.Duration(i) / time.Duration(n)).Truncate(time.Millisecond)
					rec.expect(id, due)
					if err := b.Send(ctx, Tick{N: i}, bus.To(endpoint), bus.WithMessageID(id), bus.DeliverAt(due)); err != nil {
						errs <- fmt.Errorf("schedule %s: %w", id, err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
