package bus

import (
	"cmp"
	"slices"
	"time"
)

// Ordering keys on the way through the store.
//
// Messages with one ordering key (WithOrderingKey) reach the transport in
// the order they were sent when they go through the scheduled-message
// store (the outbox, SendBatch), as they do when sent at once:
//
//   - rows stored together (one handling, one batch, one flush) fall due
//     at least keyStep apart in sending order (orderKeyed), so a claim,
//     which takes rows of equal due time by ID, takes them in that order;
//   - the dispatcher hands the rows of one key in a claimed batch over one
//     after another, in due order (keyLanes), while rows without a key go
//     out concurrently as before; a BatchTransport gets them in rounds, one
//     row of each key per SendBatch call;
//   - when the hand-over of a keyed row fails, the later rows of its key in
//     that batch are not handed over: each is recorded as failed with the
//     failed row's backoff and keyStep more per row (heldBackError), so it
//     comes back after the failed row, in order. It counts a failure of its
//     own. A failed row that goes to the error queue holds nothing back.

// keyStep is how far apart the rows of one ordering key stored together
// fall due: a microsecond, the resolution of PostgreSQL's timestamps.
const keyStep = time.Microsecond

// orderKeyed makes the rows of each ordering key among msgs (rows[i] is
// msgs[i]'s row) fall due one after another in sending order: a row due no
// later than the previous one of its key moves to keyStep after it, in its
// DueAt and, when its due time is relative, its Delay. The envelope keeps
// its own DueAt.
func orderKeyed(rows []OutgoingMessage, msgs []pending, now time.Time) {
	var last map[string]time.Time
	for i, p := range msgs {
		key := p.env.OrderingKey
		if key == "" {
			continue
		}
		r := &rows[i]
		due := r.DueAt
		if r.Delay > 0 {
			due = now.Add(r.Delay)
		}
		if prev, ok := last[key]; ok && !due.After(prev) {
			shift := prev.Add(keyStep).Sub(due)
			r.DueAt = r.DueAt.Add(shift)
			if r.Delay > 0 {
				r.Delay += shift
			}
			due = due.Add(shift)
		}
		if last == nil {
			last = make(map[string]time.Time, 1)
		}
		last[key] = due
	}
}

// heldBackError is the result of a keyed row that was not handed over
// because an earlier row of its key in the batch failed: settle records it
// as failed, due again Wait from now, after that row.
type heldBackError struct{ wait time.Duration }

func (e *heldBackError) Error() string {
	return "held back: an earlier message with the same ordering key failed and is retried first"
}

// decoded is a claimed row's envelope, or why it could not be decoded.
type decoded struct {
	env *Envelope
	err error
}

// keyLanes decodes rows and groups their indexes into lanes: the rows of
// one ordering key, in due order (then claim order), form one lane, handed
// over one after another; every other row is a lane of its own. Lanes come
// in the claim order of their first row.
func keyLanes(rows []OutgoingMessage) ([]decoded, [][]int) {
	dec := make([]decoded, len(rows))
	lanes := make([][]int, 0, len(rows))
	var byKey map[string]int
	for i := range rows {
		dec[i].env, dec[i].err = UnmarshalEnvelope(rows[i].Envelope)
		key := ""
		if dec[i].err == nil {
			key = dec[i].env.OrderingKey
		}
		if key == "" {
			lanes = append(lanes, []int{i})
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
func (d *dispatcher) holdsBack(row *OutgoingMessage) time.Duration {
	if d.cfg.NumberOfRetries > 0 && row.Failures+1 > d.cfg.NumberOfRetries {
		return 0
	}
	return d.backoff(row.Failures)
}
