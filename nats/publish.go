package nats

import (
	"context"
	"errors"
	"fmt"

	natsio "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/postbus/bus"
)

// Publishing. Calls run concurrently over the connection, at most
// PublishWindow messages awaiting their acknowledgement at once; each
// message's outcome is the stream's acknowledgement of that message.
//
// A publish that returns an error must not reach the stream later. nats.go
// keeps what is published while it reconnects in its reconnect buffer and
// sends it after the reconnect, whatever its publisher was told meanwhile.
// So the transport writes only while the connection is up, and otherwise
// waits for it (until ctx or PublishTimeout ends). When the connection drops
// after the message was written, the outcome is unknown: the message may
// be stored, lost, or (in the instant the client switched to its buffer)
// buffered. It is then sent again once reconnected, under the same
// Nats-Msg-Id, and the stream's answer settles it: stored now, or a
// duplicate of the copy it already has. Both are success.

// publishAll publishes each msgs[i] whose errs[i] is nil and sets errs[i]
// to its outcome. The messages are written one after another without
// waiting for acknowledgements, each taking a slot of the publish window,
// while a second goroutine awaits the acknowledgements in order and frees
// the slots: a batch larger than the window is written as acknowledgements
// arrive. PublishTimeout bounds the whole call.
func (t *Transport) publishAll(ctx context.Context, msgs []*natsio.Msg, errs []error) {
	ctx, cancel := context.WithTimeoutCause(ctx, t.opts.PublishTimeout,
		fmt.Errorf("%w: PublishTimeout %v", context.DeadlineExceeded, t.opts.PublishTimeout))
	defer cancel()
	if len(msgs) == 1 {
		if errs[0] == nil {
			errs[0] = t.permanent(ctx, msgs[0].Subject, t.publishOne(ctx, msgs[0]), nil)
		}
		return
	}
	futures := make([]jetstream.PubAckFuture, len(msgs))
	written := make(chan int, len(msgs))
	awaited := make(chan struct{})
	go func() {
		defer close(awaited)
		for i := range written {
			errs[i] = t.await(ctx, msgs[i], futures[i])
			<-t.window
		}
	}()
	for i, m := range msgs {
		if errs[i] != nil {
			continue
		}
		if errs[i] = t.takeSlot(ctx, m.Subject); errs[i] != nil {
			continue
		}
		if futures[i], errs[i] = t.write(ctx, m); errs[i] != nil {
			<-t.window
			continue
		}
		written <- i
	}
	close(written)
	<-awaited
	noStream := map[string]bool{} // subject -> no stream takes it; asked once per call
	for i, err := range errs {
		if err != nil && msgs[i] != nil {
			errs[i] = t.permanent(ctx, msgs[i].Subject, err, noStream)
		}
	}
}

// permanent marks err, the outcome of publishing to subject, with
// bus.Permanent when sending again cannot help: the message is larger than
// the server's max_payload or the stream's maximum message size, or no
// stream takes the subject (the stream was deleted). A publish nobody
// answered is checked against the server's streams, once per subject when
// noStream (the answers so far) is not nil: while JetStream is only
// unavailable, the error stays transient.
func (t *Transport) permanent(ctx context.Context, subject string, err error, noStream map[string]bool) error {
	switch {
	case err == nil, errors.Is(err, bus.ErrPermanent):
		return err
	case errors.Is(err, natsio.ErrMaxPayload), errors.Is(err, jetstream.ErrStreamMessageExceedsMaximum):
		return bus.Permanent(err)
	case errors.Is(err, jetstream.ErrNoStreamResponse):
		none, asked := noStream[subject]
		if !asked {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.opts.PublishTimeout)
			_, serr := t.js.StreamNameBySubject(cctx, subject)
			cancel()
			none = errors.Is(serr, jetstream.ErrStreamNotFound)
			if noStream != nil {
				noStream[subject] = none
			}
		}
		if none {
			return bus.Permanent(fmt.Errorf("%w (no stream takes subject %s)", err, subject))
		}
	}
	return err
}

// publishOne publishes one message and waits for its acknowledgement.
func (t *Transport) publishOne(ctx context.Context, m *natsio.Msg) error {
	if err := t.takeSlot(ctx, m.Subject); err != nil {
		return err
	}
	defer func() { <-t.window }()
	f, err := t.write(ctx, m)
	if err != nil {
		return err
	}
	return t.await(ctx, m, f)
}

// takeSlot waits for a free slot of the publish window.
func (t *Transport) takeSlot(ctx context.Context, subject string) error {
	select {
	case t.window <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("nats: publish %s: %w", subject, context.Cause(ctx))
	}
	if err := ctx.Err(); err != nil {
		<-t.window
		return fmt.Errorf("nats: publish %s: %w", subject, context.Cause(ctx))
	}
	return nil
}

// write publishes m once the connection is up and returns the future of
// its acknowledgement.
func (t *Transport) write(ctx context.Context, m *natsio.Msg) (jetstream.PubAckFuture, error) {
	for {
		if err := t.awaitConnected(ctx); err != nil {
			return nil, fmt.Errorf("nats: publish %s: %w: %w", m.Subject, ErrNoAck, err)
		}
		f, err := t.js.PublishMsgAsync(m, jetstream.WithExpectStream(t.opts.Stream))
		if errors.Is(err, natsio.ErrReconnectBufExceeded) {
			continue // the connection dropped just now and nothing was buffered: wait for it
		}
		if err != nil {
			return nil, fmt.Errorf("nats: publish %s: %w", m.Subject, err)
		}
		return f, nil
	}
}

// await waits for the acknowledgement f promises for m. When the connection
// dropped before it came, the outcome is unknown: m is written again once
// reconnected, and the stream's answer to that settles it.
func (t *Transport) await(ctx context.Context, m *natsio.Msg, f jetstream.PubAckFuture) error {
	for {
		select {
		case ack := <-f.Ok():
			if ack == nil {
				return fmt.Errorf("nats: publish %s: %w", m.Subject, ErrNoAck)
			}
			return nil
		case err := <-f.Err():
			if !errors.Is(err, natsio.ErrDisconnected) {
				return fmt.Errorf("nats: publish %s: %w: %w", m.Subject, ErrNoAck, err)
			}
			if f, err = t.write(ctx, m); err != nil {
				return err
			}
		case <-ctx.Done():
			return fmt.Errorf("nats: publish %s: %w: %w", m.Subject, ErrNoAck, context.Cause(ctx))
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
