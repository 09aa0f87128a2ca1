package mongodb

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/postbus/bus"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

var _ bus.ScheduledBrowser = (*Persistence)(nil)

// The indexes of the operators' queries.
const (
	dueIndex     = "postbus_due_at"      // (due_at, _id)
	typeDueIndex = "postbus_type_due_at" // (message_type, due_at, _id)
)

// exactCountLimit is the backlog up to which StatsScheduled counts
// documents one by one; beyond it, it reports the collection's estimate.
const exactCountLimit = 100_000

func (p *Persistence) setupBrowse(ctx context.Context) error {
	return createIndexes(ctx, p.msgs, []mongo.IndexModel{
		{Keys: bson.D{{Key: fieldDueAt, Value: 1}, {Key: "_id", Value: 1}}, Options: options.Index().SetName(dueIndex)},
		{Keys: bson.D{{Key: fieldType, Value: 1}, {Key: fieldDueAt, Value: 1}, {Key: "_id", Value: 1}}, Options: options.Index().SetName(typeDueIndex)},
	})
}

// createIndexes creates the indexes one by one: FerretDB drops the
// connection on a createIndexes command of several indexes that exist.
// Creating an index that exists is a no-op.
func createIndexes(ctx context.Context, c *mongo.Collection, models []mongo.IndexModel) error {
	for _, m := range models {
		if _, err := c.Indexes().CreateOne(ctx, m); err != nil {
			return fmt.Errorf("indexes on %s: %w", c.Name(), err)
		}
	}
	return nil
}

// ListScheduled returns the documents q selects, earliest due first, then
// by ID, from the (due_at, _id) index, or the (message_type, due_at, _id)
// index when q names a type.
func (p *Persistence) ListScheduled(ctx context.Context, q bus.ScheduledQuery) ([]bus.OutgoingMessage, error) {
	filter := bson.D{}
	if q.Type != "" {
		filter = append(filter, bson.E{Key: fieldType, Value: q.Type})
	}
	due := bson.D{}
	if !q.DueAfter.IsZero() {
		due = append(due, bson.E{Key: "$gte", Value: q.DueAfter.UnixNano()})
	}
	if !q.DueBefore.IsZero() {
		due = append(due, bson.E{Key: "$lt", Value: q.DueBefore.UnixNano()})
	}
	if len(due) > 0 {
		filter = append(filter, bson.E{Key: fieldDueAt, Value: due})
	}
	if !q.AfterDue.IsZero() {
		after := q.AfterDue.UnixNano()
		filter = append(filter, bson.E{Key: "$or", Value: bson.A{
			bson.D{{Key: fieldDueAt, Value: bson.D{{Key: "$gt", Value: after}}}},
			bson.D{{Key: fieldDueAt, Value: after}, {Key: "_id", Value: bson.D{{Key: "$gt", Value: q.AfterID}}}},
		}})
	}
	limit := q.Limit
	if limit <= 0 {
		limit = 100
	}
	cur, err := p.msgs.Find(ctx, filter, options.Find().
		SetSort(bson.D{{Key: fieldDueAt, Value: 1}, {Key: "_id", Value: 1}}).SetLimit(int64(limit)))
	if err != nil {
		return nil, fmt.Errorf("mongodb: list scheduled: %w", err)
	}
	var docs []message
	if err := cur.All(ctx, &docs); err != nil {
		return nil, fmt.Errorf("mongodb: list scheduled: %w", err)
	}
	out := make([]bus.OutgoingMessage, len(docs))
	for i := range docs {
		out[i] = docs[i].browsed()
	}
	return out, nil
}

// browsed is the document as a listing shows it: the lease only while a
// claim holds it.
func (m *message) browsed() bus.OutgoingMessage {
	o := m.outgoing()
	if m.LeaseUntil == nil {
		o.Token = ""
	}
	return o
}

// GetScheduled returns the document with the ID.
func (p *Persistence) GetScheduled(ctx context.Context, id string) (bus.OutgoingMessage, bool, error) {
	var m message
	err := p.msgs.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&m)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return bus.OutgoingMessage{}, false, nil
	}
	if err != nil {
		return bus.OutgoingMessage{}, false, fmt.Errorf("mongodb: get scheduled %s: %w", id, err)
	}
	return m.browsed(), true, nil
}

