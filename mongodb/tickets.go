package mongodb

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Claim tickets make a claim exclusive where a conditional update is not
// atomic. On FerretDB v1 an update reads the matching documents, applies
// the update in its own process, then writes each document back by _id
// alone: two claimers whose filter names the same token both match, and
// both "win". What it does atomically is refuse a second insert of an _id.
// So before leasing a candidate, a claimer inserts the ticket
// "<message ID>#<token found>#<step>"; one claimer wins it, the others get a
// duplicate key. The winner's conditional update changes the token, and
// only then does it delete its tickets: a claimer that inserts the same
// ticket later runs its update after that change, and its filter no longer
// matches. So tickets live only while a claim is in flight.
//
// A claimer that dies holding a ticket leaves it behind; once the ticket's
// until (its claimer's lease) has passed, the next claimer steps to the next
// step number, so the message is late by at most one lease. Setup removes
// tickets abandoned more than a day ago.
const (
	maxTicketTries    = 3 // per candidate and round: abandoned tickets to step over
	ticketDropTimeout = 10 * time.Second
	abandonedAfter    = 24 * time.Hour
)

// ticket is proof that one claimer holds a candidate found with a token.
// Until is that claimer's lease: past it, the ticket is abandoned.
type ticket struct {
	ID        string    `bson:"_id"`
	Msg       string    `bson:"msg"`
	Until     time.Time `bson:"until"`
	CreatedAt time.Time `bson:"created_at"`
}

// attempt is a candidate, the ticket step tried for it, and the abandoned
// tickets stepped over to reach it.
type attempt struct {
	c       candidate
	step    int
	stepped []string
}

func (a attempt) ticketID() string {
	return a.c.ID + "#" + a.c.Token + "#" + strconv.Itoa(a.step)
}

// takeTickets inserts a ticket per candidate, unordered, and returns the
// candidates whose insert succeeded, in candidate order; the tickets to
// delete once the claim is done: those won, and the abandoned ones stepped
// over to win them; and the IDs of the candidates other claimers hold. (An abandoned ticket is deleted only by the claimer that
// won the next step, after its update: deleted earlier, a third claimer could
// win it again while the next step's winner is still updating.)
func (p *Persistence) takeTickets(ctx context.Context, cands []candidate, now, until time.Time) (won []candidate, drop, held []string, err error) {
	pending := make([]attempt, len(cands))
	for i, c := range cands {
		pending[i] = attempt{c: c}
	}
	ours := make(map[string]bool, len(cands))
	for try := 0; try < maxTicketTries && len(pending) > 0; try++ {
		docs := make([]any, len(pending))
		for i, a := range pending {
			docs[i] = &ticket{ID: a.ticketID(), Msg: a.c.ID, Until: until, CreatedAt: now}
		}
		_, err := p.tickets.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
		failed, err := writeErrorIndexes(err)
		if err != nil {
			// Which inserts succeeded is unknown: the tickets won are
			// abandoned, and lapse with the lease.
			return nil, drop, nil, fmt.Errorf("claim tickets: %w", err)
		}
		var dups []attempt
		for i, a := range pending {
			switch dup, bad := failed[i]; {
			case !bad:
				ours[a.c.ID] = true
				drop = append(append(drop, a.stepped...), a.ticketID())
			case dup:
				dups = append(dups, a)
			}
		}
		var others []string
		if pending, others, err = p.abandonedTickets(ctx, dups, now); err != nil {
			return nil, drop, held, err
		}
		held = append(held, others...)
	}
	for _, c := range cands {
		if ours[c.ID] {
			won = append(won, c)
		}
	}
	return won, drop, held, nil
}

// writeErrorIndexes maps the index of every failed write of an unordered
// insert to whether it failed as a duplicate key. Write errors other than
// duplicates are kept (those candidates are simply not claimed); any other
// error is returned.
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

// abandonedTickets returns, for each attempt that lost its ticket insert,
// the next step when the ticket held is abandoned, and the IDs of the
// candidates whose ticket is in force: another claimer holds them. A
// missing ticket means its claimer finished meanwhile (the token changed,
// or the claim did not match). Both drop the candidate; the next round
// finds it again if it is claimable.
func (p *Persistence) abandonedTickets(ctx context.Context, dups []attempt, now time.Time) ([]attempt, []string, error) {
	if len(dups) == 0 {
		return nil, nil, nil
	}
	ids := make([]string, len(dups))
	for i, a := range dups {
		ids[i] = a.ticketID()
	}
	cur, err := p.tickets.Find(ctx, bson.D{idIn(ids)})
	if err != nil {
		return nil, nil, fmt.Errorf("read claim tickets: %w", err)
	}
	var held []ticket
	if err := cur.All(ctx, &held); err != nil {
		return nil, nil, fmt.Errorf("read claim tickets: %w", err)
	}
	lapsed := make(map[string]bool, len(held))
	for _, t := range held {
		lapsed[t.ID] = !t.Until.After(now)
	}
	var next []attempt
	var others []string
	for i, a := range dups {
		switch abandoned, found := lapsed[ids[i]]; {
		case abandoned:
			next = append(next, attempt{c: a.c, step: a.step + 1, stepped: append(a.stepped, ids[i])})
		case found:
			others = append(others, a.c.ID)
		}
	}
	return next, others, nil
}

// dropTickets deletes a claim round's tickets once its lease update is
// done, even if the claim's ctx ended. A ticket that cannot be deleted only
// delays its candidate until the ticket's lease passes (if the update did
// not change the candidate's token) or is never looked at again.
func (p *Persistence) dropTickets(ctx context.Context, ids []string) {
	if len(ids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ticketDropTimeout)
	defer cancel()
	if _, err := p.tickets.DeleteMany(ctx, bson.D{idIn(ids)}); err != nil {
		p.log.WarnContext(ctx, "mongodb: deleting claim tickets", "error", err, "tickets", len(ids))
	}
}

// removeAbandonedTickets deletes the tickets whose lease passed more than
// abandonedAfter ago (their claimers crashed).
func (p *Persistence) removeAbandonedTickets(ctx context.Context) error {
	now, err := p.serverTime(ctx)
	if err != nil {
		return err
	}
	filter := bson.D{{Key: "until", Value: bson.D{{Key: "$lt", Value: now.Add(-abandonedAfter)}}}}
	if _, err := p.tickets.DeleteMany(ctx, filter); err != nil {
		return fmt.Errorf("abandoned claim tickets in %s: %w", p.tickets.Name(), err)
	}
	return nil
}
