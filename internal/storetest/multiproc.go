package storetest

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
)

// Workers is what the worker tests need from a module: its store on a
// fresh table (with the receipts and claims tables the worker writes),
// how to start a worker on it and how to read what the workers did.
type Workers struct {
	Store   bus.ScheduledStore              // the store under test, on the fresh table
	Space   string                          // the WorkerSpec.Space of that table
	Command func(spec WorkerSpec) *exec.Cmd // the worker process of spec, not started
	// Progress counts the rows left in the store's table and the distinct
	// messages received.
	Progress func(ctx context.Context) (left, received int, err error)
	// Receipts and Claims read what the workers recorded.
	Receipts func(ctx context.Context) ([]Receipt, error)
	Claims   func(ctx context.Context) ([]Claim, error)
}

// Start starts the worker of spec (Space filled in) and waits for it to
// print "ready" (drivertest.StartWorker); its log goes to os.Stderr and,
// when not nil, to logs.
func (w Workers) Start(t *testing.T, spec WorkerSpec, logs io.Writer) (*exec.Cmd, <-chan string) {
	t.Helper()
	spec.Space = w.Space
	cmd := w.Command(spec)
	cmd.Stderr = os.Stderr
	if logs != nil {
		cmd.Stderr = io.MultiWriter(os.Stderr, logs)
	}
	return cmd, drivertest.StartWorker(t, cmd)
}

// MultiProcess says how the multi-process test runs.
type MultiProcess struct {
	N         int           // messages, due within one second
	Lease     time.Duration // the workers' lease
	HangAfter int64         // when the process to kill hangs (WorkerSpec.HangAfter)
	// VictimFirst starts the process to kill alone, and the others once it
	// hangs, so they cannot claim every row before it handled HangAfter.
	VictimFirst bool
	Within      time.Duration // how long delivering every message may take
}

// AbandonedSettle is what a worker's dispatcher logs when the store failed
// every attempt to delete rows it had handed over until their lease was
// about to end: those rows are handed over again after the lease, a
// duplicate the store's fault explains (on a shared server, another suite
// can exhaust its connections).
const AbandonedSettle = "cannot settle dispatched rows; they will be dispatched again after their lease"

// RunMultiProcess runs three worker processes (p1, p2, p3) that dispatch
// mp.N messages due within the same second from one table; every handler
// records each receipt in a table without a unique key, so duplicates
// would show. With kill, p2 is SIGKILLed mid-dispatch: the survivors send
// its claimed rows after the lease lapses, and only those may arrive
// twice.
func RunMultiProcess(t *testing.T, w Workers, mp MultiProcess, kill bool) {
	ctx := drivertest.Ctx(t, mp.Within+4*time.Minute)
	procs := map[string]*exec.Cmd{}
	var hung <-chan string
	logs := new(bustest.LogBuffer) // every worker's log, also on os.Stderr
	start := func(names ...string) {
		for _, name := range names {
			spec := WorkerSpec{Name: name, Lease: mp.Lease}
			if kill && name == "p2" {
				spec.HangAfter = mp.HangAfter // mid-batch: the SIGKILL lands with claimed rows unsettled
			}
			var lines <-chan string
			procs[name], lines = w.Start(t, spec, logs)
			if name == "p2" {
				hung = lines
			}
		}
	}
	if kill && mp.VictimFirst {
		start("p2")
	} else {
		start("p1", "p2", "p3")
	}
	// Due within one second, starting on the second after next, stored in
	// one call as the bus would store them.
	at := time.Now().Truncate(time.Second).Add(2 * time.Second)
	if err := w.Store.StoreOutgoing(ctx, Ticks(mp.N, at, time.Second)); err != nil {
		t.Fatal(err)
	}
	if late := time.Since(at); late > 0 {
		t.Logf("storing took until %v after the first due time", late.Round(time.Millisecond))
	}
	victim := ""
	if kill {
		victim = "p2"
		WaitLine(t, hung, "hung", 2*time.Minute)
		if mp.VictimFirst {
			start("p1", "p3")
		}
		if err := procs[victim].Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = procs[victim].Wait()
		delete(procs, victim)
		t.Logf("killed %s mid-dispatch", victim)
	}
	waitDelivered(t, ctx, w, mp.N, mp.Within)
	for name, cmd := range procs {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			t.Errorf("worker %s: %v", name, err)
		}
	}
	receipts, err := w.Receipts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var claims []Claim
	if victim != "" {
		if claims, err = w.Claims(ctx); err != nil {
			t.Fatal(err)
		}
	}
	CheckReceipts(t, receipts, claims, mp.N, at, victim, strings.Contains(logs.String(), AbandonedSettle))
}

// waitDelivered waits until the table is empty and every message was
// received.
func waitDelivered(t *testing.T, ctx context.Context, w Workers, n int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		left, distinct, err := w.Progress(ctx)
		if err != nil {
			// The server is shared: another suite may restart it. Poll on.
			t.Logf("polling: %v", err)
		} else if left == 0 && distinct == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %d rows left, %d of %d messages received", within, left, distinct, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Ticks returns n rows of Tick, spread evenly over spread from at (all
// due at at when spread is 0), for the workers' transport.
func Ticks(n int, at time.Time, spread time.Duration) []bus.OutgoingMessage {
	msgs := make([]bus.OutgoingMessage, n)
	for i := range msgs {
		id := fmt.Sprintf("01900000-0000-7000-8000-%012d", i)
		due := at.Add(time.Duration(i) * spread / time.Duration(n))
		env := &bus.Envelope{ID: id, Type: TickType, Kind: bus.KindCommand, Body: fmt.Appendf(nil, `{"N":%d}`, i),
			ContentType: "application/json", Source: "storetest", Destination: Endpoint, SentAt: time.Now().UTC(), DueAt: due}
		msgs[i] = bus.OutgoingMessage{ID: id, Kind: bus.KindCommand, Type: TickType, Envelope: bus.MarshalEnvelope(env),
			DueAt: due, Transport: TransportIdentity}
	}
	return msgs
}

// WaitLine fails t unless the next line on lines is want, within limit.
func WaitLine(t testing.TB, lines <-chan string, want string, limit time.Duration) {
	t.Helper()
	select {
	case line := <-lines:
		if line != want {
			t.Fatalf("worker printed %q, want %q", line, want)
		}
	case <-time.After(limit):
		t.Fatalf("worker never printed %q", want)
	}
}
