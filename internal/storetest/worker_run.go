package storetest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/postbus/bus"
)

// WorkerStore is what a module opens for a worker process.
type WorkerStore struct {
	// Persistence is the store under test, its claims logged (ClaimLogger).
	Persistence bus.Persistence
	// Record records a receipt (its Received left to the database's clock).
	Record func(ctx context.Context, r Receipt) error
	// Close releases what the store holds, after the bus stopped; nil: nothing.
	Close func()
}

// OpenWorker opens the store of a worker process for spec.
type OpenWorker func(ctx context.Context, spec WorkerSpec, log *slog.Logger) (WorkerStore, error)

// WorkerMain is the main function of a worker program: it reads the spec
// from the command line, runs the worker until SIGTERM and exits.
func WorkerMain(open OpenWorker) {
	spec, err := ParseWorkerSpec(os.Args[1:])
	if err == nil {
		err = runUntilSignal(spec, open)
	}
	exitWorker(err)
}

// WorkerIfAsked runs this process as a worker, and exits, when Reexec
// started it; otherwise it returns.
func WorkerIfAsked(open OpenWorker) {
	v, ok := os.LookupEnv(WorkerEnv)
	if !ok {
		return
	}
	spec, err := ParseWorkerSpec(strings.Fields(v))
	if err == nil {
		err = runUntilSignal(spec, open)
	}
	exitWorker(err)
}

func exitWorker(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func runUntilSignal(spec WorkerSpec, open OpenWorker) error {
	return UntilSignal(func(ctx context.Context) error { return RunWorker(ctx, spec, open) })
}

// UntilSignal runs run with a ctx that ends at SIGTERM or an interrupt.
func UntilSignal(run func(ctx context.Context) error) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return run(ctx)
}

// Serve starts b, prints "ready", and stops b once ctx ends, allowing it
// stopWithin: the life of a worker's bus.
func Serve(ctx context.Context, b *bus.Bus, stopWithin time.Duration) error {
	if err := b.Start(ctx); err != nil {
		return err
	}
	fmt.Println("ready")
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), stopWithin)
	defer cancel()
	return b.Stop(sctx)
}

// RunWorker runs a bus whose dispatcher claims from the store open returns
// and whose handler records each Tick it receives, through a transport
// that hands a message to the handler inside Send (SyncTransport). It
// prints "ready" once started and runs until ctx ends; see
// WorkerSpec.HangAfter for "hung".
func RunWorker(ctx context.Context, spec WorkerSpec, open OpenWorker) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("proc", spec.Name)
	st, err := open(ctx, spec, log)
	if err != nil {
		return err
	}
	if st.Close != nil {
		defer st.Close()
	}
	b, err := bus.New(bus.Config{Endpoint: Endpoint, Transport: NewSyncTransport(), Persistence: st.Persistence,
		Logger: log, Dispatcher: bus.DispatcherConfig{Lease: spec.Lease, LookAhead: spec.LookAhead}})
	if err != nil {
		return err
	}
	var handled atomic.Int64
	var hung sync.Once
	err = bus.Handle(b, func(ctx context.Context, m Tick) error {
		if spec.HangAfter < 0 || spec.HangAfter > 0 && handled.Add(1) > spec.HangAfter {
			hung.Do(func() { fmt.Println("hung") })
			select {} // until SIGKILL: the claimed batch stays unsettled
		}
		env := bus.IncomingMessage(ctx)
		return st.Record(ctx, Receipt{ID: env.ID, N: m.N, Proc: spec.Name, Due: env.DueAt})
	})
	if err != nil {
		return err
	}
	return Serve(ctx, b, 20*time.Second)
}

// SyncTransport is an in-memory transport that runs the receiving handler
// inside Send, so Send returns nil only once the handler has recorded the
// message. The bus's MemoryTransport queues in process memory instead: a
// SIGKILL would lose what it had accepted but not yet handled, which is
// the transport's loss, not the store's. With this one, every row the
// dispatcher deleted has been recorded, so a test proves the store's
// at-least-once guarantee end to end. Its identity is TransportIdentity.
type SyncTransport struct {
	mu       sync.Mutex
	handlers map[string]bus.DeliveryHandler
	ready    chan struct{} // closed once a queue has a receiver
}

// NewSyncTransport returns a SyncTransport with no receivers.
func NewSyncTransport() *SyncTransport {
	return &SyncTransport{handlers: map[string]bus.DeliveryHandler{}, ready: make(chan struct{})}
}

// Identity names the transport on the scheduled rows.
func (t *SyncTransport) Identity() string { return TransportIdentity }

// Provision does nothing.
func (t *SyncTransport) Provision(context.Context, bus.Topology) error { return nil }

// Send waits for a receiver, then runs the queue's handler.
func (t *SyncTransport) Send(ctx context.Context, queue string, env *bus.Envelope) error {
	select {
	case <-t.ready:
	case <-ctx.Done():
		return ctx.Err()
	}
	t.mu.Lock()
	h := t.handlers[queue]
	t.mu.Unlock()
	if h == nil {
		return nil // the error queue: nothing in these tests reads it
	}
	return h(context.WithoutCancel(ctx), env.Clone())
}

// Publish drops the event.
func (t *SyncTransport) Publish(context.Context, *bus.Envelope) error { return nil }

// Receive registers h for queue until ctx ends.
func (t *SyncTransport) Receive(ctx context.Context, queue string, _ bus.ReceiveOptions, h bus.DeliveryHandler) error {
	t.mu.Lock()
	t.handlers[queue] = h
	select {
	case <-t.ready:
	default:
		close(t.ready)
	}
	t.mu.Unlock()
	<-ctx.Done()
	t.mu.Lock()
	delete(t.handlers, queue)
	t.mu.Unlock()
	return nil
}
