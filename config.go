package bus

import (
	"cmp"
	"fmt"
	"log/slog"
	"runtime"
	"time"
)

// Config configures a bus. Every field has a documented default; the zero
// value of a field means its default.
type Config struct {
	// Endpoint is this endpoint's name and the name of its input queue.
	// Required: letters, digits, '.', '-' and '_' only, at most 200 bytes.
	Endpoint string
	// Transport carries messages. Default: a new in-memory transport (to let
	// several buses talk in memory, give them the same NewMemoryTransport()).
	// The bus never closes a transport it was given.
	Transport Transport
	// Persistence stores scheduled messages. Default: a new in-memory,
	// non-durable persistence. The bus never closes a persistence it was given.
	Persistence Persistence
	// Logger receives the bus's logs. Default: slog.Default().
	Logger *slog.Logger
	// SendOnly buses send and schedule but never receive or dispatch.
	SendOnly bool
	// SkipSetup stops Start from calling Transport.Provision and the
	// persistence's Setup, for deployments that provision ahead of time.
	SkipSetup bool
	// StartTimeout bounds the setup Start does (the persistence's Setup and
	// Transport.Provision), which waits for a broker or database that is
	// down: Start retries a Setup or Provision whose error matches
	// ErrStoreUnavailable, and broker transports wait for their broker.
	// Past it Start returns an error matching ErrStartTimeout with the
	// transport's or persistence's own (the last connection error; for a
	// store, it matches ErrStoreUnavailable too), even when Start's ctx
	// never ends. A ctx that ends sooner still wins. Default 1 minute; a
	// negative value means no bound but ctx's.
	StartTimeout time.Duration
	// Concurrency bounds the handlers running at once. Default: runtime.NumCPU().
	Concurrency int
	// ErrorQueue receives messages that failed every retry, and poison
	// messages. Default: "error".
	ErrorQueue string
	// DeadLetterQueue receives messages discarded by a message timer whose
	// sender asked for DeadLetterOnExpiry. Default: "deadletter".
	DeadLetterQueue string
	// Serializer turns messages into bodies and back. Default: JSON.
	Serializer Serializer
	// MaxMessageSize bounds a serialized body in bytes. Default: 1 MiB.
	MaxMessageSize int
	// Retries configures recoverability of failing handlers.
	Retries RetryConfig
	// Dispatcher configures the dispatcher of scheduled messages.
	Dispatcher DispatcherConfig
	// Incoming middleware wraps the handling of every received message,
	// first element outermost.
	Incoming []Middleware
	// Outgoing middleware wraps the sending of every message, first element
	// outermost. It runs once per message, when Send or Publish is called,
	// including for messages delivered later.
	Outgoing []Middleware
	// Clock tells time. Default: the system clock. Tests inject a fake one.
	Clock Clock
	// ParseSchedule turns the text of a schedule made at runtime
	// (RecurringSpec.Schedule) into a Schedule, on every process that runs
	// it: give every process of the fleet the same one. Text starting with
	// "@every " is always read by ParseEvery (ticks at the multiples of
	// the duration since the epoch, the same on every process); the rest
	// goes to ParseSchedule, by default ParseEvery too, which refuses it.
	// robfig/cron's parser fits as it is, for cron specs with time zones
	// ("CRON_TZ=Europe/Berlin 0 9 * * 1-5"):
	//
	//	ParseSchedule: func(s string) (bus.Schedule, error) { return cron.ParseStandard(s) },
	ParseSchedule func(string) (Schedule, error)
	// HandlerTimeout bounds one handling attempt: the handler's ctx ends
	// then, and the attempt fails (and is retried) even if the handler does
	// not return. A handler that ignores its ctx is abandoned, not stopped:
	// its goroutine runs on until it returns, no longer counted against
	// Concurrency (so abandoned handlers can exceed it), and whatever it
	// sends with its ctx fails with ErrHandlerDone. Default 0: no bound.
	HandlerTimeout time.Duration
	// OnCriticalError is called when a circuit breaker trips: storing,
	// claiming or dispatching scheduled messages has failed for longer than
	// its time to trigger. The bus keeps probing either way. Default: log at
	// Error level. To stop the process instead, cancel your root context
	// here, or call os.Exit after flushing what you must.
	OnCriticalError func(err error)
	// CircuitBreakers sets how long each kind of failure must last before
	// OnCriticalError is called.
	CircuitBreakers CircuitBreakerConfig
	// Outbox turns on the transactional outbox and inbox (see OutboxConfig).
	// Default: off.
	Outbox OutboxConfig
	// Observer sees every send, dispatch, delivery and handler attempt, for
	// tracing and metrics (the otelbus module is one). Default nil: nothing
	// is observed, at no cost.
	Observer Observer
}

