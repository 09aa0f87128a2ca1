package bustest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/internal/poll"
)

// OutboxHarness is what OutboxTests needs from a driver.
type OutboxHarness struct {
	// Store is a fresh, empty, set-up store (a schema or file of its own).
	Store bus.OutboxStore
	// Insert writes a business row with key in the transaction ctx carries
	// (a handler's, or a caller's); it fails when ctx carries none.
	Insert func(ctx context.Context, key string) error
	// Count returns how many business rows have key, outside any transaction.
	Count func(ctx context.Context, key string) (int, error)
	// Begin opens a caller's transaction and returns ctx carrying it (the
	// driver's WithTx), with its commit and rollback.
	Begin func(ctx context.Context) (txCtx context.Context, commit, rollback func() error, err error)
	// Crash runs a child process that calls RunOutboxChild with args on
	// the same store, waits until it printed "committed", SIGKILLs it and
	// returns: usually CrashOutboxChild with the environment the child
	// needs to open the store. Nil: the crash case is skipped (and fails
	// under CI=true).
	Crash func(t *testing.T, args OutboxChildArgs)
}

// OutboxFactory returns a harness for one test case.
type OutboxFactory func(t *testing.T) OutboxHarness

// Messages of the outbox cases.
type (
	// PlaceOutboxOrder is the command the outbox cases handle.
	PlaceOutboxOrder struct{ Key string }
	// OutboxOrderPlaced is the event its handler publishes.
	OutboxOrderPlaced struct{ Key string }
	// OutboxReminder is the delayed message its handler sends.
	OutboxReminder struct{ Key string }
)

// OutboxTests runs the transactional outbox and inbox contract against a
// driver's OutboxStore, through real buses on an in-memory transport.
func OutboxTests(t *testing.T, newHarness OutboxFactory) {
	cases := []struct {
		name string
		fn   func(t *testing.T, h OutboxHarness, ns string)
	}{
		{"CommitSendsEverythingWithoutWaitingForAPoll", testOutboxCommit},
		{"HandlerErrorRollsBackWritesAndMessages", testOutboxRollback},
		{"DuplicateDeliveryIsHandledOnce", testOutboxDuplicate},
		{"ConcurrentDeliveriesOfOneIDAreHandledOnce", testOutboxConcurrent},
		{"CallerTransactionSendsOnlyOnCommit", testOutboxCallerTx},
		{"CrashAfterCommitLosesNothing", testOutboxCrash},
		{"CancelScheduledInAFailedHandlingIsRolledBack", testOutboxCancelRolledBack},
		{"CancelScheduledInASucceededHandlingCommits", testOutboxCancelCommitted},
		{"CancelScheduledInACallerTxFollowsItsEnd", testOutboxCancelInCallerTx},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.fn(t, newHarness(t), Namespace())
		})
	}
}

// outboxWorld is an endpoint handling PlaceOutboxOrder through the outbox
// and a subscriber recording what it publishes and sends.
type outboxWorld struct {
	tr        *bus.MemoryTransport
	endpoint  string
	events    *Recorder[OutboxOrderPlaced]
	reminders *Recorder[OutboxReminder]
	calls     sync.Map        // key -> handler calls
	looks     dispatcherLooks // observes the outbox endpoint's buses
}

func newOutboxWorld(t *testing.T, ns string) *outboxWorld {
	w := &outboxWorld{tr: bus.NewMemoryTransport(), endpoint: ns + "-orders",
		events: NewRecorder[OutboxOrderPlaced](), reminders: NewRecorder[OutboxReminder]()}
	StartBus(t, bus.Config{Endpoint: ns + "-billing", Transport: w.tr}, func(b *bus.Bus) {
		_ = bus.Handle(b, w.events.Handler)
		_ = bus.Handle(b, w.reminders.Handler)
	})
	return w
}

// handler inserts a business row, publishes an event and sends a delayed
// reminder; it fails when the key says so.
func (w *outboxWorld) handler(b *bus.Bus, h OutboxHarness, billing string) func(context.Context, PlaceOutboxOrder) error {
	return func(ctx context.Context, m PlaceOutboxOrder) error {
		n, _ := w.calls.LoadOrStore(m.Key, new(int64))
		*(n.(*int64))++
		if err := h.Insert(ctx, m.Key); err != nil {
			return err
		}
		if err := b.Publish(ctx, OutboxOrderPlaced(m)); err != nil {
			return err
		}
		if err := b.Send(ctx, OutboxReminder(m), bus.To(billing), bus.DeliverAfter(200*time.Millisecond)); err != nil {
			return err
		}
		if strings.HasPrefix(m.Key, "fail") {
			return fmt.Errorf("handler fails after its writes and sends")
		}
		return nil
	}
}

func (w *outboxWorld) start(t *testing.T, h OutboxHarness, ns string, poll time.Duration) *bus.Bus {
	return StartBus(t, bus.Config{Endpoint: w.endpoint, Transport: w.tr, Persistence: h.Store,
		Outbox:     bus.OutboxConfig{Enabled: true},
		Retries:    bus.RetryConfig{Immediate: -1, Delayed: -1},
		Observer:   &w.looks,
		Dispatcher: bus.DispatcherConfig{PollInterval: poll}}, func(b *bus.Bus) {
		_ = bus.Handle(b, w.handler(b, h, ns+"-billing"))
	})
}

