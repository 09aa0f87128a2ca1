package dispatch

import (
	"context"
	"log/slog"
	"time"

	"github.com/postbus/bus/backend"
)

// Config is what a dispatcher is built from: the bus's store, transport,
// clock and logger, its Dispatcher settings (validated and defaulted by the
// bus) and its circuit breakers. The bus fills every field.
type Config struct {
	// Endpoint is the bus's endpoint name: the Source of a row that cannot
	// be decoded, on its way to the error queue.
	Endpoint string
	// Identity is the identity of the bus's transport: the rows this
	// dispatcher claims ("" when the transport has none).
	Identity string
	// Store is the scheduled-message store the rows are claimed from.
	Store backend.ScheduledStore
	// Transport is the bus's transport: a BatchTransport gets pipelined
	// hand-overs, and a HandOverJoiner store is asked whether it joins it.
	Transport backend.Transport
	// Clock tells the time and makes the timers.
	Clock backend.Clock
	// Logger receives the dispatcher's log lines, rate-limited per kind.
	Logger *slog.Logger

	// PollInterval is the longest wait between two looks at the store.
	PollInterval time.Duration
	// BatchSize is the most rows one claim takes.
	BatchSize int
	// Lease is how long a claimed row stays leased to this dispatcher.
	Lease time.Duration
	// Concurrency is how many hand-overs of one batch run at once.
	Concurrency int
	// SendTimeout bounds one hand-over (or one SendBatch call).
	SendTimeout time.Duration
	// NumberOfRetries and RetryBackoff are the retry policy of a row that
	// carries none of its own (dispatch policy headers).
	NumberOfRetries int
	// RetryBackoff is the first wait after a failed hand-over of such a row.
	RetryBackoff time.Duration
	// LookAhead is the look-ahead window; <= 0 claims rows only when due.
	LookAhead time.Duration
	// MaximumRecoveryFailuresPerSecond caps the failure recordings a
	// second (at least 1).
	MaximumRecoveryFailuresPerSecond int

	// Fetch is the breaker of claiming due rows.
	Fetch *Breaker
	// Dispatch is the breaker of handing rows to the transport.
	Dispatch *Breaker
	// StoreBreaker is the bus's store breaker, told of each settling call.
	StoreBreaker *Breaker
}

// Host is what a dispatcher needs from its bus beyond Config: the
// hand-over of one message as the bus does it (expiry, observer spans,
// error queue), its observer events and its counters.
type Host interface {
	// HandOver hands one decoded due row to the transport as the bus sends
	// its messages (sent or published, or discarded when it expired on its
	// way), between the Observer's StartDispatch and EndDispatch; nil once
	// the transport accepted it.
	HandOver(ctx context.Context, row *backend.OutgoingMessage, env *backend.Envelope) error
	// StartDispatch tells the Observer a row, decoded as env, goes to the
	// transport in a SendBatch call; it returns the ctx to end it with (ctx
	// itself without an Observer).
	StartDispatch(ctx context.Context, row *backend.OutgoingMessage, env *backend.Envelope) context.Context
	// EndDispatch tells the Observer the hand-over StartDispatch began
	// ended with err.
	EndDispatch(ctx context.Context, env *backend.Envelope, err error)
	// Outbound says how env goes in a SendBatch call (sent to its queue or
	// published); false when it expired by now and takes the one-at-a-time
	// path (HandOver) to be discarded.
	Outbound(env *backend.Envelope, now time.Time) (backend.Outbound, bool)
	// Transmitted names the message in a failed hand-over (nil for nil).
	Transmitted(env *backend.Envelope, err error) error
	// MoveToError moves env to the error queue after failures failed
	// attempts, the last with cause; kind says why ("poison", "dispatch").
	MoveToError(ctx context.Context, env *backend.Envelope, kind string, failures int, cause error) error
	// Emit reports a claim, an empty claim or a settling to the Observer.
	Emit(ctx context.Context, ev Event)
	// Dispatched counts n rows handed over and settled (Metrics.Dispatched).
	Dispatched(n int)
	// DispatchFailed counts a failed hand-over still to be retried
	// (Metrics.DispatchFails).
	DispatchFailed()
}

// EventKind names what an Event reports.
type EventKind int

const (
	// EventClaim is a claim that took Count rows.
	EventClaim EventKind = iota
	// EventClaimEmpty is a claim that took none.
	EventClaimEmpty
	// EventSettle is a settling: Count deleted, Failed recorded as failed,
	// Released released.
	EventSettle
)

// Event is what the dispatcher tells the bus's Observer.
type Event struct {
	Kind     EventKind
	Count    int       // rows claimed, or deleted by a settling
	Failed   int       // rows recorded as failed by a settling
	Released int       // rows released by a settling
	Start    time.Time // when the claim or the settling began (bus clock)
}
