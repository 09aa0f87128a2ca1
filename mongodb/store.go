package mongodb

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/postbus/bus"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// StoreOutgoing inserts the messages in one unordered insert. A message
// whose ID is already stored keeps its existing document: the duplicate-key
// errors that causes are expected and ignored, so a retried send cannot
// schedule twice.
func (p *Persistence) StoreOutgoing(ctx context.Context, msgs []bus.OutgoingMessage) error {
	if len(msgs) == 0 {
		return nil
	}
	now := time.Now()
	docs := make([]any, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		if m.ID == "" {
			return &ArgumentError{Method: "StoreOutgoing", Argument: fmt.Sprintf("msgs[%d].ID", i), Reason: "is empty"}
		}
		docs[i] = &message{
			ID: m.ID, Kind: int32(m.Kind), Envelope: m.Envelope,
			DueAt: m.DueAt.UnixNano(), AvailableAt: ceilMillis(m.DueAt),
			Failures: int32(m.Failures), LastError: m.LastError, CreatedAt: now,
		}
	}
	_, err := p.msgs.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
	if _, err = splitDuplicates(err); err != nil {
		return fmt.Errorf("mongodb: store: %w", err)
	}
	return nil
}

// splitDuplicates separates duplicate-key write errors from the rest. It
// returns the indexes of the writes refused as duplicates, and err unless
// every write error was a duplicate.
func splitDuplicates(err error) ([]int, error) {
	if err == nil {
		return nil, nil
	}
	var bwe mongo.BulkWriteException
	if !errors.As(err, &bwe) || bwe.WriteConcernError != nil {
		return nil, err
	}
	dups := make([]int, 0, len(bwe.WriteErrors))
	for _, we := range bwe.WriteErrors {
		if !isDuplicateKey(we.WriteError) {
			return nil, err
		}
		dups = append(dups, we.Index)
	}
	return dups, nil
}

func isDuplicateKey(we mongo.WriteError) bool {
	switch we.Code {
	case 11000, 11001, 12582:
		return true
	}
	return strings.Contains(we.Message, "E11000")
}

// DeleteOutgoing removes the messages and their claim tickets, each with one
// DeleteMany. Unknown IDs are ignored.
func (p *Persistence) DeleteOutgoing(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	if _, err := p.msgs.DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}}); err != nil {
		return fmt.Errorf("mongodb: delete: %w", err)
	}
	if err := p.deleteTickets(ctx, ids); err != nil {
		return fmt.Errorf("mongodb: delete: claim tickets: %w", err)
	}
	return nil
}

// CancelOutgoing removes a message and reports whether it was stored.
func (p *Persistence) CancelOutgoing(ctx context.Context, id string) (bool, error) {
	res, err := p.msgs.DeleteOne(ctx, bson.D{{Key: "_id", Value: id}})
	if err != nil {
		return false, fmt.Errorf("mongodb: cancel: %w", err)
	}
	if err := p.deleteTickets(ctx, []string{id}); err != nil {
		return false, fmt.Errorf("mongodb: cancel: claim tickets: %w", err)
	}
	return res.DeletedCount > 0, nil
}

func (p *Persistence) deleteTickets(ctx context.Context, ids []string) error {
	_, err := p.claims.DeleteMany(ctx, bson.D{{Key: fieldMsg, Value: bson.D{{Key: "$in", Value: ids}}}})
	return err
}

// ReleaseOutgoing makes leased messages claimable again at their due time
// (which has passed, so at once), without counting a failure. Without update
// pipelines (FerretDB has none) due_at cannot be copied into available_at on
// the server, so it reads the leased documents' due times first, then updates
// the documents sharing a due time with one UpdateMany each.
func (p *Persistence) ReleaseOutgoing(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	filter := bson.D{
		{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}},
		{Key: fieldLeaseUntil, Value: bson.D{{Key: "$ne", Value: nil}}},
	}
	cur, err := p.msgs.Find(ctx, filter, options.Find().SetProjection(bson.D{{Key: fieldDueAt, Value: 1}}))
	if err != nil {
		return fmt.Errorf("mongodb: release: %w", err)
	}
	var leased []message
	if err := cur.All(ctx, &leased); err != nil {
		return fmt.Errorf("mongodb: release: %w", err)
	}
	byDue := map[time.Time][]string{}
	for _, m := range leased {
		due := ceilMillis(time.Unix(0, m.DueAt)).UTC()
		byDue[due] = append(byDue[due], m.ID)
	}
	for due, ids := range byDue {
		set := bson.D{{Key: fieldAvailableAt, Value: due}, {Key: fieldLeaseUntil, Value: nil}}
		if err := p.updateIDs(ctx, ids, bson.D{{Key: "$set", Value: set}}); err != nil {
			return fmt.Errorf("mongodb: release: %w", err)
		}
	}
	return nil
}

// RecordOutgoingFailures counts a failure on each message, keeps its error
// text and makes it claimable again at RetryAt. Failures sharing an error
// text and retry time (a transport outage) are one UpdateMany. Unknown IDs
// are ignored.
func (p *Persistence) RecordOutgoingFailures(ctx context.Context, failures []bus.OutgoingFailure) error {
	type key struct {
		err   string
		retry time.Time
	}
	groups := map[key][]string{}
	var order []key
	for _, f := range failures {
		k := key{f.Error, ceilMillis(f.RetryAt).UTC()}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], f.ID)
	}
	for _, k := range order {
		update := bson.D{
			{Key: "$inc", Value: bson.D{{Key: fieldFailures, Value: int32(1)}}},
			{Key: "$set", Value: bson.D{
				{Key: fieldLastError, Value: k.err},
				{Key: fieldAvailableAt, Value: k.retry},
				{Key: fieldLeaseUntil, Value: nil},
			}},
		}
		if err := p.updateIDs(ctx, groups[k], update); err != nil {
			return fmt.Errorf("mongodb: record failures: %w", err)
		}
	}
	return nil
}

// updateIDs applies one update to the documents with the given IDs, as one
// update statement. A lone ID is filtered by equality, which FerretDB can look
// up by primary key.
func (p *Persistence) updateIDs(ctx context.Context, ids []string, update bson.D) error {
	if len(ids) == 1 {
		_, err := p.msgs.UpdateOne(ctx, bson.D{{Key: "_id", Value: ids[0]}}, update)
		return err
	}
	_, err := p.msgs.UpdateMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}}, update)
	return err
}

// NextDueOutgoing returns when the earliest message becomes claimable: the
// first entry of the (available_at, _id) index.
func (p *Persistence) NextDueOutgoing(ctx context.Context) (time.Time, bool, error) {
	var m struct {
		AvailableAt time.Time `bson:"available_at"`
	}
	err := p.msgs.FindOne(ctx, bson.D{}, options.FindOne().
		SetSort(byAvailability()).
		SetProjection(bson.D{{Key: fieldAvailableAt, Value: 1}})).Decode(&m)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("mongodb: next due: %w", err)
	}
	return m.AvailableAt, true, nil
}

// byAvailability is the claim order: earliest claimable first, then by ID
// (UUIDv7 IDs are time-ordered). It matches the index Setup creates.
func byAvailability() bson.D {
	return bson.D{{Key: fieldAvailableAt, Value: 1}, {Key: "_id", Value: 1}}
}
