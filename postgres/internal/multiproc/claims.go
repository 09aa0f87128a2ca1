package main

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbus/bus"
	"github.com/postbus/bus/postgres"
)

// claimLog records which rows this process claimed, in the test's claims
// table, before the dispatcher sees them: a process killed after a claim has
// logged every row it could have handed over. Embedding keeps Setup and
// WatchDue visible to the bus.
type claimLog struct {
	*postgres.Persistence
	pool  *pgxpool.Pool
	name  string
	table string
}

func (c *claimLog) ClaimDueOutgoing(ctx context.Context, transport string, now time.Time, limit int, lease time.Duration) ([]bus.OutgoingMessage, error) {
	msgs, err := c.Persistence.ClaimDueOutgoing(ctx, transport, now, limit, lease)
	if err != nil || len(msgs) == 0 {
		return msgs, err
	}
	return msgs, c.log(ctx, msgs)
}

// ClaimOutgoingAhead logs look-ahead claims alike: the dispatcher uses it
// instead of ClaimDueOutgoing.
func (c *claimLog) ClaimOutgoingAhead(ctx context.Context, transport string, now time.Time, ahead time.Duration, limit int, lease time.Duration) (bus.AheadClaim, error) {
	claim, err := c.Persistence.ClaimOutgoingAhead(ctx, transport, now, ahead, limit, lease)
	if err != nil || len(claim.Rows) == 0 {
		return claim, err
	}
	return claim, c.log(ctx, claim.Rows)
}

func (c *claimLog) log(ctx context.Context, msgs []bus.OutgoingMessage) error {
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	for {
		_, err := c.pool.Exec(ctx, `INSERT INTO `+c.table+` (msg_id, proc) SELECT unnest($1::text[]), $2`, ids, c.name)
		if err == nil || ctx.Err() != nil {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}
