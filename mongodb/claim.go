package mongodb

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/postbus/bus"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Claim tuning. A round is one find, one ticket insert and one bulk update;
// another round runs only when other claimers took some of the candidates.
const (
	maxClaimRounds  = 4
	maxTicketTries  = 3 // per candidate and round: stale tickets to step over
	claimLogMessage = "mongodb: claim stopped early; returning the messages already leased"
)

// ClaimDueOutgoing leases up to limit messages that are claimable on the
// server's clock, earliest first, until server time + lease. The now
// argument is ignored: the server's clock decides, read once per call from
// the hello command (see the package documentation, "Clock").
//
// Each round finds candidates, then takes a claim ticket per candidate by
// inserting a document whose _id names the message and its claim generation;
// the unique _id lets exactly one claimer win each generation, on MongoDB and
// on FerretDB alike. Winners then lease their documents in one bulk write.
func (p *Persistence) ClaimDueOutgoing(ctx context.Context, _ time.Time, limit int, lease time.Duration) ([]bus.OutgoingMessage, error) {
	if lease <= 0 {
		return nil, &ArgumentError{Method: "ClaimDueOutgoing", Argument: "lease", Reason: "must be positive"}
	}
	if limit <= 0 {
		return nil, nil
	}
	now, err := p.serverTime(ctx)
	if err != nil {
		return nil, fmt.Errorf("mongodb: claim: %w", err)
	}
	until := ceilMillis(now.Add(lease))
	var out []bus.OutgoingMessage
	for round := 0; round < maxClaimRounds && len(out) < limit; round++ {
		got, lost, err := p.claimRound(ctx, now, until, limit-len(out))
		out = append(out, got...)
		if err != nil {
			if len(out) == 0 {
				return nil, fmt.Errorf("mongodb: claim: %w", err)
			}
			// The leased messages are ours until the lease lapses: hand them
			// over rather than strand them; the next claim reports the error.
			p.log.WarnContext(ctx, claimLogMessage, "error", err, "claimed", len(out))
			return out, nil
		}
		if lost == 0 {
			break // every candidate was ours: no more are claimable now
		}
	}
	return out, nil
}

// claimRound claims up to n messages and reports how many candidates went
// to other claimers.
func (p *Persistence) claimRound(ctx context.Context, now, until time.Time, n int) ([]bus.OutgoingMessage, int, error) {
	cands, err := p.findClaimable(ctx, now, n)
	if err != nil || len(cands) == 0 {
		return nil, 0, err
	}
	won, err := p.takeTickets(ctx, cands, now, until)
	if err != nil {
		return nil, 0, err
	}
	leased, err := p.lease(ctx, won, until)
	if err != nil {
		return nil, 0, err
	}
	out := make([]bus.OutgoingMessage, len(leased))
	for i, c := range leased {
		c.m.Claims = c.gen + 1
		c.m.LeaseUntil = &until
		out[i] = c.m.outgoing()
	}
	return out, len(cands) - len(leased), nil
}

func (p *Persistence) findClaimable(ctx context.Context, now time.Time, n int) ([]*message, error) {
	filter := bson.D{{Key: fieldAvailableAt, Value: bson.D{{Key: "$lte", Value: now}}}}
	cur, err := p.msgs.Find(ctx, filter, options.Find().SetSort(byAvailability()).SetLimit(int64(n)))
	if err != nil {
		return nil, fmt.Errorf("find due: %w", err)
	}
	var cands []*message
	if err := cur.All(ctx, &cands); err != nil {
		return nil, fmt.Errorf("find due: %w", err)
	}
	return cands, nil
}

// candidate is a message document and the claim generation taken on it.
type candidate struct {
	m   *message
	gen int64
}

// ticket is a claim ticket: proof that one claimer won generation Gen of
// message Msg. Until is that claim's lease; a ticket past it is stale, and
// the next generation may be taken (its winner crashed before leasing).
type ticket struct {
	ID        string    `bson:"_id"`
	Msg       string    `bson:"msg"`
	Gen       int64     `bson:"gen"`
	Until     time.Time `bson:"until"`
	CreatedAt time.Time `bson:"created_at"`
}

func ticketID(msg string, gen int64) string { return msg + "#" + strconv.FormatInt(gen, 10) }

// takeTickets inserts a ticket per candidate, unordered, and returns the
// candidates whose insert succeeded, in candidate order. A duplicate means
// another claimer holds that generation; if its ticket is stale, the next
// generation is tried.
func (p *Persistence) takeTickets(ctx context.Context, cands []*message, now, until time.Time) ([]candidate, error) {
	pending := make([]candidate, len(cands))
	for i, m := range cands {
		pending[i] = candidate{m: m, gen: m.Claims}
	}
	wonIDs := make(map[string]int64, len(cands))
	for try := 0; try < maxTicketTries && len(pending) > 0; try++ {
		docs := make([]any, len(pending))
		for i, c := range pending {
			docs[i] = &ticket{ID: ticketID(c.m.ID, c.gen), Msg: c.m.ID, Gen: c.gen, Until: until, CreatedAt: now}
		}
		_, err := p.claims.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
		failed, err := writeErrorIndexes(err)
		if err != nil {
			return nil, fmt.Errorf("claim tickets: %w", err)
		}
		var dups []candidate
		for i, c := range pending {
			switch dup, bad := failed[i]; {
			case !bad:
				wonIDs[c.m.ID] = c.gen
			case dup:
				dups = append(dups, c)
			}
		}
		if pending, err = p.staleTickets(ctx, dups, now); err != nil {
			return nil, err
		}
	}
	won := make([]candidate, 0, len(wonIDs))
	for _, m := range cands {
		if gen, ok := wonIDs[m.ID]; ok {
			won = append(won, candidate{m: m, gen: gen})
		}
	}
	return won, nil
}

