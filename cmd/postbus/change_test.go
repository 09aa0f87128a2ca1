package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/postbus/bus"
)

func TestScheduledCancelAndSendNow(t *testing.T) {
	t.Parallel()
	p := bus.NewMemoryPersistence()
	seed(t, p)
	open := memoryOpener(p, nil)
	ctx := context.Background()
	r := runApp(t, open, nil, "scheduled", "cancel", "0190f5d6-0000-7000-8000-000000000000", "0190f5d6-0000-7000-8000-000000000001", "missing")
	if r.code != exitOK || !strings.Contains(r.stdout, "cancelled 2 of 3 message(s)") || !strings.Contains(r.stdout, "missing: skipped") {
		t.Fatalf("cancel: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if _, ok, _ := p.GetScheduled(ctx, "0190f5d6-0000-7000-8000-000000000000"); ok {
		t.Error("cancelled row still there")
	}
	r = runApp(t, open, nil, "scheduled", "send-now", "--json", "0190f5d6-0000-7000-8000-000000000004")
	if r.code != exitOK || !strings.Contains(r.stdout, `"count": 1`) {
		t.Fatalf("send-now: %d %q", r.code, r.stdout)
	}
	m, _, _ := p.GetScheduled(ctx, "0190f5d6-0000-7000-8000-000000000004")
	if m.DueAt.After(time.Now()) {
		t.Errorf("send-now left due at %v", m.DueAt)
	}
}

func TestFailedDelete(t *testing.T) {
	t.Parallel()
	p := bus.NewMemoryPersistence()
	seed(t, p)
	open := memoryOpener(p, nil)
	r := runApp(t, open, nil, "failed", "delete", "0190f5d6-0000-7000-9000-000000000000")
	if r.code != exitOK || r.stdout != "deleted 1 of 1 message(s)\n" {
		t.Fatalf("delete one: %d %q", r.code, r.stdout)
	}
	r = runApp(t, open, nil, "failed", "delete", "--all", "--endpoint", "billing")
	if r.code != exitOK || r.stdout != "deleted 4 of 4 message(s)\n" {
		t.Fatalf("delete all: %d %q", r.code, r.stdout)
	}
	r = runApp(t, open, nil, "failed", "delete", "--all")
	if r.code != exitOK || r.stdout != "deleted 0 of 0 message(s)\n" {
		t.Fatalf("delete nothing: %d %q", r.code, r.stdout)
	}
}

// A retry of 1,000 failures of one group sends each back exactly once and
// empties the group; the dry run before it changes nothing.
func TestRetryThousandOfOneGroup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := bus.NewMemoryPersistence()
	tr := bus.NewMemoryTransport()
	at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var msgs []bus.FailedMessage
	for i := range 1000 {
		env := &bus.Envelope{ID: fmt.Sprintf("m-%04d", i), Type: "billing.ChargeCard", Kind: bus.KindCommand, Body: []byte("{}"),
			Headers: map[string]string{bus.HeaderFailureReason: fmt.Sprintf("card %d declined", i), bus.HeaderFailureEndpoint: "billing",
				bus.HeaderFailureQueue: "billing", bus.HeaderFailureTime: at.Add(time.Duration(i) * time.Millisecond).Format(time.RFC3339Nano)}}
		msgs = append(msgs, bus.FailedFromEnvelope(env, at))
	}
	// A second group that the retry must not touch.
	other := &bus.Envelope{ID: "other", Type: "billing.Refund", Headers: map[string]string{bus.HeaderFailureReason: "timeout", bus.HeaderFailureQueue: "billing"}}
	msgs = append(msgs, bus.FailedFromEnvelope(other, at))
	if err := p.StoreFailed(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	group := msgs[0].Group
	open := memoryOpener(p, tr)

	r := runApp(t, open, nil, "failed", "retry", "--group", group, "--dry-run")
	if r.code != exitOK || !strings.HasSuffix(r.stdout, "dry run: would have retried 1000 of 1000 message(s)\n") {
		t.Fatalf("dry run: %d %q", r.code, r.stdout[max(0, len(r.stdout)-200):])
	}
	if n, _ := p.CountFailed(ctx, bus.FailedQuery{}); n != 1001 {
		t.Fatalf("the dry run changed the store: %d", n)
	}

	var mu sync.Mutex
	seen := map[string]int{}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = tr.Receive(rctx, "billing", bus.ReceiveOptions{Concurrency: 8}, func(_ context.Context, env *bus.Envelope) error {
			mu.Lock()
			seen[env.ID]++
			mu.Unlock()
			return nil
		})
	}()
	r = runApp(t, open, nil, "failed", "retry", "--group", group)
	if r.code != exitOK || r.stdout != "retried 1000 of 1000 message(s)\n" {
		t.Fatalf("retry: %d %q %q", r.code, r.stdout, r.stderr)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		if n >= 1000 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	<-done
	if len(seen) != 1000 {
		t.Errorf("received %d distinct messages, want 1000", len(seen))
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("%s received %d times", id, n)
		}
	}
	if n, _ := p.CountFailed(ctx, bus.FailedQuery{Group: group}); n != 0 {
		t.Errorf("%d left in the group", n)
	}
	if _, ok, _ := p.GetFailed(ctx, "other"); !ok {
		t.Error("the retry touched another group")
	}
}