// CircuitBreakerConfig sets each breaker's time to trigger: how long a kind
// of failure must go on, without a success, before the breaker trips.
type CircuitBreakerConfig struct {
	// Store watches writing scheduled messages. Default 30 s.
	Store time.Duration
	// Fetch watches claiming due messages. Default 30 s.
	Fetch time.Duration
	// Dispatch watches handing due messages to the transport. Default 30 s.
	Dispatch time.Duration
}

// RetryConfig configures what happens when a handler fails: immediate
// retries, then delayed retries through the scheduled-message store (they
// survive restarts), then the error queue.
type RetryConfig struct {
	// Immediate is how many times a failing message is retried at once.
	// Default 5; a negative value means none.
	Immediate int
	// Delayed is how many times a message that failed every immediate retry
	// is handled again later. Default 3; a negative value means none. Needs
	// a persistence with a ScheduledStore; without one, failed messages go
	// straight to the error queue.
	Delayed int
	// DelayedBackoff returns the wait before delayed retry n (1, 2, …).
	// Default: n × 10 s, so 10 s, 20 s, 30 s. See ExponentialBackoff.
	DelayedBackoff func(n int) time.Duration
	// Policy sees every handler error before the bus acts on it and may
	// classify it: return Unrecoverable(err) to go straight to the error
	// queue, RetryAfter(err, d) to retry after exactly d, or err unchanged.
	// Default: errors are left as they are.
	Policy func(env *Envelope, err error) error
}

// DispatcherConfig tunes the dispatcher that hands scheduled messages to the
// transport when they fall due.
type DispatcherConfig struct {
	// Disabled stops this bus from dispatching; another bus on the same
	// store must then do it.
	Disabled bool
	// PollInterval is the longest the dispatcher sleeps without looking at
	// the store. Default 1s.
	PollInterval time.Duration
	// BatchSize is how many due rows one claim takes. Default 500.
	BatchSize int
	// Lease is how long a claimed row stays reserved for this dispatcher; a
	// row not deleted by then (the process died) is dispatched again by any
	// bus on the store. Default 30s.
	Lease time.Duration
	// Concurrency is how many due messages are handed to the transport at
	// once. Default 16. A BatchTransport gets a claimed batch in one
	// pipelined call instead, its own window bounding the messages in
	// flight; Concurrency then sizes the probe made after a failed batch.
	Concurrency int
	// SendTimeout bounds one hand-over to the transport; past it the
	// hand-over counts as failed. It also bounds the bus's other sends that
	// must finish although their caller's ctx ended (to the error and
	// dead-letter queues, acknowledgements, storing delayed retries).
	// Default: a third of Lease, at most 10 s; more than a third of Lease is
	// refused, so a transport waiting out an outage cannot hold a row past
	// its lease.
	SendTimeout time.Duration
	// NumberOfRetries is how many times a failed hand-over of a row is
	// retried before the row is moved to the error queue, with the reason.
	// Default 0: a transient failure (the broker is down) is retried for
	// ever, and a permanent one (the transport's error matches
	// ErrPermanent: the queue does not exist, the message is too large)
	// goes to the error queue at once. The values of the endpoint that
	// scheduled the row apply, whichever endpoint's dispatcher hands it
	// over: they travel with the row (HeaderDispatchRetries).
	NumberOfRetries int
	// RetryBackoff is the first wait after a failed hand-over; it doubles
	// per failure up to one minute. Default 1s. Like NumberOfRetries, the
	// scheduling endpoint's value applies (HeaderDispatchBackoff).
	RetryBackoff time.Duration
	// LookAhead is how far ahead of their due time the dispatcher claims
	// rows, on a store that can (bus.AheadClaimer; every store of this
	// module and its drivers can). One claim then takes every row due
	// within the window, its lease covering the window as well; the
	// dispatcher holds the rows and hands each over at its due time, never
	// before, and deletes the delivered ones in batches. So a steady
	// stream of due rows costs the store a few statements a second rather
	// than three per row. The price: a row held ahead cannot be cancelled
	// (it counts as being delivered), and when the process dies its rows
	// are dispatched by another bus once their lease lapses, up to
	// LookAhead+Lease after they fell due. Default 250 ms (Lease when that
	// is shorter, off when it is under 10 ms); at least 10 ms and at most
	// Lease; a negative value turns look-ahead off, so that each row is
	// claimed when it falls due.
	LookAhead time.Duration
	// MaximumRecoveryFailuresPerSecond bounds how often failed hand-overs are
	// recorded in the store (one batch per recording). A recording over the
	// limit waits for the next free slot; none is skipped, so a failed row
	// is always retried after its backoff, never left leased until its
	// lease lapses (when the slot would come after the lease, or the
	// dispatcher is stopping, it is recorded at once). Rows held back behind
	// a failed row of their ordering key (WithOrderingKey) are recorded with
	// it, or at once when no failure is. Default 1.
	MaximumRecoveryFailuresPerSecond int
}

