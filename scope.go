package bus

import (
	"context"
	"sync"
)

// scope is the state of one handling attempt, carried in the handler's ctx:
// the incoming envelope and the messages sent while handling it, which are
// released only when every handler returned nil.
type scope struct {
	bus      *Bus
	incoming *Envelope
	attempt  int // immediate attempt, from 1
	mu       sync.Mutex
	outbox   []*Envelope
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

func (s *scope) add(env *Envelope) {
	s.mu.Lock()
	s.outbox = append(s.outbox, env)
	s.mu.Unlock()
}

// flush releases the outbox: scheduled messages go to the store in one
// batch first, then immediate ones to the transport. A failure fails the
// handling attempt, which is retried; messages already released may then be
// sent again (at least once, with the same IDs).
func (s *scope) flush(ctx context.Context) error {
	s.mu.Lock()
	out := s.outbox
	s.outbox = nil
	s.mu.Unlock()
	b := s.bus
	now := b.clock.Now()
	var later []*Envelope
	for _, env := range out {
		if !env.DueAt.IsZero() && env.DueAt.After(now) {
			later = append(later, env)
		}
	}
	if len(later) > 0 {
		if err := b.schedule(ctx, later); err != nil {
			return err
		}
	}
	for _, env := range out {
		if env.DueAt.IsZero() || !env.DueAt.After(now) {
			if err := b.transmit(ctx, env); err != nil {
				return err
			}
		}
	}
	return nil
}
