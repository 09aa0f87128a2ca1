package dispatch

import (
	"errors"
	"strconv"
	"time"

	"github.com/postbus/bus/backend"
)

// A scheduled row is retried by the rules of the endpoint that scheduled
// it, not by those of whichever endpoint's dispatcher claims it: several
// endpoints share a store, and a row must not be retried for ever because
// a dispatcher with NumberOfRetries 0 took it. The sender's
// Dispatcher.NumberOfRetries and RetryBackoff travel in the stored
// envelope's headers (HeaderDispatchRetries, HeaderDispatchBackoff, put
// there by the bus's withDispatchPolicy), so no store needs a column for
// them. They are for the dispatcher only: the hand-over decodes a row
// without them (decodeRow), so the
// transport and the receivers never get them. A row without them
// (scheduled by an older version) gets the claiming dispatcher's
// configuration.

// dispatchPolicy is how a row's failed hand-overs are retried.
type dispatchPolicy struct {
	retries int           // failed hand-overs before the error queue; 0: transient ones for ever
	backoff time.Duration // the first wait, doubled per failure up to a minute
}

// policyOf returns the policy of the endpoint that scheduled row, or this
// dispatcher's own for a row that does not carry one.
func (d *Dispatcher) policyOf(row *backend.OutgoingMessage) dispatchPolicy {
	p := dispatchPolicy{retries: d.cfg.NumberOfRetries, backoff: d.cfg.RetryBackoff}
	env, err := backend.UnmarshalEnvelope(row.Envelope)
	if err != nil {
		return p
	}
	if n, err := strconv.Atoi(env.Header(backend.HeaderDispatchRetries)); err == nil && n >= 0 {
		p.retries = n
	}
	if w, err := time.ParseDuration(env.Header(backend.HeaderDispatchBackoff)); err == nil && w > 0 {
		p.backoff = w
	}
	return p
}

// exhausted reports whether a row that failed failures times, the last
// time with err, goes to the error queue: past its retries, or, for a
// permanent failure, past them even when they are 0.
func (p dispatchPolicy) exhausted(failures int, err error) bool {
	return (p.retries > 0 || errors.Is(err, backend.ErrPermanent)) && failures > p.retries
}

// wait is the backoff after a row's failures-th failure: the policy's
// backoff doubling per failure, at most one minute.
func (p dispatchPolicy) wait(failures int) time.Duration {
	w := p.backoff
	for range min(failures, 16) {
		w *= 2
	}
	return min(w, time.Minute)
}

// decodeRow decodes a claimed row's envelope without the dispatch policy
// headers (HeaderDispatchRetries, HeaderDispatchBackoff), which are for
// the dispatcher only; an envelope with no other header gets none.
func decodeRow(data []byte) (*backend.Envelope, error) {
	env, err := backend.UnmarshalEnvelope(data)
	if err != nil || env.Headers == nil {
		return env, err
	}
	delete(env.Headers, backend.HeaderDispatchRetries)
	delete(env.Headers, backend.HeaderDispatchBackoff)
	if len(env.Headers) == 0 {
		env.Headers = nil
	}
	return env, nil
}
