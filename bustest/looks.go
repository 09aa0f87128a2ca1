package bustest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/internal/poll"
)

// dispatcherLooks is an Observer that notes when the dispatchers of the
// buses it observes last found nothing to claim (bus.EventClaimEmpty): a
// case waits for such a look after a moment of its choosing, instead of
// sleeping for a guessed while, before it asserts that nothing more was
// dispatched.
type dispatcherLooks struct {
	mu        sync.Mutex
	lastEmpty time.Time // start of the last claim that found nothing
}

var _ bus.Observer = (*dispatcherLooks)(nil)

// waitEmptyClaim waits until a dispatcher observed started a claim at or
// after since and found nothing: a row stored before since and due by
// then was claimed earlier, or was not there.
func (d *dispatcherLooks) waitEmptyClaim(t *testing.T, since time.Time) {
	t.Helper()
	poll.Eventually(t, waitTimeout, func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return !d.lastEmpty.Before(since)
	}, "a claim of the dispatcher that found nothing, started after %s", since.Format(time.StampMicro))
}

// Event notes the empty claims.
func (d *dispatcherLooks) Event(_ context.Context, ev bus.ObserverEvent) {
	if ev.Kind != bus.EventClaimEmpty {
		return
	}
	d.mu.Lock()
	if ev.Start.After(d.lastEmpty) {
		d.lastEmpty = ev.Start
	}
	d.mu.Unlock()
}

// The other steps are not followed.

func (*dispatcherLooks) StartSend(ctx context.Context, _ bus.SendStart) context.Context { return ctx }
func (*dispatcherLooks) EndSend(context.Context, bus.SendEnd)                           {}
func (*dispatcherLooks) StartDispatch(ctx context.Context, _ bus.DispatchStart) context.Context {
	return ctx
}
func (*dispatcherLooks) EndDispatch(context.Context, bus.DispatchEnd) {}
func (*dispatcherLooks) StartReceive(ctx context.Context, _ bus.ReceiveStart) context.Context {
	return ctx
}
func (*dispatcherLooks) EndReceive(context.Context, bus.ReceiveEnd) {}
func (*dispatcherLooks) StartAttempt(ctx context.Context, _ bus.AttemptStart) context.Context {
	return ctx
}
func (*dispatcherLooks) EndAttempt(context.Context, bus.AttemptEnd) {}
