package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/postbus/bus/backend"
	"github.com/postbus/bus/internal/loop"
)

const (
	// SettleTimeout bounds one store call that settles a batch.
	SettleTimeout = 5 * time.Second
	// settleRetryDelay is the first wait before a failed settling call is
	// tried again; it doubles up to a second.
	settleRetryDelay = 50 * time.Millisecond
	// batchFailureLimit is how many failed hand-overs make the dispatcher
	// stop starting new ones in a batch: the transport is down, and the
	// rest of the batch is released rather than tried one timeout at a time.
	batchFailureLimit = 3
)

// errNotAttempted marks rows of a batch the dispatcher did not hand over
// (the transport was failing, or the lease was running out): released.
var errNotAttempted = errors.New("bus: hand-over not attempted")

// dispatchBatch claims one batch of due rows and hands each to the
// transport, each within SendTimeout. It stops starting hand-overs when the
// transport keeps failing or two thirds of the lease are gone, so a row is
// never sent after its lease lapsed and another instance may have claimed
// it. It returns how many rows it claimed.
func (d *Dispatcher) dispatchBatch(ctx context.Context) (int, error) {
	claimedAt := d.clock.Now()
	rows, err := d.store.ClaimDueOutgoing(ctx, d.transport, claimedAt, d.cfg.BatchSize, d.cfg.Lease)
	if err != nil {
		return 0, err
	}
	d.claimed()
	if len(rows) == 0 {
		d.host.Emit(ctx, Event{Kind: EventClaimEmpty, Start: claimedAt})
		return 0, nil
	}
	d.host.Emit(ctx, Event{Kind: EventClaim, Count: len(rows), Start: claimedAt})
	hctx := ctx
	if j := d.join; j != nil {
		// One claim, one token: the transport writes in the claim's
		// transaction, which the settling below commits.
		hctx = j.HandOverContext(ctx, rows[0].Token)
	}
	results := d.held.handOver(hctx, d, rows, claimedAt.Add(d.cfg.Lease*2/3))
	// Settling must be over before the lease lapses; keep a margin for the
	// store's clock and the call itself.
	d.settle(ctx, rows, results, claimedAt.Add(d.cfg.Lease*9/10))
	return len(rows), nil
}

// handOverAll hands rows to the transport, each within SendTimeout, and
// returns one result per row (nil: accepted). It starts no hand-over after
// stopBy or once the transport has failed batchFailureLimit times (not
// counting messages it refused permanently, backend.ErrPermanent): those rows get
// errNotAttempted and are released.
//
// The rows of one ordering key go one after another, in due order, and a
// failed one holds back the later ones (see order.go). A
// backend.BatchTransport gets the rows in pipelined calls instead (see
// handOverPipelined).
func (d *Dispatcher) handOverAll(ctx context.Context, rows []backend.OutgoingMessage, stopBy time.Time) []error {
	dec, lanes := keyLanes(rows)
	if bt, ok := d.cfg.Transport.(backend.BatchTransport); ok {
		return d.handOverPipelined(ctx, bt, rows, dec, lanes, stopBy)
	}
	results := make([]error, len(rows))
	var next, failures atomic.Int64
	work := func() {
		for l := int(next.Add(1)) - 1; l < len(lanes); l = int(next.Add(1)) - 1 {
			var wait time.Duration // > 0 once a row of the lane failed
			for k, i := range lanes[l] {
				switch {
				case wait > 0:
					results[i] = &heldBackError{wait: wait + time.Duration(k)*KeyStep}
					continue
				case failures.Load() >= batchFailureLimit || d.clock.Now().After(stopBy):
					results[i] = errNotAttempted
					continue
				}
				sctx, cancel := context.WithTimeout(ctx, d.cfg.SendTimeout)
				results[i] = d.handOverDecoded(sctx, &rows[i], dec[i])
				cancel()
				if results[i] != nil && ctx.Err() == nil {
					if !errors.Is(results[i], backend.ErrPermanent) {
						failures.Add(1) // a refused message is no sign the transport is down
					}
					wait = d.holdsBack(&rows[i], results[i])
				}
			}
		}
	}
	workers := min(d.cfg.Concurrency, len(lanes))
	if workers <= 1 {
		// One lane (a lone due row, the common case of a spread) or one
		// worker: no goroutine to start and wait for.
		work()
		return results
	}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(work)
	}
	wg.Wait()
	return results
}

// handOverDecoded gives one decoded row to the transport.
func (d *Dispatcher) handOverDecoded(ctx context.Context, row *backend.OutgoingMessage, dec decoded) error {
	env, err := dec.env, dec.err
	if err != nil {
		// A row that cannot be decoded will never be sent: keep its bytes in
		// the error queue rather than retry it forever.
		poison := &backend.Envelope{ID: row.ID, Kind: row.Kind, Body: row.Envelope, Source: d.cfg.Endpoint}
		return d.host.MoveToError(ctx, poison, "poison", row.Failures, fmt.Errorf("scheduled row: %w", err))
	}
	return d.host.HandOver(ctx, row, env)
}

