package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/postbus/bus/backend"
)

// recorder is a flush function that records each group and blocks until
// released, so a test controls when an insert "completes".
type recorder struct {
	mu      sync.Mutex
	groups  [][]string
	started chan struct{}
	release chan struct{}
}

func (r *recorder) flush(ctx context.Context, msgs []backend.OutgoingMessage) error {
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	r.mu.Lock()
	r.groups = append(r.groups, ids)
	r.mu.Unlock()
	r.started <- struct{}{}
	select {
	case <-r.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func msg(id string) []backend.OutgoingMessage { return []backend.OutgoingMessage{{ID: id}} }

func TestGrouperGroupsQueuedCalls(t *testing.T) {
	t.Parallel()
	r := &recorder{started: make(chan struct{}, 100), release: make(chan struct{})}
	b := NewGrouper(100, 1, 0, r.flush)
	var wg sync.WaitGroup
	errs := make(chan error, 11)
	wg.Go(func() { errs <- b.Store(t.Context(), msg("lead")) })
	<-r.started // the lone call went at once
	for i := range 10 {
		wg.Go(func() { errs <- b.Store(t.Context(), msg(fmt.Sprint(i))) })
	}
	waitFor(t, func() bool { b.mu.Lock(); defer b.mu.Unlock(); return len(b.queue) == 10 })
	r.release <- struct{}{} // first insert done: the ten queued go together
	<-r.started
	r.release <- struct{}{}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(r.groups) != 2 || len(r.groups[0]) != 1 || len(r.groups[1]) != 10 {
		t.Fatalf("groups = %v; want [lead] then all ten queued calls in one", r.groups)
	}
	if b.inFlight != 0 || len(b.queue) != 0 {
		t.Fatalf("batcher not idle: inFlight=%d queue=%d", b.inFlight, len(b.queue))
	}
}

func TestGrouperRespectsMaxRowsAndCancellation(t *testing.T) {
	t.Parallel()
	r := &recorder{started: make(chan struct{}, 100), release: make(chan struct{}, 100)}
	b := NewGrouper(3, 1, 0, r.flush)
	var wg sync.WaitGroup
	wg.Go(func() { _ = b.Store(t.Context(), msg("lead")) })
	<-r.started
	ctx, cancel := context.WithCancel(t.Context())
	cancelled := make(chan error, 1)
	wg.Go(func() { cancelled <- b.Store(ctx, msg("gives-up")) })
	waitFor(t, func() bool { b.mu.Lock(); defer b.mu.Unlock(); return len(b.queue) == 1 })
	cancel()
	if err := <-cancelled; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled queued call returned %v", err)
	}
	for i := range 5 {
		wg.Go(func() { _ = b.Store(t.Context(), msg(fmt.Sprint(i))) })
	}
	waitFor(t, func() bool { b.mu.Lock(); defer b.mu.Unlock(); return len(b.queue) == 5 })
	for range 3 {
		r.release <- struct{}{}
	}
	wg.Wait()
	if len(r.groups) != 3 || len(r.groups[1]) != 3 || len(r.groups[2]) != 2 {
		t.Fatalf("groups = %v; want [lead], 3 rows, 2 rows (MaxBatchRows 3, cancelled call dropped)", r.groups)
	}
	for _, g := range r.groups {
		for _, id := range g {
			if id == "gives-up" {
				t.Fatal("rows of a call cancelled while queued were inserted")
			}
		}
	}
}

func TestGroupContextEndsWhenEveryCallerGaveUp(t *testing.T) {
	t.Parallel()
	ctx1, cancel1 := context.WithCancel(t.Context())
	ctx2, cancel2 := context.WithCancel(t.Context())
	ctx, stop := groupContext([]*groupCall[backend.OutgoingMessage]{{ctx: ctx1}, {ctx: ctx2}})
	defer stop()
	cancel1()
	select {
	case <-ctx.Done():
		t.Fatal("group context ended while one caller still waits")
	case <-time.After(20 * time.Millisecond):
	}
	cancel2()
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("group context still running after every caller gave up")
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 10s")
		}
		time.Sleep(time.Millisecond)
	}
}
