package dispatch

import (
	"context"
	"errors"
	"time"

	"github.com/postbus/bus/backend"
)

// Pipelined hand-over. When the transport is a backend.BatchTransport, the
// dispatcher does not hand rows over one at a time per goroutine (one
// broker round trip per row and goroutine) but gives the transport the
// whole claimed batch in one SendBatch call, which keeps many messages in
// flight and settles each by its own confirm (rows with one ordering key
// take one call per row, in rounds: see pipeline):
//
//   - each row is prepared as handOverDecoded would: decoded, checked for
//     expiry, and, with an Observer, its StartDispatch called;
//   - rows that cannot be decoded or that expired take the one-at-a-time
//     path (error queue, dead-letter queue) after the batch, each within
//     SendTimeout;
//   - the others go to SendBatch within one SendTimeout, and each row's
//     result is its own message's: nil (deleted by settle) only once the
//     broker confirmed that message, an error (a failure recorded on that
//     row alone) otherwise.
//
// The failure limit keeps its purpose: not to spend a batch's lease on a
// transport that is down. A pipelined batch spends at most one SendTimeout
// whatever its size, so while the transport works the whole batch goes in
// one call. When the last settled batch failed (the dispatch breaker counts
// a failure), the rows of the first Concurrency lanes (at least
// batchFailureLimit) go alone as a probe; if batchFailureLimit of them fail, the rest are
// released untried, as the one-at-a-time path does. No call starts after
// stopBy.

// errBatchResultMissing is the result of a message a backend.BatchTransport
// returned no result for: not confirmed, so its row is kept.
var errBatchResultMissing = errors.New("bus: the transport returned no result for this message")

// handOverPipelined hands rows to bt and returns one result per row. dec
// and lanes are keyLanes' for rows: the rows of one ordering key go in
// rounds, one per SendBatch call, and a failed one holds back the later
// ones (see order.go).
func (d *Dispatcher) handOverPipelined(ctx context.Context, bt backend.BatchTransport, rows []backend.OutgoingMessage, dec []decoded, lanes [][]int, stopBy time.Time) []error {
	results := make([]error, len(rows))
	start := 0
	if d.dispatch.Wait() > 0 {
		start = min(max(d.cfg.Concurrency, batchFailureLimit), len(lanes))
		if d.pipeline(ctx, bt, rows, dec, lanes[:start], results, stopBy) >= batchFailureLimit {
			for _, lane := range lanes[start:] {
				for _, i := range lane {
					results[i] = errNotAttempted
				}
			}
			return results
		}
	}
	d.pipeline(ctx, bt, rows, dec, lanes[start:], results, stopBy)
	return results
}

// pipeline hands the rows of lanes over in SendBatch calls, one per round
// (round r takes the r-th row of every lane: all of a batch without
// ordering keys goes in one call), then the rows that need the
// one-at-a-time path; it fills results and returns how many failed (not counting
// messages refused permanently, backend.ErrPermanent).
func (d *Dispatcher) pipeline(ctx context.Context, bt backend.BatchTransport, rows []backend.OutgoingMessage, dec []decoded, lanes [][]int, results []error, stopBy time.Time) int {
	if len(lanes) == 0 {
		return 0
	}
	wait := make([]time.Duration, len(lanes)) // > 0 once a row of the lane failed
	failedAt := make([]int, len(lanes))       // the round it failed in
	var single []int                          // rows for the one-at-a-time path
	now := d.clock.Now()
	for round := 0; ; round++ {
		var batch []backend.Outbound
		var at, atLane []int // the row and lane of each batch entry
		more := false
		for l, lane := range lanes {
			if round >= len(lane) {
				continue
			}
			more = true
			i := lane[round]
			switch {
			case wait[l] > 0:
				results[i] = &heldBackError{wait: wait[l] + time.Duration(round-failedAt[l])*KeyStep}
			case dec[i].err != nil:
				single = append(single, i)
			default:
				out, ok := d.host.Outbound(dec[i].env, now)
				if !ok {
					single = append(single, i)
					continue
				}
				batch = append(batch, out)
				at, atLane = append(at, i), append(atLane, l)
			}
		}
		if !more {
			break
		}
		if len(batch) == 0 {
			continue
		}
		if d.clock.Now().After(stopBy) {
			for _, i := range at {
				results[i] = errNotAttempted
			}
			continue
		}
		d.sendBatch(ctx, bt, rows, batch, at, results)
		for j, i := range at {
			if results[i] != nil && ctx.Err() == nil {
				wait[atLane[j]], failedAt[atLane[j]] = d.holdsBack(&rows[i], results[i]), round
			}
		}
	}
	for _, i := range single {
		if d.clock.Now().After(stopBy) {
			results[i] = errNotAttempted
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, d.cfg.SendTimeout)
		results[i] = d.handOverDecoded(sctx, &rows[i], dec[i])
		cancel()
	}
	failed := 0
	var held *heldBackError
	for _, lane := range lanes {
		for _, i := range lane {
			if err := results[i]; err != nil && !errors.Is(err, errNotAttempted) && !errors.Is(err, backend.ErrPermanent) && !errors.As(err, &held) && ctx.Err() == nil {
				failed++
			}
		}
	}
	return failed
}

// sendBatch makes the SendBatch call for batch within SendTimeout, between
// each row's StartDispatch and EndDispatch when there is an Observer, and
// stores each message's result in results at its row (at).
func (d *Dispatcher) sendBatch(ctx context.Context, bt backend.BatchTransport, rows []backend.OutgoingMessage, batch []backend.Outbound, at []int, results []error) {
	spans := make([]context.Context, len(batch))
	for j, out := range batch {
		spans[j] = d.host.StartDispatch(ctx, &rows[at[j]], out.Envelope)
	}
	sctx, cancel := context.WithTimeout(ctx, d.cfg.SendTimeout)
	errs := bt.SendBatch(sctx, batch)
	cancel()
	for j, out := range batch {
		var err error
		if j < len(errs) {
			err = errs[j]
		} else {
			err = errBatchResultMissing
		}
		results[at[j]] = d.host.Transmitted(out.Envelope, err)
		d.host.EndDispatch(spans[j], out.Envelope, results[at[j]])
	}
}