// StatsScheduled summarises the backlog on the server's clock (the now
// argument is not used). The count is exact up to 100,000 documents, and
// the collection's estimate beyond (Estimated). Overdue documents are
// counted per transport on the claim index, at most bus.OverdueCap.
func (p *Persistence) StatsScheduled(ctx context.Context, _ time.Time) (bus.ScheduledStats, error) {
	var st bus.ScheduledStats
	now, err := p.serverTime(ctx)
	if err != nil {
		return st, fmt.Errorf("mongodb: scheduled stats: %w", err)
	}
	if st.Count, err = p.msgs.CountDocuments(ctx, bson.D{}, options.Count().SetLimit(exactCountLimit+1)); err != nil {
		return st, fmt.Errorf("mongodb: scheduled stats: %w", err)
	}
	if st.Count > exactCountLimit {
		est, err := p.msgs.EstimatedDocumentCount(ctx)
		if err != nil {
			return st, fmt.Errorf("mongodb: scheduled stats: %w", err)
		}
		st.Count, st.Estimated = max(est, st.Count), true
	}
	transports, err := p.transports(ctx)
	if err != nil {
		return st, fmt.Errorf("mongodb: scheduled stats: %w", err)
	}
	var oldest *message
	for _, tr := range append(transports, "") {
		filter := bson.D{{Key: fieldTransport, Value: tr}, {Key: fieldAvailableAt, Value: bson.D{{Key: "$lte", Value: now}}}}
		if tr == "" {
			// Documents of earlier versions may lack the field.
			filter[0].Value = bson.D{{Key: "$in", Value: bson.A{"", nil}}}
		}
		if st.Overdue < bus.OverdueCap {
			n, err := p.msgs.CountDocuments(ctx, filter, options.Count().SetLimit(bus.OverdueCap-st.Overdue))
			if err != nil {
				return st, fmt.Errorf("mongodb: scheduled stats: %w", err)
			}
			st.Overdue += n
		}
		var m message
		err := p.msgs.FindOne(ctx, filter, options.FindOne().SetSort(byAvailability())).Decode(&m)
		if errors.Is(err, mongo.ErrNoDocuments) {
			continue
		}
		if err != nil {
			return st, fmt.Errorf("mongodb: scheduled stats: %w", err)
		}
		if oldest == nil || m.AvailableAt.Before(oldest.AvailableAt) || m.AvailableAt.Equal(oldest.AvailableAt) && m.ID < oldest.ID {
			oldest = &m
		}
	}
	if oldest != nil {
		st.OldestOverdue = time.Unix(0, oldest.DueAt)
	}
	return st, nil
}

// transports returns the non-empty transport values, probing the claim
// index once per value.
func (p *Persistence) transports(ctx context.Context) ([]string, error) {
	var out []string
	last := ""
	for {
		var m struct {
			Transport string `bson:"transport"`
		}
		err := p.msgs.FindOne(ctx, bson.D{{Key: fieldTransport, Value: bson.D{{Key: "$gt", Value: last}}}}, options.FindOne().
			SetSort(bson.D{{Key: fieldTransport, Value: 1}}).SetProjection(bson.D{{Key: fieldTransport, Value: 1}, {Key: "_id", Value: 0}})).Decode(&m)
		if errors.Is(err, mongo.ErrNoDocuments) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		out, last = append(out, m.Transport), m.Transport
	}
}

// DueHistogram counts the documents due in each bucket: one count of a
// range of the (due_at, _id) index per bucket.
func (p *Persistence) DueHistogram(ctx context.Context, from time.Time, width time.Duration, n int) ([]int64, error) {
	if err := bus.CheckHistogram(width, n); err != nil {
		return nil, err
	}
	out := make([]int64, n)
	start := from.UnixNano()
	for i := range out {
		lo := start + int64(i)*int64(width)
		c, err := p.msgs.CountDocuments(ctx, bson.D{{Key: fieldDueAt, Value: bson.D{{Key: "$gte", Value: lo}, {Key: "$lt", Value: lo + int64(width)}}}},
			options.Count().SetHint(dueIndex))
		if err != nil {
			return nil, fmt.Errorf("mongodb: due histogram: %w", err)
		}
		out[i] = c
	}
	return out, nil
}

// SendNow makes a document that no claim holds due at the server's now,
// and reports whether it did.
func (p *Persistence) SendNow(ctx context.Context, id string) (bool, error) {
	now, err := p.serverTime(ctx)
	if err != nil {
		return false, fmt.Errorf("mongodb: send now %s: %w", id, err)
	}
	res, err := p.msgs.UpdateOne(ctx, bson.D{
		{Key: "_id", Value: id},
		{Key: "$or", Value: bson.A{
			bson.D{{Key: fieldLeaseUntil, Value: nil}},
			bson.D{{Key: fieldLeaseUntil, Value: bson.D{{Key: "$lte", Value: now}}}},
		}},
	}, bson.D{{Key: "$set", Value: bson.D{
		{Key: fieldDueAt, Value: now.UnixNano()}, {Key: fieldAvailableAt, Value: now}, {Key: fieldLeaseUntil, Value: nil},
		{Key: fieldRetryAt, Value: nil}, // sent now: no backoff to come back to
	}}})
	if err != nil {
		return false, fmt.Errorf("mongodb: send now %s: %w", id, err)
	}
	return res.ModifiedCount > 0, nil
}
