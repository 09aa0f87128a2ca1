package mongodb

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/postbus/bus"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

var _ bus.FailedStore = (*Persistence)(nil)

// failedSuffix names the default failed-message collection.
const failedSuffix = "_failed"

// Failed-message fields and indexes.
const (
	fieldGroup       = "failure_group"
	fieldLastFailed  = "last_failed"
	failedLastIndex  = "postbus_last_failed"   // (last_failed, _id)
	failedGroupIndex = "postbus_failure_group" // (failure_group, last_failed, _id)
	maxMergeAttempts = 20
)

// failedDoc is a failed message as stored. Times are exact Unix
// nanoseconds, as due_at is.
type failedDoc struct {
	ID          string `bson:"_id"`
	Type        string `bson:"message_type"`
	Endpoint    string `bson:"endpoint"`
	Queue       string `bson:"queue"`
	Kind        string `bson:"kind"`
	Reason      string `bson:"reason"`
	Group       string `bson:"failure_group"`
	Attempts    int32  `bson:"attempts"`
	Failures    int32  `bson:"failures"`
	FirstFailed int64  `bson:"first_failed"`
	LastFailed  int64  `bson:"last_failed"`
	Envelope    []byte `bson:"envelope"`
}

func toFailedDoc(m bus.FailedMessage) failedDoc {
	last := m.LastFailed.UnixNano()
	first := m.FirstFailed.UnixNano()
	if m.FirstFailed.IsZero() || first > last {
		first = last
	}
	env := m.Envelope
	if env == nil {
		env = []byte{}
	}
	return failedDoc{
		ID: m.ID, Type: m.Type, Endpoint: m.Endpoint, Queue: m.Queue, Kind: m.Kind, Reason: m.Reason, Group: m.Group,
		Attempts: int32(m.Attempts), Failures: int32(max(m.Failures, 1)), FirstFailed: first, LastFailed: last, Envelope: env,
	}
}

func (d *failedDoc) message() bus.FailedMessage {
	return bus.FailedMessage{
		ID: d.ID, Type: d.Type, Endpoint: d.Endpoint, Queue: d.Queue, Kind: d.Kind, Reason: d.Reason, Group: d.Group,
		Attempts: int(d.Attempts), Failures: int(d.Failures),
		FirstFailed: time.Unix(0, d.FirstFailed).UTC(), LastFailed: time.Unix(0, d.LastFailed).UTC(), Envelope: d.Envelope,
	}
}

func (p *Persistence) setupFailed(ctx context.Context) error {
	_, err := p.failed.Indexes().CreateMany(ctx, []mongo.IndexModel{
		{Keys: bson.D{{Key: fieldLastFailed, Value: 1}, {Key: "_id", Value: 1}}, Options: options.Index().SetName(failedLastIndex)},
		{Keys: bson.D{{Key: fieldGroup, Value: 1}, {Key: fieldLastFailed, Value: 1}, {Key: "_id", Value: 1}}, Options: options.Index().SetName(failedGroupIndex)},
	})
	if err != nil {
		return fmt.Errorf("indexes on %s: %w", p.failed.Name(), err)
	}
	return nil
}

// StoreFailed inserts the messages in one unordered insert; a message
// whose ID is already stored is merged into the stored document (see
// bus.FailedStore) with a compare-and-swap replace, retried if another
// writer changed it in between.
func (p *Persistence) StoreFailed(ctx context.Context, msgs []bus.FailedMessage) error {
	if len(msgs) == 0 {
		return ctx.Err()
	}
	docs := make([]any, len(msgs))
	for i, m := range msgs {
		if m.ID == "" {
			return &ArgumentError{Method: "StoreFailed", Argument: fmt.Sprintf("msgs[%d].ID", i), Reason: "is empty"}
		}
		d := toFailedDoc(m)
		docs[i] = &d
	}
	_, err := p.failed.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
	var dups []int
	if err != nil {
		var bwe mongo.BulkWriteException
		if !errors.As(err, &bwe) || bwe.WriteConcernError != nil {
			return fmt.Errorf("mongodb: store failed messages: %w", err)
		}
		for _, we := range bwe.WriteErrors {
			if !isDuplicateKey(we.WriteError) {
				return fmt.Errorf("mongodb: store failed messages: %w", err)
			}
			dups = append(dups, we.Index)
		}
	}
	slices.Sort(dups)
	for _, i := range dups {
		if err := p.mergeFailed(ctx, *docs[i].(*failedDoc)); err != nil {
			return fmt.Errorf("mongodb: store failed message %s: %w", msgs[i].ID, err)
		}
	}
	return nil
}