const (
	defaultErrorQueue     = "error"
	defaultMaxMessageSize = 1 << 20
	defaultImmediate      = 5
	defaultDelayed        = 3
	maxEndpointLen        = 200
	defaultLookAhead      = 250 * time.Millisecond
	minLookAhead          = 10 * time.Millisecond
	defaultStartTimeout   = time.Minute
)

func (c Config) withDefaults() Config {
	if c.Transport == nil {
		c.Transport = NewMemoryTransport()
	}
	if c.Persistence == nil {
		c.Persistence = NewMemoryPersistence()
	}
	c.Logger = cmp.Or(c.Logger, slog.Default())
	c.Concurrency = cmp.Or(c.Concurrency, runtime.NumCPU())
	c.ErrorQueue = cmp.Or(c.ErrorQueue, defaultErrorQueue)
	c.DeadLetterQueue = cmp.Or(c.DeadLetterQueue, "deadletter")
	if c.Serializer == nil {
		c.Serializer = JSONSerializer{}
	}
	c.MaxMessageSize = cmp.Or(c.MaxMessageSize, defaultMaxMessageSize)
	switch {
	case c.Retries.Immediate == 0:
		c.Retries.Immediate = defaultImmediate
	case c.Retries.Immediate < 0:
		c.Retries.Immediate = 0
	}
	switch {
	case c.Retries.Delayed == 0:
		c.Retries.Delayed = defaultDelayed
	case c.Retries.Delayed < 0:
		c.Retries.Delayed = 0
	}
	if c.Retries.DelayedBackoff == nil {
		c.Retries.DelayedBackoff = func(n int) time.Duration { return time.Duration(n) * 10 * time.Second }
	}
	if c.OnCriticalError == nil {
		log := c.Logger
		c.OnCriticalError = func(err error) { log.Error("critical error; still probing", slog.Any(logKeyError, err)) }
	}
	cb := &c.CircuitBreakers
	cb.Store = cmp.Or(cb.Store, 30*time.Second)
	cb.Fetch = cmp.Or(cb.Fetch, 30*time.Second)
	cb.Dispatch = cmp.Or(cb.Dispatch, 30*time.Second)
	d := &c.Dispatcher
	d.PollInterval = cmp.Or(d.PollInterval, time.Second)
	d.BatchSize = cmp.Or(d.BatchSize, 500)
	d.Lease = cmp.Or(d.Lease, 30*time.Second)
	d.Concurrency = cmp.Or(d.Concurrency, 16)
	d.SendTimeout = cmp.Or(d.SendTimeout, min(10*time.Second, d.Lease/3))
	d.RetryBackoff = cmp.Or(d.RetryBackoff, time.Second)
	d.MaximumRecoveryFailuresPerSecond = cmp.Or(d.MaximumRecoveryFailuresPerSecond, 1)
	if d.LookAhead == 0 {
		// A lease shorter than the default window bounds it; one too short
		// for a window turns look-ahead off.
		d.LookAhead = min(defaultLookAhead, d.Lease)
		if d.LookAhead < minLookAhead {
			d.LookAhead = -1
		}
	}
	c.Outbox.Retention = cmp.Or(c.Outbox.Retention, defaultInboxRetention)
	c.StartTimeout = cmp.Or(c.StartTimeout, defaultStartTimeout)
	if c.Clock == nil {
		c.Clock = systemClock{}
	}
	if c.ParseSchedule == nil {
		c.ParseSchedule = ParseEvery
	}
	return c
}

