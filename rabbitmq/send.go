package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/postbus/bus"
)

// Send publishes env to the named queue through the default exchange
// (routing key = queue), persistent, with the mandatory flag, and returns
// once the broker confirmed it. A queue that does not exist makes it fail
// with ErrUnroutable rather than drop the message.
//
// During an outage Send waits for the connection to come back. If the
// connection is lost after the message was written but before the broker
// confirmed it, Send publishes it again on the new connection with the same
// message ID: the queue may then hold it twice (at-least-once). If ctx ends
// first, Send returns an error matching ErrNotConnected and ctx's error.
// While the broker refuses the connection (wrong credentials, missing
// vhost), Send fails at once with a *PermanentError instead of waiting.
func (t *Transport) Send(ctx context.Context, queue string, env *bus.Envelope) error {
	return t.SendBatch(ctx, []bus.Outbound{{Queue: queue, Envelope: env}})[0]
}

// Publish publishes env to the events exchange with env.Type as the routing
// key, so it reaches every queue bound for that type, and returns once the
// broker confirmed it. With no bound queue the broker drops the event, which
// is not an error. Outages are handled as in Send.
func (t *Transport) Publish(ctx context.Context, env *bus.Envelope) error {
	return t.SendBatch(ctx, []bus.Outbound{{Publish: true, Envelope: env}})[0]
}

// outgoing is one message on its way to the broker, and its outcome.
type outgoing struct {
	exchange, key string
	mandatory     bool
	msg           amqp.Publishing
	err           error
}

// prepare checks and encodes m: a send goes through the default exchange
// (routing key = queue) with the mandatory flag, a publish to the events
// exchange with the type as routing key.
func (t *Transport) prepare(m bus.Outbound) (*outgoing, error) {
	env := m.Envelope
	o := &outgoing{exchange: t.opts.EventsExchange, key: env.Type}
	if m.Publish {
		if err := checkEventType(env.Type); err != nil {
			return nil, fmt.Errorf("rabbitmq: publish: %w", err)
		}
	} else {
		if err := checkName("queue", m.Queue); err != nil {
			return nil, fmt.Errorf("rabbitmq: send: %w", err)
		}
		o.exchange, o.key, o.mandatory = "", m.Queue, true
	}
	var err error
	if o.msg, err = toPublishing(env); err != nil {
		return nil, failed(m, err)
	}
	t.setExpiration(&o.msg, env)
	return o, nil
}

// failed names m's destination in err.
func failed(m bus.Outbound, err error) error {
	if m.Publish {
		return fmt.Errorf("rabbitmq: publish %q: %w", m.Envelope.Type, err)
	}
	return fmt.Errorf("rabbitmq: send to %q: %w", m.Queue, err)
}

// publishAll publishes batch on the live session and sets each message's
// outcome. Messages whose connection or channel was lost before the broker
// confirmed them are published again on the next session, until the broker
// confirmed or refused them, or ctx ends.
func (t *Transport) publishAll(ctx context.Context, batch []*outgoing) {
	pending := batch
	for stillOpen := 0; ; {
		s, err := t.session(ctx)
		if err != nil {
			setErr(pending, err)
			return
		}
		if err := s.waitUnblocked(ctx); err != nil {
			setErr(pending, err)
		} else {
			s.publishAll(ctx, pending)
		}
		var retry []*outgoing
		for _, o := range pending {
			if o.err != nil && (lostConnection(o.err) || s.conn.IsClosed()) {
				retry = append(retry, o)
			}
		}
		if pending = retry; len(pending) == 0 {
			return
		}
		switch {
		case ctx.Err() != nil:
			notConnected(pending, ctx.Err())
			return
		case t.isClosed():
			setErr(pending, ErrClosed)
			return
		}
		// The connection is going down (the client closes it after a
		// failed write) or a channel failed under a live connection:
		// wait for the session to be replaced, a few times at most.
		select {
		case <-s.dead:
			stillOpen = 0
		case <-ctx.Done():
			notConnected(pending, ctx.Err())
			return
		case <-time.After(t.opts.ReconnectMin):
			if stillOpen++; stillOpen >= 5 {
				return
			}
		}
	}
}

func setErr(batch []*outgoing, err error) {
	for _, o := range batch {
		o.err = err
	}
}

func notConnected(batch []*outgoing, err error) {
	for _, o := range batch {
		o.err = &NotConnectedError{Err: err, LastErr: o.err}
	}
}

// lostConnection reports whether err means the channel or connection went
// away, as opposed to the broker refusing the message.
func lostConnection(err error) bool {
	if errors.Is(err, errConnectionLost) || errors.Is(err, amqp.ErrClosed) {
		return true
	}
	var ae *amqp.Error
	if errors.As(err, &ae) {
		return !isChannelLevel(ae)
	}
	return false
}

// maxExpirationMS is the largest per-message expiration RabbitMQ accepts.
const maxExpirationMS = 1<<32 - 1

// setExpiration gives a message with a time to be received a broker-side
// expiration, as a safety net: its ExpiresAt plus Options.ExpiryMargin. It
// reads env.ExpiresAt only, never the timer headers: the error and
// dead-letter copies, whose ExpiresAt is zero and whose original timers
// live on in headers, stay in their queues until someone acts.
func (t *Transport) setExpiration(msg *amqp.Publishing, env *bus.Envelope) {
	if env.ExpiresAt.IsZero() || t.opts.ExpiryMargin < 0 {
		return
	}
	ttl := (time.Until(env.ExpiresAt) + t.opts.ExpiryMargin).Milliseconds()
	if ttl > maxExpirationMS {
		return // beyond what AMQP can express: no safety net, never an early drop
	}
	msg.Expiration = strconv.FormatInt(max(ttl, 0), 10)
}
