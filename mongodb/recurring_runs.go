package mongodb

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/postbus/bus"
)

var _ bus.RecurringRunGuard = (*Persistence)(nil)

// The recurring runs under way (bus.RecurringRunGuard, for
// RecurringPolicy's OverlapSkip) are documents of RecurringCollection +
// "_runs", one per run, _id "<len(name)>:<name>:<seq>" as the schedule
// records' writes (recurring.go): a run begins by inserting the schedule's
// next document, and the insert of an _id that exists is refused
// atomically on MongoDB and FerretDB alike, so of occurrences that begin
// at once one does. A run ends by marking its document ended.

// runDoc is one run of a schedule.
type runDoc struct {
	ID    string `bson:"_id"`
	Name  string `bson:"name"`
	Seq   int64  `bson:"seq"`
	RunID string `bson:"run_id"`
	Until int64  `bson:"until"` // Unix nanoseconds
	Ended bool   `bson:"ended"`
}

func (p *Persistence) runs() *mongo.Collection { return p.db.Collection(p.recurring.Name() + "_runs") }

// BeginRecurringRun begins the run id of the schedule name unless another
// occurrence's run is under way.
func (p *Persistence) BeginRecurringRun(ctx context.Context, name, id string, now, until time.Time) (bool, error) {
	var cur runDoc
	err := p.runs().FindOne(ctx, bson.D{{Key: "name", Value: name}}, options.FindOne().SetSort(bson.D{{Key: "seq", Value: -1}})).Decode(&cur)
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
	case err != nil:
		return false, fmt.Errorf("mongodb: begin the run of %s: %w", name, err)
	case cur.Ended || cur.Until <= now.UnixNano():
	case cur.RunID != id:
		return false, nil
	default: // this occurrence's run, delivered again: it goes on
		if _, err := p.runs().UpdateOne(ctx, bson.D{{Key: "_id", Value: cur.ID}}, bson.D{{Key: "$set", Value: bson.D{{Key: "until", Value: until.UnixNano()}}}}); err != nil {
			return false, fmt.Errorf("mongodb: begin the run of %s: %w", name, err)
		}
		return true, nil
	}
	next := runDoc{ID: recurringDocID(name, cur.Seq+1), Name: name, Seq: cur.Seq + 1, RunID: id, Until: until.UnixNano()}
	if _, err := p.runs().InsertOne(ctx, next); isDuplicateKeyErr(err) {
		return false, nil // another occurrence began first
	} else if err != nil {
		return false, fmt.Errorf("mongodb: begin the run of %s: %w", name, err)
	}
	// Earlier runs are of no use any more; removing them is best effort.
	_, _ = p.runs().DeleteMany(ctx, bson.D{{Key: "name", Value: name}, {Key: "seq", Value: bson.D{{Key: "$lt", Value: next.Seq}}}})
	return true, nil
}

// EndRecurringRun ends the run id of the schedule name.
func (p *Persistence) EndRecurringRun(ctx context.Context, name, id string) error {
	if _, err := p.runs().UpdateMany(ctx, bson.D{{Key: "name", Value: name}, {Key: "run_id", Value: id}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "ended", Value: true}}}}); err != nil {
		return fmt.Errorf("mongodb: end the run of %s: %w", name, err)
	}
	return nil
}
