package bus

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/postbus/bus/internal/dispatch"
	"github.com/postbus/bus/internal/loop"
)

// Bus is one endpoint's connection to the transport: it sends, publishes,
// schedules, receives and dispatches. Create it with New, register handlers
// and routes, then Start it. A Bus is safe for concurrent use.
type Bus struct {
	cfg       Config
	log       *slog.Logger
	transport Transport
	identity  string         // the transport's identity, stamped on scheduled rows
	store     ScheduledStore // nil when the persistence cannot schedule
	ids       *idGenerator
	names     typeNames
	clock     Clock

	mu       sync.Mutex
	state    state
	handlers map[string]*handlerSet // by message type name
	routes   map[string]string      // command type name -> endpoint
	outgoing PipelineFunc
	incoming PipelineFunc

	warnOnce     sync.Once // the non-durable persistence warning
	overlapOnce  sync.Once // the warning of an overlap guard the persistence lacks
	storeBreaker *dispatch.Breaker

	stopReceiving context.CancelFunc // ends Transport.Receive and the dispatcher
	stopHandlers  context.CancelFunc // cancels handlers still running when Stop's ctx ends
	handlerCtx    context.Context
	running       sync.WaitGroup // receive loop and dispatcher
	dispatcher    atomic.Pointer[dispatch.Dispatcher]
	retryStore    ScheduledStore // store for delayed retries; nil when they are skipped
	outbox        OutboxStore    // set when Config.Outbox.Enabled
	unconcluded   atomic.Int64   // deliveries in a row that could not be concluded
	metrics       metrics
	recur         recurringState // schedules of AddRecurring
	runtime       runtimeState   // schedules of SetRecurring
}

type state int

const (
	stateNew state = iota
	stateStarted
	stateClosed
)

// New validates cfg and returns a bus that is not started yet.
func New(cfg Config) (*Bus, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	b := &Bus{
		cfg:       cfg,
		log:       cfg.Logger.With(slog.String(logKeyEndpoint, cfg.Endpoint)),
		transport: cfg.Transport,
		identity:  identityOf(cfg.Transport),
		ids:       newIDGenerator(),
		clock:     cfg.Clock,
		handlers:  map[string]*handlerSet{},
		routes:    map[string]string{},
	}
	b.store, _ = cfg.Persistence.(ScheduledStore)
	b.runtime.poke = make(chan struct{}, 1)
	if m, ok := cfg.Persistence.(*MemoryPersistence); ok {
		m.adoptClock(cfg.Clock)
	}
	b.retryStore = b.delayedRetryStore()
	if cfg.Outbox.Enabled {
		b.outbox = cfg.Persistence.(OutboxStore) // validate checked it
	}
	b.storeBreaker = b.newBreaker("store", cfg.CircuitBreakers.Store)
	b.outgoing = chain(cfg.Outgoing, b.deliverOutgoing)
	b.incoming = chain(cfg.Incoming, b.invokeHandlers)
	b.handlerCtx, b.stopHandlers = context.WithCancel(context.Background())
	return b, nil
}

// Endpoint returns the endpoint name.
func (b *Bus) Endpoint() string { return b.cfg.Endpoint }

// Start sets up the persistence (Setup) and the transport (Provision) unless
// Config.SkipSetup is set, then starts receiving and dispatching. Send-only
// buses only set up. Start returns once the bus is running.
//
// Start waits for a store that cannot be reached yet: while Setup (or
// Provision) fails with an error matching ErrStoreUnavailable it tries
// again, after waits of 100 ms doubling to 2 s, until Config.StartTimeout
// or ctx ends, logging each distinct failure once at Warn; then its error
// matches ErrStoreUnavailable (and ErrStartTimeout when StartTimeout
// ended) and carries the last failure. Any other error of Setup (wrong
// password, unknown database) fails Start at once.
//
// First, when the persistence reports its pool (PoolReporter), Start checks
// that it can serve the bus: with the outbox on, Concurrency handlings
// holding a connection each, plus the dispatcher's and a transport's that
// shares the pool. A pool too small is a *ConfigError naming the numbers;
// a pool whose callers take turns (SQLite) gets one warning instead.
//
// With recurring schedules (AddRecurring), Start also declares and
// reconciles them before the dispatcher claims anything; when that fails,
// Start stops the bus and returns the error.
func (b *Bus) Start(ctx context.Context) error {
	if err := b.start(ctx); err != nil {
		return err
	}
	if err := b.startRecurring(ctx); err != nil {
		_ = b.Stop(ctx)
		return err
	}
	return nil
}

