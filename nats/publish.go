package nats

import (
	"context"
	"errors"
	"fmt"

	natsio "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/postbus/bus"
)

// publish sends env on subject and waits for the stream's acknowledgement.
// Calls run concurrently over the connection, at most PublishWindow at once.
//
// A publish that returns an error must not reach the stream later. nats.go
// keeps what is published while it reconnects in its reconnect buffer and
// sends it after the reconnect, whatever its publisher was told meanwhile.
// So publish writes only while the connection is up, and otherwise waits
// for it (until ctx or PublishTimeout ends). When the connection drops
// after the message was written, the outcome is unknown: the message may
// be stored, lost, or (in the instant the client switched to its buffer)
// buffered. publish then sends it again once reconnected, under the same
// Nats-Msg-Id, and the stream's answer settles it: stored now, or a
// duplicate of the copy it already has. Both are success.
func (t *Transport) publish(ctx context.Context, subject string, env *bus.Envelope) error {
	select {
	case t.window <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("nats: publish %s: %w", subject, ctx.Err())
	}
	defer func() { <-t.window }()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("nats: publish %s: %w", subject, err)
	}
	ctx, cancel := context.WithTimeoutCause(ctx, t.opts.PublishTimeout,
		fmt.Errorf("%w: PublishTimeout %v", context.DeadlineExceeded, t.opts.PublishTimeout))
	defer cancel()
	msg := encodeMsg(subject, env, originOf(ctx))
	for {
		if err := t.awaitConnected(ctx); err != nil {
			return fmt.Errorf("nats: publish %s: %w: %w", subject, ErrNoAck, err)
		}
		f, err := t.js.PublishMsgAsync(msg, jetstream.WithExpectStream(t.opts.Stream))
		if errors.Is(err, natsio.ErrReconnectBufExceeded) {
			continue // the connection dropped just now and nothing was buffered: wait for it
		}
		if err != nil {
			return fmt.Errorf("nats: publish %s: %w", subject, err)
		}
		select {
		case ack := <-f.Ok():
			if ack == nil {
				return fmt.Errorf("nats: publish %s: %w", subject, ErrNoAck)
			}
			return nil
		case err := <-f.Err():
			if errors.Is(err, natsio.ErrDisconnected) {
				continue // outcome unknown: ask the stream again once reconnected
			}
			return fmt.Errorf("nats: publish %s: %w: %w", subject, ErrNoAck, err)
		case <-ctx.Done():
			return fmt.Errorf("nats: publish %s: %w: %w", subject, ErrNoAck, context.Cause(ctx))
		}
	}
}

// awaitConnected returns once the connection is up, or an error when it
// was closed or ctx ended first. While the client reconnects, anything
// published would go to its reconnect buffer.
func (t *Transport) awaitConnected(ctx context.Context) error {
	if t.nc.Status() == natsio.CONNECTED {
		return nil
	}
	ch := t.nc.StatusChanged(natsio.CONNECTED, natsio.CLOSED)
	defer t.nc.RemoveStatusListener(ch)
	for {
		switch t.nc.Status() {
		case natsio.CONNECTED, natsio.DRAINING_SUBS, natsio.DRAINING_PUBS:
			return nil // a draining connection refuses the publish itself
		case natsio.CLOSED:
			return natsio.ErrConnectionClosed
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", natsio.ErrDisconnected, context.Cause(ctx))
		}
	}
}
