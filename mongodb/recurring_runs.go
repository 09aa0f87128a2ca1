package mongodb

import (
	"context"
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
// "_runs": _id the schedule's name, run_id the occurrence's message ID,
// until (Unix nanoseconds) when the run counts as finished.

func (p *Persistence) runs() *mongo.Collection { return p.db.Collection(p.recurring.Name() + "_runs") }

// BeginRecurringRun begins the run id of the schedule name unless another
// occurrence's run is under way, in one upsert: it matches the schedule's
// document only when the run is id's or timed out, and inserts one when
// there is none; when another run holds the document, the insert the
// upsert falls back to finds its _id taken.
func (p *Persistence) BeginRecurringRun(ctx context.Context, name, id string, now, until time.Time) (bool, error) {
	filter := bson.D{{Key: "_id", Value: name}, {Key: "$or", Value: bson.A{
		bson.D{{Key: "run_id", Value: id}},
		bson.D{{Key: "until", Value: bson.D{{Key: "$lte", Value: now.UnixNano()}}}},
	}}}
	update := bson.D{{Key: "$set", Value: bson.D{{Key: "run_id", Value: id}, {Key: "until", Value: until.UnixNano()}}}}
	_, err := p.runs().UpdateOne(ctx, filter, update, options.UpdateOne().SetUpsert(true))
	switch {
	case isDuplicateKeyErr(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("mongodb: begin the run of %s: %w", name, err)
	}
	return true, nil
}

// EndRecurringRun ends the run id of the schedule name.
func (p *Persistence) EndRecurringRun(ctx context.Context, name, id string) error {
	if _, err := p.runs().DeleteOne(ctx, bson.D{{Key: "_id", Value: name}, {Key: "run_id", Value: id}}); err != nil {
		return fmt.Errorf("mongodb: end the run of %s: %w", name, err)
	}
	return nil
}
