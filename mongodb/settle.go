package mongodb

import (
	"context"
	"fmt"
	"time"

	"github.com/postbus/bus"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Settling changes only documents that a claim's token still holds: each
// call filters by _id, token and a lease_until that is set. Claims that
// share a token (one claim round) share one statement.

// DeleteOutgoing removes the claimed messages that their tokens still hold,
// with one DeleteMany per token, and returns how many it removed.
func (p *Persistence) DeleteOutgoing(ctx context.Context, claims []bus.Claim) (int, error) {
	n := 0
	for _, g := range byToken(claims) {
		res, err := p.msgs.DeleteMany(ctx, heldBy(g.token, g.ids))
		if err != nil {
			return n, fmt.Errorf("mongodb: delete: %w", err)
		}
		n += int(res.DeletedCount)
	}
	return n, nil
}

// ReleaseOutgoing ends the leases of claimed messages that their tokens
// still hold, without counting a failure, and returns how many it
// released. Each is claimable again when it was before its claim: at its
// due time, or at the end of its last failure's backoff (retry_at, which
// RecordOutgoingFailures sets with available_at) when that is later, so a
// release never cuts a backoff short. Without update pipelines (FerretDB
// has none) neither can be copied into available_at on the server, so it
// reads the held documents' due and retry times first, then updates the
// documents sharing a time with one UpdateMany.
func (p *Persistence) ReleaseOutgoing(ctx context.Context, claims []bus.Claim) (int, error) {
	n := 0
	for _, g := range byToken(claims) {
		cur, err := p.msgs.Find(ctx, heldBy(g.token, g.ids), options.Find().SetProjection(bson.D{{Key: fieldDueAt, Value: 1}, {Key: fieldRetryAt, Value: 1}}))
		if err != nil {
			return n, fmt.Errorf("mongodb: release: %w", err)
		}
		var held []message
		if err := cur.All(ctx, &held); err != nil {
			return n, fmt.Errorf("mongodb: release: %w", err)
		}
		byDue := map[time.Time][]string{}
		for _, m := range held {
			due := ceilMillis(time.Unix(0, m.DueAt)).UTC()
			if m.RetryAt != nil && m.RetryAt.After(due) {
				due = m.RetryAt.UTC()
			}
			byDue[due] = append(byDue[due], m.ID)
		}
		for due, ids := range byDue {
			set := bson.D{{Key: fieldAvailableAt, Value: due}, {Key: fieldLeaseUntil, Value: nil}}
			res, err := p.msgs.UpdateMany(ctx, heldBy(g.token, ids), bson.D{{Key: "$set", Value: set}})
			if err != nil {
				return n, fmt.Errorf("mongodb: release: %w", err)
			}
			n += int(res.ModifiedCount)
		}
	}
	return n, nil
}

// RecordOutgoingFailures counts a failure on each message its token still
// holds, keeps the error text, ends the lease and makes it claimable again
// RetryAfter after the server's time (or at RetryAt when RetryAfter is not
// positive). It returns how many messages it changed. Failures sharing a
// token, an error text and a retry time (a transport outage) are one
// UpdateMany.
func (p *Persistence) RecordOutgoingFailures(ctx context.Context, failures []bus.OutgoingFailure) (int, error) {
	var now time.Time
	for _, f := range failures {
		if f.RetryAfter > 0 {
			t, err := p.serverTime(ctx)
			if err != nil {
				return 0, fmt.Errorf("mongodb: record failures: %w", err)
			}
			now = latest(t)
			break
		}
	}
	type key struct {
		token, err string
		retry      time.Time
	}
	groups := map[key][]string{}
	var order []key
	for _, f := range failures {
		if f.Token == "" {
			continue // never held by a claim
		}
		retry := f.RetryAt
		if f.RetryAfter > 0 {
			retry = now.Add(f.RetryAfter)
		}
		k := key{f.Token, f.Error, ceilMillis(retry).UTC()}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], f.ID)
	}
	n := 0
	for _, k := range order {
		res, err := p.msgs.UpdateMany(ctx, heldBy(k.token, groups[k]), bson.D{
			{Key: "$inc", Value: bson.D{{Key: fieldFailures, Value: int32(1)}}},
			{Key: "$set", Value: bson.D{
				{Key: fieldLastError, Value: k.err},
				{Key: fieldAvailableAt, Value: k.retry},
				{Key: fieldRetryAt, Value: k.retry},
				{Key: fieldLeaseUntil, Value: nil},
			}},
		})
		if err != nil {
			return n, fmt.Errorf("mongodb: record failures: %w", err)
		}
		n += int(res.ModifiedCount)
	}
	return n, nil
}

// tokenGroup is the IDs of the claims that name one token.
type tokenGroup struct {
	token string
	ids   []string
}

// byToken groups claims by token, in first-seen order. Claims without a
// token were never held and are dropped.
func byToken(claims []bus.Claim) []tokenGroup {
	var groups []tokenGroup
	at := map[string]int{}
	for _, c := range claims {
		if c.Token == "" {
			continue
		}
		i, ok := at[c.Token]
		if !ok {
			i = len(groups)
			at[c.Token] = i
			groups = append(groups, tokenGroup{token: c.Token})
		}
		groups[i].ids = append(groups[i].ids, c.ID)
	}
	return groups
}

// heldBy matches the documents with the given IDs that token holds.
func heldBy(token string, ids []string) bson.D {
	return bson.D{{Key: fieldToken, Value: token}, idIn(ids), leased()}
}
