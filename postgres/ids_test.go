package postgres_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/postgres"
)

type foreignJob struct{ N int }

func (foreignJob) MessageName() string { return "postgres_test.ForeignJob" }

// foreign hands queue an envelope with the given ID, as a producer that
// does not use Postbus would.
func foreign(t *testing.T, tr bus.Transport, queue, id string, n int) {
	t.Helper()
	env := &bus.Envelope{ID: id, Type: foreignJob{}.MessageName(), Kind: bus.KindCommand, ContentType: "application/json",
		Body: []byte(`{"N":` + string(rune('0'+n)) + `}`), Destination: queue, SentAt: time.Now().UTC()}
	if err := tr.Send(t.Context(), queue, env); err != nil {
		t.Fatal(err)
	}
}

// errorQueue collects what reaches the memory transport's error queue.
func errorQueue(t *testing.T, tr bus.Transport) func() []*bus.Envelope {
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var got []*bus.Envelope
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = tr.Receive(ctx, "error", bus.ReceiveOptions{Concurrency: 1}, func(_ context.Context, env *bus.Envelope) error {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, env)
			return nil
		})
	}()
	t.Cleanup(func() { cancel(); <-done })
	return func() []*bus.Envelope {
		mu.Lock()
		defer mu.Unlock()
		return append([]*bus.Envelope(nil), got...)
	}
}

// The inbox cleaned IDs before keying them, so "msg-\xff" and "msg-\xfe",
// or "a\x00b" and "ab", shared one inbox row and the second message was
// skipped as a duplicate. Now IDs are compared byte for byte: an ID the
// store cannot hold is refused, never merged with another.
func TestInboxKeepsMessageIDsApartByteForByte(t *testing.T) {
	t.Parallel()
	store := newStore(t, testPool(t), postgres.Options{})
	ctx := ctxTimeout(t, time.Minute)
	for _, pair := range [][2]string{{"msg-\xff", "msg-\xfe"}, {"a\x00b", "ab"}} {
		for _, id := range pair {
			tx, handled, err := store.BeginHandling(ctx, "orders", id)
			if handled {
				t.Errorf("BeginHandling(%q) reports it handled: it shares the inbox row of another ID", id)
				continue
			}
			if err != nil {
				continue // refused: an ID the store cannot key
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// Two messages from a foreign producer whose IDs differ only in bytes the
// inbox cleaned away: the second was skipped as a duplicate. Now neither
// is lost: each is handled or moved to the error queue with the reason.
func TestForeignMessageIDsDoNotShareAnInboxRow(t *testing.T) {
	t.Parallel()
	store := newStore(t, testPool(t), postgres.Options{})
	tr := bus.NewMemoryTransport()
	var handled atomic.Int32
	b := bustest.StartBus(t, bus.Config{Endpoint: "foreign-inbox", Transport: tr, Persistence: store,
		Outbox: bus.OutboxConfig{Enabled: true}}, func(b *bus.Bus) {
		_ = bus.Handle(b, func(context.Context, foreignJob) error { handled.Add(1); return nil })
	})
	failed := errorQueue(t, tr)
	ids := []string{"msg-\xff", "msg-\xfe", "a\x00b", "ab"}
	for i, id := range ids {
		foreign(t, tr, "foreign-inbox", id, i)
	}
	deadline := time.Now().Add(30 * time.Second)
	for int(handled.Load())+len(failed()) < len(ids) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if h, f := int(handled.Load()), len(failed()); h+f != len(ids) {
		t.Fatalf("%d handled + %d in the error queue, want %d: a message was skipped as another's duplicate", h, f, len(ids))
	}
	if d := b.Metrics().Duplicates; d != 0 {
		t.Errorf("Metrics().Duplicates = %d, want 0: the IDs are all different", d)
	}
	for _, env := range failed() {
		if reason := env.Header(bus.HeaderFailureReason); !strings.Contains(reason, "message ID") {
			t.Errorf("error queue message %q has reason %q, want it to name the message ID", env.ID, reason)
		}
	}
}

// A failing message from a foreign producer whose ID the store cannot key
// could never get its delayed-retry row: it bounced in the input queue
// forever. Now it goes to the error queue, with the reason, after its
// immediate attempts.
func TestForeignMessageIDWithoutRetryRowGoesToErrorQueue(t *testing.T) {
	t.Parallel()
	store := newStore(t, testPool(t), postgres.Options{})
	tr := bus.NewMemoryTransport()
	var attempts atomic.Int32
	bustest.StartBus(t, bus.Config{Endpoint: "foreign-retry", Transport: tr, Persistence: store,
		Retries: bus.RetryConfig{Immediate: 1, Delayed: 3, DelayedBackoff: func(int) time.Duration { return time.Millisecond }}},
		func(b *bus.Bus) {
			_ = bus.Handle(b, func(context.Context, foreignJob) error { attempts.Add(1); return errors.New("always fails") })
		})
	failed := errorQueue(t, tr)
	foreign(t, tr, "foreign-retry", "msg-\xff", 1)
	deadline := time.Now().Add(30 * time.Second)
	for len(failed()) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	got := failed()
	if len(got) != 1 {
		t.Fatalf("%d messages in the error queue after %d attempts, want 1: the message bounces in the input queue", len(got), attempts.Load())
	}
	if n := attempts.Load(); n != 2 {
		t.Errorf("handler ran %d times, want 2 (the immediate attempts, no delayed retry)", n)
	}
	if reason := got[0].Header(bus.HeaderFailureReason); !strings.Contains(reason, "always fails") || !strings.Contains(reason, "no delayed retry") {
		t.Errorf("failure reason %q, want the handler's error and why there is no delayed retry", reason)
	}
	if got[0].ID != "msg-\xff" {
		t.Errorf("error queue message has ID %q, want the original byte for byte", got[0].ID)
	}
}

// A cancel in a caller's transaction cleaned the ID before matching it, so
// cancelling "a\x00b" removed the row of "ab".
func TestCancelInTxNeverMatchesACleanedID(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	store := newStore(t, pool, postgres.Options{})
	ctx := ctxTimeout(t, time.Minute)
	if err := store.StoreOutgoing(ctx, []bus.OutgoingMessage{{ID: "ab", Kind: bus.KindCommand, Envelope: []byte("x"), DueAt: time.Now().Add(time.Hour)}}); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	ok, joined, err := store.CancelOutgoingInTx(postgres.WithTx(ctx, tx), "a\x00b")
	if err != nil || !joined || ok {
		t.Fatalf("CancelOutgoingInTx(a\\x00b) = %v, %v, %v; want false, true, nil", ok, joined, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := store.CancelOutgoing(ctx, "ab"); err != nil || !ok {
		t.Fatalf("the row of ab is gone: CancelOutgoing(ab) = %v, %v", ok, err)
	}
}