func (c Config) validate() error {
	if err := validateQueueName("Endpoint", c.Endpoint); err != nil {
		return err
	}
	if err := validateQueueName("ErrorQueue", c.ErrorQueue); err != nil {
		return err
	}
	if err := validateQueueName("DeadLetterQueue", c.DeadLetterQueue); err != nil {
		return err
	}
	d := c.Dispatcher
	switch {
	case c.Endpoint == c.ErrorQueue && !c.SendOnly:
		return &ConfigError{Field: "ErrorQueue", Reason: fmt.Sprintf(
			"%q is also the endpoint's input queue: a message that fails there would go back to it for ever; "+
				"to consume the error queue, give that endpoint another ErrorQueue", c.ErrorQueue)}
	case c.Outbox.Enabled && !isOutboxStore(c.Persistence):
		return &ConfigError{Field: "Outbox.Enabled", Reason: fmt.Sprintf(
			"persistence %T cannot run handlings in a database transaction (bus.OutboxStore); use postgres.New or sqlite.Open", c.Persistence)}
	case c.Outbox.Retention < 0:
		return &ConfigError{Field: "Outbox.Retention", Reason: "must not be negative"}
	case c.Concurrency < 0:
		return &ConfigError{Field: "Concurrency", Reason: "must not be negative"}
	case c.MaxMessageSize < 0:
		return &ConfigError{Field: "MaxMessageSize", Reason: "must not be negative"}
	case d.PollInterval < 0 || d.Lease < 0 || d.RetryBackoff < 0 || d.SendTimeout < 0:
		return &ConfigError{Field: "Dispatcher", Reason: "durations must not be negative"}
	case c.HandlerTimeout < 0:
		return &ConfigError{Field: "HandlerTimeout", Reason: "must not be negative"}
	case c.CircuitBreakers.Store < 0 || c.CircuitBreakers.Fetch < 0 || c.CircuitBreakers.Dispatch < 0:
		return &ConfigError{Field: "CircuitBreakers", Reason: "durations must not be negative"}
	case d.BatchSize < 0 || d.Concurrency < 0 || d.NumberOfRetries < 0 || d.MaximumRecoveryFailuresPerSecond < 0:
		return &ConfigError{Field: "Dispatcher", Reason: "counts must not be negative"}
	case d.LookAhead > 0 && d.LookAhead < minLookAhead:
		return &ConfigError{Field: "Dispatcher.LookAhead", Reason: fmt.Sprintf(
			"%v is shorter than %v: the dispatcher would claim almost as often as without a window; use a negative value to turn look-ahead off", d.LookAhead, minLookAhead)}
	case d.LookAhead > d.Lease:
		return &ConfigError{Field: "Dispatcher.LookAhead", Reason: fmt.Sprintf(
			"%v is longer than Dispatcher.Lease (%v): rows held by a process that dies would wait more than twice the lease; lower LookAhead or raise Lease", d.LookAhead, d.Lease)}
	case d.SendTimeout > d.Lease/3:
		return &ConfigError{Field: "Dispatcher.SendTimeout", Reason: fmt.Sprintf(
			"%v is more than a third of Dispatcher.Lease (%v): a hand-over could still be running when the lease lapses and another bus sends the row again; raise Lease or lower SendTimeout", d.SendTimeout, d.Lease)}
	}
	return nil
}

// CheckQueueName checks name as New checks Config.Endpoint, ErrorQueue and
// DeadLetterQueue (and To and ReplyTo their queues): 1 to 200 bytes of
// letters, digits, '.', '-' and '_', and neither "." nor "..". It returns
// nil or a *ConfigError whose Field is field. Tools that create queues for
// a bus (provisioning ahead of time) call it so they refuse what New would.
func CheckQueueName(field, name string) error { return validateQueueName(field, name) }

func validateQueueName(field, name string) error {
	switch {
	case name == "":
		return &ConfigError{Field: field, Reason: "required"}
	case len(name) > maxEndpointLen:
		return &ConfigError{Field: field, Reason: "longer than 200 bytes"}
	case name == "." || name == "..":
		return &ConfigError{Field: field, Reason: fmt.Sprintf("%q is not a queue name", name)}
	}
	for _, c := range []byte(name) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') {
			return &ConfigError{Field: field, Reason: "only letters, digits, '.', '-' and '_' are allowed: " + name}
		}
	}
	return nil
}

func isOutboxStore(p Persistence) bool {
	_, ok := p.(OutboxStore)
	return ok
}
