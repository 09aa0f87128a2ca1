package bus

import (
	"maps"
	"strconv"
	"time"

	"github.com/postbus/bus/internal/dispatch"
)

// How a message becomes a row of the scheduled-message store, beside
// rows (outgoing.go): the dispatch retry policy of the sender travels in
// its headers, and the rows of one ordering key stored together fall due
// in sending order. The dispatcher (internal/dispatch) reads both back.

// withDispatchPolicy returns env with this bus's dispatch retry policy in
// its headers (HeaderDispatchRetries, HeaderDispatchBackoff), for storing:
// a row is retried by the rules of the endpoint that scheduled it, not by
// those of whichever dispatcher claims it. env itself is not changed.
func (b *Bus) withDispatchPolicy(env *Envelope) *Envelope {
	c := *env
	c.Headers = maps.Clone(env.Headers)
	c.SetHeader(HeaderDispatchRetries, strconv.Itoa(b.cfg.Dispatcher.NumberOfRetries))
	c.SetHeader(HeaderDispatchBackoff, b.cfg.Dispatcher.RetryBackoff.String())
	return &c
}

// orderKeyed makes the rows of each ordering key among msgs (rows[i] is
// msgs[i]'s row) fall due one after another in sending order, so a claim,
// which takes rows of equal due time by ID, takes them in that order: a
// row due no later than the previous one of its key moves to
// dispatch.KeyStep after it, in its DueAt and, when its due time is
// relative, its Delay. The envelope keeps its own DueAt. The dispatcher
// keeps that order on the way to the transport (internal/dispatch,
// order.go).
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
			shift := prev.Add(dispatch.KeyStep).Sub(due)
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
