package bus

import (
	"context"
	"sync"
)

// scope is the state of one handling attempt, carried in the handler's ctx:
// the incoming envelope and the messages sent while handling it, which are
// released only when every handler returned nil. Once the attempt is
// settled the scope is done, and sends with its ctx fail with
// ErrHandlerDone instead of vanishing.
type scope struct {
	bus      *Bus
	incoming *Envelope
	attempt  int        // immediate attempt, from 1
	tx       HandlingTx // the attempt's outbox transaction, if any
	mu       sync.Mutex
	outbox   []pending
	sends    int  // messages given IDs so far: the position of the next send
	done     bool // the attempt is settled
	after    []func(context.Context)
}

type scopeKey struct{}

func withScope(ctx context.Context, s *scope) context.Context {
	return context.WithValue(ctx, scopeKey{}, s)
}

func scopeFrom(ctx context.Context) *scope {
	s, _ := ctx.Value(scopeKey{}).(*scope)
	return s
}

// IncomingMessage returns the envelope of the message being handled, or nil
// when ctx does not come from a handler. Treat it as read-only.
func IncomingMessage(ctx context.Context) *Envelope {
	if s := scopeFrom(ctx); s != nil {
		return s.incoming
	}
	return nil
}

// Attempt reports which handling attempt of the incoming message is running:
// immediate counts from 1 within this delivery, delayed is how many delayed
// retries came before it (it travels in the HeaderDelayedRetries header).
// Both are 0 when ctx does not come from a handler.
func Attempt(ctx context.Context) (immediate, delayed int) {
	s := scopeFrom(ctx)
	if s == nil {
		return 0, 0
	}
	return s.attempt, delayedRetries(s.incoming)
}

// nextID returns the ID of the next message sent in this attempt, derived
// from the incoming ID, the sending endpoint and the send's position: every
// attempt at the same message numbers its sends from the same start.
func (s *scope) nextID(endpoint string) string {
	s.mu.Lock()
	n := s.sends
	s.sends++
	s.mu.Unlock()
	return derivedID(s.incoming.ID, endpoint, n)
}

// add queues messages until the attempt succeeds: all of them, or none
// when the attempt is already settled.
func (s *scope) add(ps ...pending) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return ErrHandlerDone
	}
	s.outbox = append(s.outbox, ps...)
	return nil
}

// settled reports whether the attempt is settled.
func (s *scope) settled() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done
}

// finish marks the attempt settled and returns what it sent.
func (s *scope) finish() []pending {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.done = true
	out := s.outbox
	s.outbox = nil
	return out
}

// flush settles a successful attempt and releases its outbox: scheduled
// messages go to the store in one batch first, then immediate ones to the
// transport. A failure fails the handling attempt, which is retried; the
// retry sends the same messages under the same IDs, so the store keeps one
// row each and receivers can drop what was sent twice.
func (s *scope) flush(ctx context.Context) error {
	out := s.finish()
	b := s.bus
	now := b.clock.Now()
	var later []pending
	for _, p := range out {
		if !p.env.DueAt.IsZero() && p.env.DueAt.After(now) {
			later = append(later, p)
		}
	}
	if len(later) > 0 {
		if err := b.schedule(ctx, later); err != nil {
			return err
		}
	}
	for _, p := range out {
		if p.env.DueAt.IsZero() || !p.env.DueAt.After(now) {
			if err := b.transmit(ctx, p.env); err != nil {
				return err
			}
		}
	}
	return nil
}

// afterSuccess runs fn once the attempt succeeded and what it sent was
// released (or committed with the outbox); a failed attempt drops it.
func (s *scope) afterSuccess(fn func(context.Context)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.after = append(s.after, fn)
}

// succeeded runs what afterSuccess registered.
func (s *scope) succeeded(ctx context.Context) {
	s.mu.Lock()
	after := s.after
	s.after = nil
	s.mu.Unlock()
	for _, fn := range after {
		fn(ctx)
	}
}
