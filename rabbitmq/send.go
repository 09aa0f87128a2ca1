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
	if err := checkName("queue", queue); err != nil {
		return fmt.Errorf("rabbitmq: send: %w", err)
	}
	msg, err := toPublishing(env)
	if err != nil {
		return fmt.Errorf("rabbitmq: send to %q: %w", queue, err)
	}
	t.setExpiration(&msg, env)
	if err := t.publish(ctx, "", queue, true, msg); err != nil {
		return fmt.Errorf("rabbitmq: send to %q: %w", queue, err)
	}
	return nil
}

// Publish publishes env to the events exchange with env.Type as the routing
// key, so it reaches every queue bound for that type, and returns once the
// broker confirmed it. With no bound queue the broker drops the event, which
// is not an error. Outages are handled as in Send.
func (t *Transport) Publish(ctx context.Context, env *bus.Envelope) error {
	if err := checkEventType(env.Type); err != nil {
		return fmt.Errorf("rabbitmq: publish: %w", err)
	}
	msg, err := toPublishing(env)
	if err != nil {
		return fmt.Errorf("rabbitmq: publish %q: %w", env.Type, err)
	}
	t.setExpiration(&msg, env)
	if err := t.publish(ctx, t.opts.EventsExchange, env.Type, false, msg); err != nil {
		return fmt.Errorf("rabbitmq: publish %q: %w", env.Type, err)
	}
	return nil
}

// publish retries on the next connection until the broker confirmed or
// refused the message, or ctx ends.
func (t *Transport) publish(ctx context.Context, exchange, key string, mandatory bool, msg amqp.Publishing) error {
	for stillOpen := 0; ; {
		s, err := t.session(ctx)
		if err != nil {
			return err
		}
		err = s.waitUnblocked(ctx)
		if err == nil {
			var p *publisher
			if p, err = s.publisher(); err == nil {
				err = p.publish(ctx, exchange, key, mandatory, msg)
			}
		}
		if err == nil || !lostConnection(err) && !s.conn.IsClosed() {
			return err
		}
		switch {
		case ctx.Err() != nil:
			return &NotConnectedError{Err: ctx.Err(), LastErr: err}
		case t.isClosed():
			return ErrClosed
		}
		// The connection is going down (the client closes it after a
		// failed write) or a channel failed under a live connection:
		// wait for the session to be replaced, a few times at most.
		select {
		case <-s.dead:
			stillOpen = 0
		case <-ctx.Done():
			return &NotConnectedError{Err: ctx.Err(), LastErr: err}
		case <-time.After(t.opts.ReconnectMin):
			if stillOpen++; stillOpen >= 5 {
				return err
			}
		}
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
