package main

import (
	"context"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/internal/storetest"
	"github.com/postbus/bus/postgres"
)

// claimLog logs which rows this process claimed before the dispatcher
// sees them (storetest.ClaimLogger). Embedding keeps Setup and WatchDue
// visible to the bus.
type claimLog struct {
	*postgres.Persistence
	log storetest.ClaimLogger
}

func (c *claimLog) ClaimDueOutgoing(ctx context.Context, transport string, now time.Time, limit int, lease time.Duration) ([]bus.OutgoingMessage, error) {
	return c.log.Due(ctx)(c.Persistence.ClaimDueOutgoing(ctx, transport, now, limit, lease))
}

// ClaimOutgoingAhead logs look-ahead claims alike: the dispatcher uses it
// instead of ClaimDueOutgoing.
func (c *claimLog) ClaimOutgoingAhead(ctx context.Context, transport string, now time.Time, ahead time.Duration, limit int, lease time.Duration) (bus.AheadClaim, error) {
	return c.log.Ahead(ctx)(c.Persistence.ClaimOutgoingAhead(ctx, transport, now, ahead, limit, lease))
}