// mergeFailed applies a new failure to the stored document.
func (p *Persistence) mergeFailed(ctx context.Context, d failedDoc) error {
	for range maxMergeAttempts {
		var old failedDoc
		err := p.failed.FindOne(ctx, bson.D{{Key: "_id", Value: d.ID}}).Decode(&old)
		if errors.Is(err, mongo.ErrNoDocuments) {
			// Deleted in between: store it afresh.
			if _, err := p.failed.InsertOne(ctx, &d); err == nil {
				return nil
			} else if !isDuplicateKeyErr(err) {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		if old.LastFailed == d.LastFailed {
			return nil // the same failure delivered again
		}
		merged := old
		if d.LastFailed > old.LastFailed {
			merged = d
		}
		merged.Failures = old.Failures + 1
		merged.FirstFailed = min(old.FirstFailed, d.FirstFailed)
		merged.LastFailed = max(old.LastFailed, d.LastFailed)
		res, err := p.failed.ReplaceOne(ctx, bson.D{
			{Key: "_id", Value: d.ID}, {Key: fieldLastFailed, Value: old.LastFailed}, {Key: "failures", Value: old.Failures},
		}, &merged)
		if err != nil {
			return err
		}
		if res.MatchedCount > 0 {
			return nil
		}
	}
	return errors.New("changed concurrently too often")
}

func isDuplicateKeyErr(err error) bool {
	var we mongo.WriteException
	if errors.As(err, &we) {
		for _, e := range we.WriteErrors {
			if isDuplicateKey(e) {
				return true
			}
		}
	}
	return false
}

// failedFilter is q's selection; paging only when page is set.
func failedFilter(q bus.FailedQuery, page bool) bson.D {
	f := bson.D{}
	for _, c := range []struct{ key, v string }{{fieldGroup, q.Group}, {"message_type", q.Type}, {"endpoint", q.Endpoint}, {"_id", q.Search}} {
		if c.v != "" {
			f = append(f, bson.E{Key: c.key, Value: c.v})
		}
	}
	if page && !q.BeforeFailed.IsZero() {
		before := q.BeforeFailed.UnixNano()
		f = append(f, bson.E{Key: "$or", Value: bson.A{
			bson.D{{Key: fieldLastFailed, Value: bson.D{{Key: "$lt", Value: before}}}},
			bson.D{{Key: fieldLastFailed, Value: before}, {Key: "_id", Value: bson.D{{Key: "$lt", Value: q.BeforeID}}}},
		}})
	}
	return f
}

// ListFailed returns the messages q selects, most recent failure first,
// then by ID descending.
func (p *Persistence) ListFailed(ctx context.Context, q bus.FailedQuery) ([]bus.FailedMessage, error) {
	limit := q.Limit
	if limit <= 0 {
		limit = 100
	}
	cur, err := p.failed.Find(ctx, failedFilter(q, true), options.Find().
		SetSort(bson.D{{Key: fieldLastFailed, Value: -1}, {Key: "_id", Value: -1}}).SetLimit(int64(limit)))
	if err != nil {
		return nil, fmt.Errorf("mongodb: list failed: %w", err)
	}
	var docs []failedDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, fmt.Errorf("mongodb: list failed: %w", err)
	}
	out := make([]bus.FailedMessage, len(docs))
	for i := range docs {
		out[i] = docs[i].message()
	}
	return out, nil
}

// CountFailed counts the messages q selects.
func (p *Persistence) CountFailed(ctx context.Context, q bus.FailedQuery) (int64, error) {
	n, err := p.failed.CountDocuments(ctx, failedFilter(q, false))
	if err != nil {
		return 0, fmt.Errorf("mongodb: count failed: %w", err)
	}
	return n, nil
}

// GetFailed returns the message with the ID.
func (p *Persistence) GetFailed(ctx context.Context, id string) (bus.FailedMessage, bool, error) {
	var d failedDoc
	err := p.failed.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&d)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return bus.FailedMessage{}, false, nil
	}
	if err != nil {
		return bus.FailedMessage{}, false, fmt.Errorf("mongodb: get failed %s: %w", id, err)
	}
	return d.message(), true, nil
}

