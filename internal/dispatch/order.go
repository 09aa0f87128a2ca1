package dispatch

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	"github.com/postbus/bus/backend"
)

// Ordering keys on the way through the store.
//
// Messages with one ordering key (WithOrderingKey) reach the transport in
// the order they were sent when they go through the scheduled-message
// store (the outbox, SendBatch), as they do when sent at once:
//
//   - rows stored together (one handling, one batch, one flush) fall due
//     at least KeyStep apart in sending order (the bus's orderKeyed), so a claim,
//     which takes rows of equal due time by ID, takes them in that order;
//   - the dispatcher hands the rows of one key in a claimed batch over one
//     after another, in due order (keyLanes), while rows without a key go
//     out concurrently as before; a BatchTransport gets them in rounds, one
//     row of each key per SendBatch call;
//   - when the hand-over of a keyed row fails, the later rows of its key in
//     that batch are not handed over: each is recorded as failed with the
//     failed row's backoff and KeyStep more per row (heldBackError), so it
//     comes back after the failed row, in order. It counts a failure of its
//     own. A failed row that goes to the error queue holds nothing back.
//     In later batches too, the dispatcher holds back the rows of that key
//     (heldKeys) until the failed row comes back to it, or until its retry
//     time and a lease have passed. A row of the key whose lease lapsed
//     (its dispatcher died) may come back out of order.

// KeyStep is how far apart the rows of one ordering key stored together
// fall due (the bus's orderKeyed): a microsecond, the resolution of
// PostgreSQL's timestamps. A row held back behind a failed one of its key
// comes back KeyStep after the row before it.
const KeyStep = time.Microsecond

// heldBackError is the result of a keyed row that was not handed over
// because an earlier row of its key in the batch failed: settle records it
// as failed, due again Wait from now, after that row.
type heldBackError struct{ wait time.Duration }

func (e *heldBackError) Error() string {
	return "held back: an earlier message with the same ordering key failed and is retried first"
}

// decoded is a claimed row's envelope, or why it could not be decoded.
type decoded struct {
	env *backend.Envelope
	err error
}

// keyLanes decodes rows (without their dispatch policy headers, which are
// for the dispatcher only) and groups their indexes into lanes: the rows of
// one ordering key, in due order (then claim order), form one lane, handed
// over one after another; every other row is a lane of its own. Lanes come
// in the claim order of their first row.
func keyLanes(rows []backend.OutgoingMessage) ([]decoded, [][]int) {
	dec := make([]decoded, len(rows))
	lanes := make([][]int, 0, len(rows))
	var byKey map[string]int
	single := make([]int, len(rows)) // the backing array of the one-row lanes
	for i := range rows {
		dec[i].env, dec[i].err = decodeRow(rows[i].Envelope)
		key := ""
		if dec[i].err == nil {
			key = dec[i].env.OrderingKey
		}
		if key == "" {
			single[i] = i
			lanes = append(lanes, single[i:i+1:i+1])
			continue
		}
		if byKey == nil {
			byKey = map[string]int{}
		}
		if l, ok := byKey[key]; ok {
			lanes[l] = append(lanes[l], i)
			continue
		}
		byKey[key] = len(lanes)
		lanes = append(lanes, []int{i})
	}
	for _, l := range lanes {
		if len(l) > 1 {
			slices.SortStableFunc(l, func(a, b int) int { return cmp.Compare(rows[a].DueAt.UnixNano(), rows[b].DueAt.UnixNano()) })
		}
	}
	return dec, lanes
}

// holdsBack returns the wait of the rows a failed keyed row holds back:
// its own backoff, as settle will record it. A row about to go to the
// error queue holds nothing back (0).
func (d *Dispatcher) holdsBack(row *backend.OutgoingMessage, err error) time.Duration {
	p := d.policyOf(row)
	if p.exhausted(row.Failures+1, err) {
		return 0
	}
	return p.wait(row.Failures)
}

// heldKeys are the ordering keys whose rows a dispatcher holds back in
// later batches, because a row of the key failed: until that row comes
// back to it, or until the row's retry plus a lease has passed (another
// dispatcher then took it). Only the dispatcher's loop uses it.
type heldKeys map[string]*heldKey

type heldKey struct {
	leader string        // the ID of the row that failed
	wait   time.Duration // its backoff
	n      int           // rows held back behind it so far
	until  time.Time     // bus clock
}

// handOver hands rows over (handOverAll), except the rows of held keys,
// which are held back, then holds the keys of the rows that failed.
func (hk *heldKeys) handOver(ctx context.Context, d *Dispatcher, rows []backend.OutgoingMessage, stopBy time.Time) []error {
	now := d.clock.Now()
	results := make([]error, len(rows))
	var ready []int
	for i := range rows {
		if results[i] = hk.heldBack(&rows[i], now, nil); results[i] == nil {
			ready = append(ready, i)
		}
	}
	if len(ready) == len(rows) {
		results = d.handOverAll(ctx, rows, stopBy)
	} else if len(ready) > 0 {
		sub := make([]backend.OutgoingMessage, len(ready))
		for j, i := range ready {
			sub[j] = rows[i]
		}
		for j, err := range d.handOverAll(ctx, sub, stopBy) {
			results[ready[j]] = err
		}
	}
	var held *heldBackError
	for i, err := range results {
		if err == nil || errors.Is(err, errNotAttempted) || errors.As(err, &held) || ctx.Err() != nil {
			continue
		}
		wait := d.holdsBack(&rows[i], err)
		if key := orderingKeyOf(&rows[i]); key != "" && wait > 0 {
			if *hk == nil {
				*hk = heldKeys{}
			}
			// The rows it held back in this batch are fewer than the batch.
			(*hk)[key] = &heldKey{leader: rows[i].ID, wait: wait, n: len(rows), until: now.Add(wait + d.cfg.Lease)}
		}
	}
	return results
}

// heldBack returns the result of a row whose key is held (a heldBackError
// behind the rows held back before it), or otherwise. The failed row
// itself, back for its retry, releases its key.
func (hk heldKeys) heldBack(row *backend.OutgoingMessage, now time.Time, otherwise error) error {
	if len(hk) == 0 {
		return otherwise
	}
	key := orderingKeyOf(row)
	k := hk[key]
	switch {
	case k == nil:
		return otherwise
	case row.ID == k.leader || now.After(k.until):
		delete(hk, key)
		return otherwise
	}
	k.n++
	return &heldBackError{wait: k.wait + time.Duration(k.n)*KeyStep}
}

// orderingKeyOf returns the ordering key of a row's envelope; "" when it
// has none or does not decode.
func orderingKeyOf(row *backend.OutgoingMessage) string {
	env, err := backend.UnmarshalEnvelope(row.Envelope)
	if err != nil {
		return ""
	}
	return env.OrderingKey
}
