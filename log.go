package bus

import (
	"sync/atomic"
	"time"
)

// Log attribute keys, shared by every log line of the bus.
const (
	logKeyEndpoint  = "endpoint"
	logKeyError     = "error"
	logKeyMessageID = "message_id"
	logKeyType      = "message_type"
	logKeyQueue     = "queue"
	logKeyAttempt   = "attempt"
	logKeyCount     = "count"
)

const receiveRetryDelay = time.Second

// Metrics are the bus's counters since New, for dashboards and tests.
type Metrics struct {
	// Sent counts the messages this endpoint handed to the transport
	// itself, at once: Send, Publish and Reply without a delay, and the
	// immediate messages of its handlers. A scheduled message is never
	// counted here, whoever dispatches it.
	Sent uint64
	// Scheduled counts the messages this endpoint stored for later
	// delivery (delays, delayed retries, outbox rows).
	Scheduled uint64
	// Dispatched counts the due rows this endpoint's dispatcher handed to
	// the transport: on a shared store, they may have been scheduled by any
	// endpoint. Rows moved to the error queue are not counted.
	Dispatched    uint64
	Handled       uint64 // messages handled successfully
	Retried       uint64 // handling attempts that failed and were retried
	MovedToError  uint64 // messages moved to the error queue
	DispatchFails uint64 // failed hand-overs of due rows by this endpoint's dispatcher, still to be retried
	Expired       uint64 // messages discarded by a message timer
	Duplicates    uint64 // deliveries skipped because the inbox had handled the message (outbox)
	SagaConflicts uint64 // saga handler runs repeated because the instance changed concurrently
	SagaNotFound  uint64 // saga messages acknowledged without an instance to handle them
	// Recurring counts the occurrences of recurring schedules this bus
	// stored: ticks, catch-ups of missed ticks, and TriggerRecurring. A
	// tick is stored by one process of those declaring its schedule, so
	// the sum over the fleet is the number of occurrences.
	Recurring uint64
	// RecurringFailed counts the occurrences of recurring schedules that
	// could not be built (their Message panicked, returned nil or returned
	// a message the bus cannot send): each is logged with the schedule's
	// name and tick, and the schedule goes on.
	RecurringFailed uint64
	// RecurringSkipped counts the occurrences this endpoint received and
	// skipped because the previous one of their schedule was still being
	// handled (RecurringPolicy.Overlap).
	RecurringSkipped uint64
	// LatenessP50 and LatenessP99 summarise how late the last 1,024
	// delayed messages were handled: handling start minus due time. Only
	// scheduled deliveries and delayed retries count, each from its own due
	// time; a message retried from the error queue (Replay) or the failed
	// store (RetryFailed) is an immediate send and does not.
	LatenessP50, LatenessP99 time.Duration
}

type metrics struct {
	sent, scheduled, dispatched, handled, retried, movedToError, dispatchFails, expired, duplicates atomic.Uint64
	sagaConflicts, sagaNotFound, recurring, recurringFailed, recurringSkipped                       atomic.Uint64
	lateness                                                                                        latenessWindow
}

// Metrics returns a snapshot of the bus's counters.
func (b *Bus) Metrics() Metrics {
	m := &b.metrics
	p50, p99 := m.lateness.percentiles()
	return Metrics{
		Sent: m.sent.Load(), Scheduled: m.scheduled.Load(), Dispatched: m.dispatched.Load(),
		Handled: m.handled.Load(), Retried: m.retried.Load(), MovedToError: m.movedToError.Load(),
		DispatchFails: m.dispatchFails.Load(), Expired: m.expired.Load(), Duplicates: m.duplicates.Load(),
		SagaConflicts: m.sagaConflicts.Load(), SagaNotFound: m.sagaNotFound.Load(), Recurring: m.recurring.Load(),
		RecurringFailed: m.recurringFailed.Load(), RecurringSkipped: m.recurringSkipped.Load(),
		LatenessP50: p50, LatenessP99: p99,
	}
}