// settle deletes the rows the transport accepted, and records a failure on
// the others (or, past NumberOfRetries, moves them to the error queue).
// Rows not attempted because the dispatcher is stopping are released. Every
// call names the rows with their lease tokens, so a row this dispatcher no
// longer holds is left alone; store errors are retried while the lease runs.
func (d *Dispatcher) settle(ctx context.Context, rows []backend.OutgoingMessage, results []error, leaseEnd time.Time) {
	var done, released []backend.Claim
	var failed []backend.OutgoingFailure
	var handed int
	var transient error // the first failure that may heal
	now := d.clock.Now()
	fail := func(row *backend.OutgoingMessage, p dispatchPolicy, err error) {
		wait := p.wait(row.Failures)
		failed = append(failed, backend.OutgoingFailure{ID: row.ID, Token: row.Token, Error: err.Error(), RetryAfter: wait, RetryAt: now.Add(wait)})
	}
	var held *heldBackError
	var heldBack []backend.OutgoingFailure
	for i, err := range results {
		row := &rows[i]
		if err == nil {
			handed++
			done = append(done, row.Claim())
			continue
		}
		if errors.Is(err, errNotAttempted) || ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			released = append(released, row.Claim())
			continue
		}
		if errors.As(err, &held) { // after the failed row of its key
			heldBack = append(heldBack, backend.OutgoingFailure{ID: row.ID, Token: row.Token, Error: err.Error(), RetryAfter: held.wait, RetryAt: now.Add(held.wait)})
			continue
		}
		if transient == nil && !errors.Is(err, backend.ErrPermanent) {
			transient = err // a refused message says nothing about the transport's health
		}
		// The retry budget and backoff are those of the endpoint that
		// scheduled the row (policy.go), not this dispatcher's.
		switch p := d.policyOf(row); {
		case p.exhausted(row.Failures+1, err):
			if d.forwardToError(ctx, row, err) {
				done = append(done, row.Claim())
			} else {
				fail(row, p, err)
			}
		default:
			d.host.DispatchFailed()
			d.logError("dispatch", "cannot hand a due message to the transport; it stays in the store", err)
			fail(row, p, err)
		}
	}
	d.host.Dispatched(handed)
	switch {
	case handed > 0:
		d.dispatch.Success()
	case transient != nil:
		d.dispatch.Failure(transient)
	}
	d.storeCall(ctx, "delete", len(done), leaseEnd, func(c context.Context) (int, error) { return d.store.DeleteOutgoing(c, done) })
	// Rows held back behind a failed row of their key are recorded with
	// the failures, or at once when there are none: they are no failures
	// of the transport, and left leased they would come back in claim order.
	record := heldBack
	if len(failed) > 0 {
		d.awaitRecording(ctx, leaseEnd)
		record = append(failed, heldBack...)
	}
	d.storeCall(ctx, "record-failure", len(record), leaseEnd, func(c context.Context) (int, error) { return d.store.RecordOutgoingFailures(c, record) })
	d.storeCall(ctx, "release", len(released), leaseEnd, func(c context.Context) (int, error) { return d.store.ReleaseOutgoing(c, released) })
	d.host.Emit(ctx, Event{Kind: EventSettle, Count: len(done), Failed: len(failed), Released: len(released), Start: now})
}

// awaitRecording applies MaximumRecoveryFailuresPerSecond: it takes the
// next free slot for a failure recording and waits for it. A failed
// hand-over is always recorded, never left leased until its lease lapses:
// when the slot would come after leaseEnd, or the dispatcher is stopping,
// it records at once.
func (d *Dispatcher) awaitRecording(ctx context.Context, leaseEnd time.Time) {
	gap := int64(time.Second) / int64(d.cfg.MaximumRecoveryFailuresPerSecond)
	for {
		now := d.clock.Now().UnixNano()
		last := d.lastRec.Load()
		slot := max(now, last+gap)
		if slot > leaseEnd.UnixNano() {
			return
		}
		if d.lastRec.CompareAndSwap(last, slot) {
			if slot > now {
				loop.Sleep(ctx, d.clock, time.Duration(slot-now))
			}
			return
		}
	}
}

// storeCall runs one settling call, detached from the dispatcher's ctx (a
// stopping dispatcher still settles what it sent), and retries it with
// backoff while the lease runs: a row whose delete is lost comes back after
// its lease and is sent again, so a short database blip must not cost a
// duplicate.
func (d *Dispatcher) storeCall(ctx context.Context, what string, n int, leaseEnd time.Time, fn func(context.Context) (int, error)) {
	if n == 0 {
		return
	}
	wait := settleRetryDelay
	for {
		cctx, cancel := loop.Detach(ctx, SettleTimeout)
		got, err := fn(cctx)
		cancel()
		if err == nil {
			d.cfg.StoreBreaker.Success()
			if got < n {
				d.log.Warn("some claimed rows were no longer held by this dispatcher: their lease lapsed and another claim took them, or they were cancelled",
					slog.String("settle", what), slog.Int("claimed", n), slog.Int("settled", got))
			}
			return
		}
		d.cfg.StoreBreaker.Failure(err)
		if d.clock.Now().Add(wait).After(leaseEnd) {
			d.logError(what, "cannot settle dispatched rows; they will be dispatched again after their lease", err)
			return
		}
		d.logError(what, "cannot settle dispatched rows yet; retrying within the lease", err)
		if !loop.Sleep(context.WithoutCancel(ctx), d.clock, wait) {
			return
		}
		wait = min(wait*2, time.Second)
	}
}

// forwardToError moves a row that failed too often to the error queue.
func (d *Dispatcher) forwardToError(ctx context.Context, row *backend.OutgoingMessage, cause error) bool {
	env, err := backend.UnmarshalEnvelope(row.Envelope)
	if err != nil {
		env = &backend.Envelope{ID: row.ID, Kind: row.Kind, Body: row.Envelope}
	}
	env.SetHeader("postbus.dispatch.failures", strconv.Itoa(row.Failures+1))
	if err := d.host.MoveToError(ctx, env, "dispatch", row.Failures+1, cause); err != nil {
		d.log.Error("cannot move an undeliverable scheduled message to the error queue", slog.String(logKeyMessageID, row.ID), slog.Any(logKeyError, err))
		return false
	}
	return true
}