// FailedGroups returns up to limit groups (0: 100), largest first: one
// aggregation over the collection, then the latest failure of each group
// for its type, endpoint and reason. A server without the $min and $max
// accumulators (FerretDB) gets the groups by size, ties by group rather than
// by latest failure, and their first and last failures from the group
// index.
func (p *Persistence) FailedGroups(ctx context.Context, limit int) ([]bus.FailedGroup, error) {
	if limit <= 0 {
		limit = 100
	}
	rows, full, err := p.aggregateGroups(ctx, limit, true)
	var ce mongo.CommandError
	if errors.As(err, &ce) && (ce.Code == 238 || ce.Name == "NotImplemented") {
		rows, full, err = p.aggregateGroups(ctx, limit, false)
	}
	if err != nil {
		return nil, fmt.Errorf("mongodb: failed groups: %w", err)
	}
	out := make([]bus.FailedGroup, 0, len(rows))
	for _, r := range rows {
		latest, err := p.edgeOfGroup(ctx, r.Group, fieldLastFailed, -1)
		if err != nil {
			return nil, fmt.Errorf("mongodb: failed groups: %w", err)
		}
		if !full {
			earliest, err := p.edgeOfGroup(ctx, r.Group, "first_failed", 1)
			if err != nil {
				return nil, fmt.Errorf("mongodb: failed groups: %w", err)
			}
			r.First, r.Last = earliest.FirstFailed, latest.LastFailed
		}
		out = append(out, bus.FailedGroup{
			Group: r.Group, Type: latest.Type, Endpoint: latest.Endpoint, Reason: bus.NormalizeReason(latest.Reason), Count: r.N,
			FirstFailed: time.Unix(0, r.First).UTC(), LastFailed: time.Unix(0, r.Last).UTC(),
		})
	}
	return out, nil
}

type groupRow struct {
	Group string `bson:"_id"`
	N     int64  `bson:"n"`
	First int64  `bson:"first"`
	Last  int64  `bson:"last"`
}

// aggregateGroups counts the largest groups; with full, their first and
// last failure times too, and ties ordered by the latest failure.
func (p *Persistence) aggregateGroups(ctx context.Context, limit int, full bool) ([]groupRow, bool, error) {
	group := bson.D{{Key: "_id", Value: "$" + fieldGroup}, {Key: "n", Value: bson.D{{Key: "$sum", Value: 1}}}}
	sort := bson.D{{Key: "n", Value: -1}, {Key: "_id", Value: 1}}
	if full {
		group = append(group,
			bson.E{Key: "first", Value: bson.D{{Key: "$min", Value: "$first_failed"}}},
			bson.E{Key: "last", Value: bson.D{{Key: "$max", Value: "$" + fieldLastFailed}}})
		sort = bson.D{{Key: "n", Value: -1}, {Key: "last", Value: -1}, {Key: "_id", Value: 1}}
	}
	cur, err := p.failed.Aggregate(ctx, mongo.Pipeline{
		{{Key: "$group", Value: group}}, {{Key: "$sort", Value: sort}}, {{Key: "$limit", Value: limit}},
	})
	if err != nil {
		return nil, full, err
	}
	var rows []groupRow
	err = cur.All(ctx, &rows)
	return rows, full, err
}

// edgeOfGroup returns the message of group first in the order of field
// (1: ascending, -1: descending), then by ID.
func (p *Persistence) edgeOfGroup(ctx context.Context, group, field string, order int) (failedDoc, error) {
	var d failedDoc
	err := p.failed.FindOne(ctx, bson.D{{Key: fieldGroup, Value: group}}, options.FindOne().
		SetSort(bson.D{{Key: field, Value: order}, {Key: "_id", Value: order}}).
		SetProjection(bson.D{{Key: "envelope", Value: 0}})).Decode(&d)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return d, nil
	}
	return d, err
}

// DeleteFailed deletes the messages with the IDs and returns how many it
// deleted.
func (p *Persistence) DeleteFailed(ctx context.Context, ids []string) (int, error) {
	if len(ids) == 0 {
		return 0, ctx.Err()
	}
	uniq := slices.Clone(ids)
	slices.Sort(uniq)
	uniq = slices.Compact(uniq)
	res, err := p.failed.DeleteMany(ctx, bson.D{idIn(uniq)})
	if err != nil {
		return 0, fmt.Errorf("mongodb: delete failed: %w", err)
	}
	return int(res.DeletedCount), nil
}
