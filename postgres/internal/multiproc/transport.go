package main

import (
	"context"
	"sync"

	"github.com/postbus/bus"
)

// syncTransport is an in-memory transport that runs the receiving handler
// inside Send, so Send returns nil only once the handler has recorded the
// message. The bus's MemoryTransport queues in process memory instead: a
// SIGKILL would lose what it had accepted but not yet handled, which is the
// transport's loss, not the store's. With this one, every row the
// dispatcher deleted has been recorded, so the test proves the store's
// at-least-once guarantee end to end.
type syncTransport struct {
	mu       sync.Mutex
	handlers map[string]bus.DeliveryHandler
	ready    chan struct{} // closed once a queue has a receiver
}

func newSyncTransport() *syncTransport {
	return &syncTransport{handlers: map[string]bus.DeliveryHandler{}, ready: make(chan struct{})}
}

// Identity names the transport on the scheduled rows: the test stores its
// rows with this identity.
func (t *syncTransport) Identity() string { return TransportIdentity }

func (t *syncTransport) Provision(context.Context, bus.Topology) error { return nil }

func (t *syncTransport) Send(ctx context.Context, queue string, env *bus.Envelope) error {
	select {
	case <-t.ready:
	case <-ctx.Done():
		return ctx.Err()
	}
	t.mu.Lock()
	h := t.handlers[queue]
	t.mu.Unlock()
	if h == nil {
		return nil // the error queue: nothing in this test reads it
	}
	return h(context.WithoutCancel(ctx), env.Clone())
}

func (t *syncTransport) Publish(context.Context, *bus.Envelope) error { return nil }

func (t *syncTransport) Receive(ctx context.Context, queue string, _ bus.ReceiveOptions, h bus.DeliveryHandler) error {
	t.mu.Lock()
	t.handlers[queue] = h
	select {
	case <-t.ready:
	default:
		close(t.ready)
	}
	t.mu.Unlock()
	<-ctx.Done()
	t.mu.Lock()
	delete(t.handlers, queue)
	t.mu.Unlock()
	return nil
}