func (b *Bus) start(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case stateStarted:
		return ErrAlreadyStarted
	case stateClosed:
		return ErrClosed
	}
	if err := b.checkPool(); err != nil {
		return err
	}
	if !b.cfg.SkipSetup {
		if err := b.setupLocked(ctx); err != nil {
			return err
		}
	}
	ready := b.recur.prepare()
	b.state = stateStarted
	if o, ok := b.cfg.Observer.(BusObserver); ok {
		o.BusStarted(b)
	}
	if b.cfg.SendOnly {
		return nil
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	b.stopReceiving = cancel
	b.running.Go(func() { b.receiveLoop(rctx) })
	b.warnNonDurableRetries()
	if b.store != nil && !b.cfg.Dispatcher.Disabled {
		d := b.newDispatcher()
		b.dispatcher.Store(d)
		b.running.Go(func() {
			if waitRecurring(rctx, ready) {
				b.runDispatcher(rctx, d)
			}
		})
	}
	return nil
}

// setupLocked runs the persistence's Setup and the transport's Provision
// within Config.StartTimeout, each retried while its error says the store
// cannot be reached (see untilReachable), so Start waits for a database
// that is not up yet, and with a broker or database down returns a clear
// error instead of waiting for ever.
func (b *Bus) setupLocked(ctx context.Context) error {
	sctx := ctx
	if b.cfg.StartTimeout > 0 {
		var cancel context.CancelFunc
		sctx, cancel = context.WithTimeout(ctx, b.cfg.StartTimeout)
		defer cancel()
	}
	if s, ok := b.cfg.Persistence.(storeSetup); ok {
		st := startStep{what: "persistence setup", key: logKeyStore, name: describe(b.cfg.Persistence), run: s.Setup}
		if err := b.untilReachable(ctx, sctx, st); err != nil {
			return err
		}
	}
	topo := b.topologyLocked()
	st := startStep{what: "provision transport", key: logKeyTransport, name: describe(b.transport),
		run: func(ctx context.Context) error { return b.transport.Provision(ctx, topo) }}
	return b.untilReachable(ctx, sctx, st)
}

func (b *Bus) topologyLocked() Topology {
	t := Topology{Queues: []string{b.cfg.ErrorQueue, b.cfg.DeadLetterQueue}}
	if !b.cfg.SendOnly {
		t.Queue = b.cfg.Endpoint
		for name, hs := range b.handlers {
			if hs.event {
				t.Events = append(t.Events, name)
			}
		}
	}
	return t
}

func (b *Bus) receiveLoop(ctx context.Context) {
	opts := ReceiveOptions{Concurrency: b.cfg.Concurrency}
	for ctx.Err() == nil {
		err := b.transport.Receive(ctx, b.cfg.Endpoint, opts, b.onDelivery)
		if err == nil || ctx.Err() != nil {
			return
		}
		b.log.Error("receive failed; retrying", slog.Any(logKeyError, err))
		if !loop.Sleep(ctx, b.clock, receiveRetryDelay) {
			return
		}
	}
}

// Stop stops receiving and dispatching, waits for the handlers in flight
// until ctx ends (then cancels their contexts), and closes the bus: every
// later call returns ErrClosed, except Stop, which returns nil, so a
// deferred Stop after an explicit one reports nothing. Messages not yet
// handled stay in the transport; scheduled rows claimed but not sent are
// released.
func (b *Bus) Stop(ctx context.Context) error {
	b.mu.Lock()
	if b.state == stateClosed {
		b.mu.Unlock()
		return nil
	}
	wasStarted := b.state == stateStarted
	b.state = stateClosed
	b.mu.Unlock()
	b.stopRecurring()
	if o, ok := b.cfg.Observer.(BusObserver); ok && wasStarted {
		o.BusStopped(b)
	}
	if !wasStarted || b.stopReceiving == nil {
		b.stopHandlers()
		return nil
	}
	b.stopReceiving()
	done := make(chan struct{})
	go func() { b.running.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		// Handlers see their ctx cancelled, fail, and the transport hands
		// their messages back for redelivery; a handler that ignores its ctx
		// is not waited for.
		err = fmt.Errorf("bus: stop: handlers still running: %w", ctx.Err())
	}
	b.stopHandlers()
	return err
}

func (b *Bus) checkOpen() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == stateClosed {
		return ErrClosed
	}
	return nil
}

// settleTimeout bounds one store call that settles work the caller's ctx
// no longer waits for (a rollback, an overlap guard's end), as it bounds
// the dispatcher's settling calls.
const settleTimeout = dispatch.SettleTimeout