func envelopeFor(ns, id, key string) *bus.Envelope {
	return &bus.Envelope{ID: id, Type: bus.MessageName(PlaceOutboxOrder{}), Kind: bus.KindCommand,
		Body: []byte(`{"Key":"` + key + `"}`), ContentType: "application/json", Destination: ns + "-orders",
		Source: ns + "-client", SentAt: time.Now().UTC()}
}

func mustCount(t *testing.T, h OutboxHarness, key string, want int) {
	t.Helper()
	n, err := h.Count(ctxFor(t), key)
	if err != nil || n != want {
		t.Fatalf("business rows for %s = %d, %v; want %d", key, n, err, want)
	}
}

func testOutboxCommit(t *testing.T, h OutboxHarness, ns string) {
	w := newOutboxWorld(t, ns)
	// A minute's poll: only the wake-up after commit can deliver in time.
	w.start(t, h, ns, time.Minute)
	start := time.Now()
	if err := w.tr.Send(ctxFor(t), w.endpoint, envelopeFor(ns, ns+"-m1", "ok-1")); err != nil {
		t.Fatal(err)
	}
	w.events.WaitFor(t, 1)
	if el := time.Since(start); el > 20*time.Second {
		t.Errorf("the event took %v after the handling: the dispatcher waited for a poll", el)
	}
	w.reminders.WaitFor(t, 1)
	mustCount(t, h, "ok-1", 1)
}

func testOutboxRollback(t *testing.T, h OutboxHarness, ns string) {
	w := newOutboxWorld(t, ns)
	b := w.start(t, h, ns, 50*time.Millisecond)
	errQ := drainQueue(t, w.tr, "error")
	if err := w.tr.Send(ctxFor(t), w.endpoint, envelopeFor(ns, ns+"-m1", "fail-1")); err != nil {
		t.Fatal(err)
	}
	errQ.WaitFor(t, 1)
	w.looks.waitEmptyClaim(t, time.Now()) // a committed row would be dispatched by now
	mustCount(t, h, "fail-1", 0)
	if w.events.Len() != 0 || w.reminders.Len() != 0 || b.Metrics().Scheduled != 0 {
		t.Errorf("a failed handling sent %d events and %d reminders", w.events.Len(), w.reminders.Len())
	}
	if _, ok, err := h.Store.NextDueOutgoing(ctxFor(t), "memory"); err != nil || ok {
		t.Errorf("a failed handling left rows in the store (%v, %v)", ok, err)
	}
}

func testOutboxDuplicate(t *testing.T, h OutboxHarness, ns string) {
	w := newOutboxWorld(t, ns)
	b := w.start(t, h, ns, 50*time.Millisecond)
	for range 2 {
		if err := w.tr.Send(ctxFor(t), w.endpoint, envelopeFor(ns, ns+"-dup", "dup-1")); err != nil {
			t.Fatal(err)
		}
	}
	w.events.WaitFor(t, 1)
	w.reminders.WaitFor(t, 1)
	poll.Eventually(t, waitTimeout, func() bool { return b.Metrics().Duplicates >= 1 }, "the duplicate to be skipped")
	w.looks.waitEmptyClaim(t, time.Now()) // a second handling's rows would be dispatched by now
	mustCount(t, h, "dup-1", 1)
	if w.events.Len() != 1 || w.reminders.Len() != 1 || b.Metrics().Duplicates != 1 {
		t.Errorf("two deliveries of one ID: %d events, %d reminders, %d duplicates skipped; want 1, 1, 1",
			w.events.Len(), w.reminders.Len(), b.Metrics().Duplicates)
	}
}