// writeErrorIndexes maps the index of every failed write of an unordered
// insert to whether it failed as a duplicate key. Write errors other than
// duplicates are dropped (those candidates are simply not claimed); any
// other error is returned.
func writeErrorIndexes(err error) (map[int]bool, error) {
	if err == nil {
		return nil, nil
	}
	var bwe mongo.BulkWriteException
	if !errors.As(err, &bwe) || bwe.WriteConcernError != nil {
		return nil, err
	}
	failed := make(map[int]bool, len(bwe.WriteErrors))
	for _, we := range bwe.WriteErrors {
		failed[we.Index] = isDuplicateKey(we.WriteError)
	}
	return failed, nil
}

// staleTickets returns, for each candidate that lost its ticket insert, the
// candidate with the next generation when the existing ticket is stale. A
// fresh ticket means another claimer holds it; a missing one means the
// message was deleted meanwhile. Both drop the candidate.
func (p *Persistence) staleTickets(ctx context.Context, dups []candidate, now time.Time) ([]candidate, error) {
	if len(dups) == 0 {
		return nil, nil
	}
	ids := make([]string, len(dups))
	for i, c := range dups {
		ids[i] = ticketID(c.m.ID, c.gen)
	}
	cur, err := p.claims.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}})
	if err != nil {
		return nil, fmt.Errorf("read claim tickets: %w", err)
	}
	var held []ticket
	if err := cur.All(ctx, &held); err != nil {
		return nil, fmt.Errorf("read claim tickets: %w", err)
	}
	stale := make(map[string]bool, len(held))
	for _, t := range held {
		if !t.Until.After(now) {
			stale[t.ID] = true
		}
	}
	var next []candidate
	for i, c := range dups {
		if stale[ids[i]] {
			next = append(next, candidate{m: c.m, gen: c.gen + 1})
		}
	}
	return next, nil
}

// lease marks the won candidates leased until until. The ticket already
// made each claim exclusive, so the filters are by _id only. It is one
// UpdateMany, with $inc moving the claims counter to the generation won plus
// one; candidates that stepped over stale tickets need a larger increment and
// get an UpdateMany of their own. (Not a bulk write of one update per
// document: FerretDB v1 keeps every statement's cursor open until an update
// command ends, and runs out of backend connections on large ones.) When
// fewer documents matched than were won, a message was deleted after it was
// read: confirmLeases drops it.
func (p *Persistence) lease(ctx context.Context, won []candidate, until time.Time) ([]candidate, error) {
	if len(won) == 0 {
		return nil, nil
	}
	byInc := map[int64][]string{}
	for _, c := range won {
		inc := c.gen + 1 - c.m.Claims
		byInc[inc] = append(byInc[inc], c.m.ID)
	}
	var matched int64
	for inc, ids := range byInc {
		res, err := p.msgs.UpdateMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}}, bson.D{
			{Key: "$set", Value: bson.D{{Key: fieldAvailableAt, Value: until}, {Key: fieldLeaseUntil, Value: until}}},
			{Key: "$inc", Value: bson.D{{Key: fieldClaims, Value: inc}}},
		})
		if err != nil {
			return nil, fmt.Errorf("lease: %w", err)
		}
		matched += res.MatchedCount
	}
	if matched == int64(len(won)) {
		return won, nil
	}
	return p.confirmLeases(ctx, won)
}

// confirmLeases keeps the candidates whose documents still exist, and
// removes the tickets of the messages deleted meanwhile.
func (p *Persistence) confirmLeases(ctx context.Context, won []candidate) ([]candidate, error) {
	ids := make([]string, len(won))
	for i, c := range won {
		ids[i] = c.m.ID
	}
	cur, err := p.msgs.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}},
		options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("confirm leases: %w", err)
	}
	var docs []struct {
		ID string `bson:"_id"`
	}
	if err := cur.All(ctx, &docs); err != nil {
		return nil, fmt.Errorf("confirm leases: %w", err)
	}
	exists := make(map[string]bool, len(docs))
	for _, d := range docs {
		exists[d.ID] = true
	}
	var kept []candidate
	var gone []string
	for _, c := range won {
		if exists[c.m.ID] {
			kept = append(kept, c)
		} else {
			gone = append(gone, c.m.ID)
		}
	}
	if len(gone) > 0 {
		if err := p.deleteTickets(ctx, gone); err != nil {
			p.log.WarnContext(ctx, "mongodb: removing claim tickets of deleted messages", "error", err)
		}
	}
	return kept, nil
}

// serverTime reads the server's clock from the hello command's localTime
// (isMaster on servers older than MongoDB 4.4.2). BSON dates hold
// milliseconds, so the value is at most a millisecond behind the server's
// real time: it can make a message late by that much, never early.
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
