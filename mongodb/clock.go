package mongodb

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// StoreNow returns the server's current time, to the millisecond (the
// precision of the hello command's localTime).
func (p *Persistence) StoreNow(ctx context.Context) (time.Time, error) {
	now, err := p.serverTime(ctx)
	if err != nil {
		return time.Time{}, fmt.Errorf("mongodb: store now: %w", err)
	}
	return now, nil
}

// serverTime reads the server's clock from the hello command's localTime
// (isMaster on servers older than MongoDB 4.4.2). BSON dates hold
// milliseconds, so the value is up to a millisecond behind the server's
// real time: compared with due times it can make a message late by that
// much, never early. Times computed forward from it use latest.
func (p *Persistence) serverTime(ctx context.Context) (time.Time, error) {
	var err error
	for _, cmd := range [...]string{"hello", "isMaster"} {
		var raw bson.Raw
		raw, err = p.db.RunCommand(ctx, bson.D{{Key: cmd, Value: 1}}).Raw()
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			continue
		}
		t, ok := raw.Lookup("localTime").TimeOK()
		if !ok {
			return time.Time{}, fmt.Errorf("server time: %s reply has no localTime date", cmd)
		}
		return t, nil
	}
	return time.Time{}, fmt.Errorf("server time: %w", err)
}

// latest returns the latest time the server's clock can have shown when
// serverTime read now: a due time computed from it (now + Delay, now +
// RetryAfter) is never early.
func latest(now time.Time) time.Time { return now.Add(time.Millisecond) }