func testOutboxConcurrent(t *testing.T, h OutboxHarness, ns string) {
	w := newOutboxWorld(t, ns)
	buses := []*bus.Bus{w.start(t, h, ns, 50*time.Millisecond), w.start(t, h, ns, 50*time.Millisecond)}
	env := envelopeFor(ns, ns+"-race", "race-1")
	var wg sync.WaitGroup
	errs := make(chan error, len(buses))
	for _, b := range buses {
		wg.Go(func() { errs <- b.Receive(ctxFor(t), env.Clone()) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("Receive: %v", err)
		}
	}
	w.events.WaitFor(t, 1)
	w.looks.waitEmptyClaim(t, time.Now()) // a second handling's rows would be dispatched by now
	mustCount(t, h, "race-1", 1)
	if w.events.Len() != 1 {
		t.Errorf("%d events for one message received twice at once, want 1", w.events.Len())
	}
}

func testOutboxCallerTx(t *testing.T, h OutboxHarness, ns string) {
	w := newOutboxWorld(t, ns)
	b := w.start(t, h, ns, 50*time.Millisecond)
	for _, commit := range []bool{false, true} {
		key := fmt.Sprintf("caller-%v", commit)
		txCtx, commitFn, rollbackFn, err := h.Begin(ctxFor(t))
		if err != nil {
			t.Fatalf("Begin: %v", err)
		}
		if err := h.Insert(txCtx, key); err != nil {
			t.Fatalf("Insert: %v", err)
		}
		if err := b.Publish(txCtx, OutboxOrderPlaced{Key: key}); err != nil {
			t.Fatalf("Publish in the caller's transaction: %v", err)
		}
		end := rollbackFn
		if commit {
			end = commitFn
		}
		if err := end(); err != nil {
			t.Fatalf("end of the caller's transaction: %v", err)
		}
	}
	w.events.WaitFor(t, 1)
	w.looks.waitEmptyClaim(t, time.Now()) // the rolled-back transaction's rows would be dispatched by now
	got := w.events.Messages()
	if len(got) != 1 || got[0].Key != "caller-true" {
		t.Errorf("events %v, want only the committed one", got)
	}
	mustCount(t, h, "caller-false", 0)
	mustCount(t, h, "caller-true", 1)
}

func testOutboxCrash(t *testing.T, h OutboxHarness, ns string) {
	if h.Crash == nil {
		SkipOutsideCI(t, "the driver gives no Crash hook for the crash case")
		return
	}
	w := newOutboxWorld(t, ns)
	h.Crash(t, OutboxChildArgs{Endpoint: w.endpoint, Billing: ns + "-billing", MessageID: ns + "-crash", Key: "crash-1"})
	mustCount(t, h, "crash-1", 1)
	w.start(t, h, ns, 50*time.Millisecond) // dispatches what the killed process committed
	w.events.WaitFor(t, 1)
	w.reminders.WaitFor(t, 1)
	w.looks.waitEmptyClaim(t, time.Now()) // a row sent again would be dispatched by now
	if w.events.Len() != 1 || w.reminders.Len() != 1 {
		t.Errorf("after the crash: %d events, %d reminders; want 1 each", w.events.Len(), w.reminders.Len())
	}
}

// OutboxChildArgs is what the crash case's child process needs.
type OutboxChildArgs struct {
	Endpoint, Billing, MessageID, Key string
}

const outboxChildEnv = "POSTBUS_OUTBOX_CHILD"

// Env returns args as an environment variable for the child process.
func (a OutboxChildArgs) Env() string {
	return outboxChildEnv + "=" + strings.Join([]string{a.Endpoint, a.Billing, a.MessageID, a.Key}, "|")
}

// OutboxChild returns the arguments of the crash case when this process is
// its child (its environment has them), and false otherwise. Call it from
// TestMain; in the child, call RunOutboxChild.
func OutboxChild() (OutboxChildArgs, bool) {
	v, ok := os.LookupEnv(outboxChildEnv)
	parts := strings.Split(v, "|")
	if !ok || len(parts) != 4 {
		return OutboxChildArgs{}, false
	}
	return OutboxChildArgs{Endpoint: parts[0], Billing: parts[1], MessageID: parts[2], Key: parts[3]}, true
}

// RunOutboxChild is the crash case's child: it handles args.MessageID at
// args.Endpoint through the outbox on store (the business row, an event and
// a delayed reminder), with its dispatcher off so nothing leaves, prints
// "committed" on stdout and blocks until it is killed. It never returns.
func RunOutboxChild(store bus.OutboxStore, insert func(ctx context.Context, key string) error, args OutboxChildArgs) {
	w := &outboxWorld{endpoint: args.Endpoint}
	b, err := bus.New(bus.Config{Endpoint: args.Endpoint, Persistence: store, Logger: quietLogger(),
		Outbox: bus.OutboxConfig{Enabled: true}, Dispatcher: bus.DispatcherConfig{Disabled: true},
		Retries: bus.RetryConfig{Immediate: -1, Delayed: -1}})
	if err == nil {
		err = bus.Handle(b, w.handler(b, OutboxHarness{Insert: insert}, args.Billing))
	}
	if err == nil {
		ns := strings.TrimSuffix(args.Endpoint, "-orders")
		err = b.Receive(context.Background(), envelopeFor(ns, args.MessageID, args.Key))
	}
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	fmt.Println("committed")
	select {}
}

// CrashOutboxChild is the body of a Crash hook: it runs the test binary
// again as the crash case's child (its TestMain must call RunOutboxChild
// when OutboxChild reports true), with args and env added to its
// environment, waits until the child printed "committed", SIGKILLs it and
// waits for it to exit. It fails the test if the child exits or stays
// silent for 2 minutes first.
func CrashOutboxChild(t *testing.T, args OutboxChildArgs, env ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), args.Env()), env...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out := bufio.NewScanner(stdout)
	committed := false
	var lines []string
	for !committed && out.Scan() {
		lines = append(lines, out.Text())
		committed = out.Text() == "committed"
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL
		t.Errorf("kill the child: %v", err)
	}
	_ = cmd.Wait() // killed: its error says so
	if !committed {
		t.Fatalf("the child did not commit: output %q, %v", lines, out.Err())
	}
}
