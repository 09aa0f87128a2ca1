package redis

import (
	"context"
	"fmt"
	"time"
)

// WatchDue calls wake with the earliest claimable time of the rows each
// StoreOutgoing call stored, in any process, until ctx ends (then it
// returns nil). Stores publish on the channel "<prefix>:due" (PUBLISH, which
// a cluster forwards to every node). An error means watching stopped: the
// dispatcher keeps polling and calls WatchDue again later.
func (p *Persistence) WatchDue(ctx context.Context, wake func(due time.Time)) error {
	sub := p.client.Subscribe(ctx, p.channel)
	defer func() { _ = sub.Close() }()
	if _, err := sub.Receive(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("redis: watch due: %w", err)
	}
	ch := sub.Channel()
	for {
		select {
		case <-ctx.Done():
			return nil
		case m, ok := <-ch:
			if !ok {
				return fmt.Errorf("redis: watch due: %w", ErrSubscriptionClosed)
			}
			if due, err := parseMicros(m.Payload); err == nil {
				wake(due)
			}
		}
	}
}
