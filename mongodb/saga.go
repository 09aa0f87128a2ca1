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

// sagasSuffix names the saga collection after the message collection.
const sagasSuffix = "_sagas"

// sagaIndex is the name of the index that finds an instance's latest
// write: (saga, correlation, seq descending).
const sagaIndex = "postbus_saga_correlation_seq"

// completedAfter is how long the mark of a completed (deleted) instance is
// kept before Setup removes it.
const completedAfter = 24 * time.Hour

// sagaDoc is one write of a saga instance. Every write inserts a new
// document, _id "<len(saga)>:<saga>:<seq>:<correlation>", with the next
// seq of its (saga, correlation): an insert of an existing _id is refused
// atomically, on MongoDB and on FerretDB alike, so of two writers that read
// the same latest write only one stores the next. The public version is
// seq - base, where base is the seq before the instance's first write.
// A delete writes a mark (Deleted) instead of an instance. Older writes
// are shrunk to their _id after each write, and removed by Setup a day
// later.
type sagaDoc struct {
	ID          string    `bson:"_id"`
	Saga        string    `bson:"saga"`
	Correlation string    `bson:"correlation"`
	Seq         int64     `bson:"seq"`
	Base        int64     `bson:"base"`
	Instance    string    `bson:"instance"`
	State       []byte    `bson:"state"`
	Timeouts    []string  `bson:"timeouts"`
	Deleted     bool      `bson:"deleted,omitempty"`
	WrittenAt   time.Time `bson:"written_at"`
}

func sagaDocID(saga, correlation string, seq int64) string {
	return strconv.Itoa(len(saga)) + ":" + saga + ":" + strconv.FormatInt(seq, 10) + ":" + correlation
}

func sagaKey(saga, correlation string) bson.D {
	return bson.D{{Key: "saga", Value: saga}, {Key: "correlation", Value: correlation}}
}

// setupSagas creates the saga index and removes the marks of instances
// completed more than completedAfter ago.
func (p *Persistence) setupSagas(ctx context.Context) error {
	_, err := p.sagas.Indexes().CreateOne(ctx, mongo.IndexModel{
		Keys:    bson.D{{Key: "saga", Value: 1}, {Key: "correlation", Value: 1}, {Key: "seq", Value: -1}},
		Options: options.Index().SetName(sagaIndex),
	})
	if err != nil {
		return fmt.Errorf("index on %s: %w", p.sagas.Name(), err)
	}
	// Marks of completed instances, and earlier writes (shrunk to their
	// _id), once a day old: a writer that read one of them that long ago
	// could store its seq again, but no handling lasts a day.
	filter := bson.D{{Key: "written_at", Value: bson.D{{Key: "$lt", Value: time.Now().Add(-completedAfter)}}},
		{Key: "$or", Value: bson.A{bson.D{{Key: "deleted", Value: true}}, bson.D{{Key: "state", Value: bson.D{{Key: "$exists", Value: false}}}}}}}
	if _, err := p.sagas.DeleteMany(ctx, filter); err != nil {
		return fmt.Errorf("completed sagas in %s: %w", p.sagas.Name(), err)
	}
	return nil
}

// SagaCollection returns the collection holding the saga instances.
func (p *Persistence) SagaCollection() *mongo.Collection { return p.sagas }

// latestSaga returns the latest write of the instance, and false when there
// is none.
func (p *Persistence) latestSaga(ctx context.Context, saga, correlation string) (sagaDoc, bool, error) {
	var d sagaDoc
	err := p.sagas.FindOne(ctx, sagaKey(saga, correlation), options.FindOne().SetSort(bson.D{{Key: "seq", Value: -1}})).Decode(&d)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return sagaDoc{}, false, nil
	}
	if err != nil {
		return sagaDoc{}, false, err
	}
	return d, true, nil
}

// LoadSaga returns the instance of saga with the correlation value, and
// false when there is none.
func (p *Persistence) LoadSaga(ctx context.Context, saga, correlation string) (bus.SagaInstance, bool, error) {
	d, ok, err := p.latestSaga(ctx, saga, correlation)
	if err != nil {
		return bus.SagaInstance{}, false, fmt.Errorf("mongodb: load saga %s %q: %w", saga, correlation, err)
	}
	if !ok || d.Deleted {
		return bus.SagaInstance{}, false, nil
	}
	return bus.SagaInstance{
		Saga: saga, Correlation: correlation, ID: d.Instance,
		State: d.State, Timeouts: d.Timeouts, Version: d.Seq - d.Base,
	}, true, nil
}

// InsertSaga stores inst at version 1. When an instance of its saga and
// correlation exists, or a concurrent insert wins, it stores nothing and
// returns an error wrapping bus.ErrSagaConflict.
func (p *Persistence) InsertSaga(ctx context.Context, inst bus.SagaInstance) error {
	d, ok, err := p.latestSaga(ctx, inst.Saga, inst.Correlation)
	if err != nil {
		return fmt.Errorf("mongodb: insert saga %s %q: %w", inst.Saga, inst.Correlation, err)
	}
	if ok && !d.Deleted {
		return fmt.Errorf("mongodb: insert saga %s %q: %w", inst.Saga, inst.Correlation, bus.ErrSagaConflict)
	}
	next := sagaDoc{Saga: inst.Saga, Correlation: inst.Correlation, Seq: d.Seq + 1, Base: d.Seq,
		Instance: inst.ID, State: inst.State, Timeouts: inst.Timeouts}
	if err := p.writeSaga(ctx, next); err != nil {
		return fmt.Errorf("mongodb: insert saga %s %q: %w", inst.Saga, inst.Correlation, err)
	}
	return nil
}

// UpdateSaga replaces the state and timeouts of the instance stored at
// inst.Version and stores version inst.Version+1. Another stored version,
// another instance (a non-empty inst.ID that differs), or no instance is
// an error wrapping bus.ErrSagaConflict.
func (p *Persistence) UpdateSaga(ctx context.Context, inst bus.SagaInstance) error {
	d, err := p.currentSaga(ctx, inst.Saga, inst.Correlation, inst.ID, inst.Version)
	if err != nil {
		return fmt.Errorf("mongodb: update saga %s %q at version %d: %w", inst.Saga, inst.Correlation, inst.Version, err)
	}
	d.Seq++
	d.State, d.Timeouts = inst.State, inst.Timeouts
	if err := p.writeSaga(ctx, d); err != nil {
		return fmt.Errorf("mongodb: update saga %s %q at version %d: %w", inst.Saga, inst.Correlation, inst.Version, err)
	}
	return nil
}

// DeleteSaga removes the instance if its stored version is version;
// otherwise it returns an error wrapping bus.ErrSagaConflict. It writes a
// mark of completion, which Setup removes a day later.
func (p *Persistence) DeleteSaga(ctx context.Context, saga, correlation string, version int64) error {
	d, err := p.currentSaga(ctx, saga, correlation, "", version)
	if err != nil {
		return fmt.Errorf("mongodb: delete saga %s %q at version %d: %w", saga, correlation, version, err)
	}
	mark := sagaDoc{Saga: saga, Correlation: correlation, Seq: d.Seq + 1, Base: d.Seq + 1, Instance: d.Instance, Deleted: true}
	if err := p.writeSaga(ctx, mark); err != nil {
		return fmt.Errorf("mongodb: delete saga %s %q at version %d: %w", saga, correlation, version, err)
	}
	return nil
}

// currentSaga returns the latest write of the instance when it is at
// version (and, with a non-empty id, is that instance), and otherwise
// bus.ErrSagaConflict.
func (p *Persistence) currentSaga(ctx context.Context, saga, correlation, id string, version int64) (sagaDoc, error) {
	d, ok, err := p.latestSaga(ctx, saga, correlation)
	switch {
	case err != nil:
		return sagaDoc{}, err
	case !ok || d.Deleted || d.Seq-d.Base != version || (id != "" && id != d.Instance):
		return sagaDoc{}, bus.ErrSagaConflict
	}
	return d, nil
}

// writeSaga inserts d as the next write of its instance: a duplicate key
// means another writer stored that write first (bus.ErrSagaConflict).
// Then it removes the instance's older writes; a failure there is only
// logged, as the next write removes them too.
func (p *Persistence) writeSaga(ctx context.Context, d sagaDoc) error {
	d.ID = sagaDocID(d.Saga, d.Correlation, d.Seq)
	d.WrittenAt = time.Now()
	if _, err := p.sagas.InsertOne(ctx, &d); err != nil {
		var we mongo.WriteException
		if errors.As(err, &we) && we.WriteConcernError == nil && len(we.WriteErrors) > 0 && isDuplicateKey(we.WriteErrors[0]) {
			return bus.ErrSagaConflict
		}
		return err
	}
	if d.Seq > 1 {
		// Older writes keep their _id (so a writer that read one of them
		// cannot store its seq again) but lose their state; Setup removes
		// them once they are a day old.
		older := append(sagaKey(d.Saga, d.Correlation),
			bson.E{Key: "seq", Value: bson.D{{Key: "$lt", Value: d.Seq}}}, bson.E{Key: "state", Value: bson.D{{Key: "$exists", Value: true}}})
		shrink := bson.D{{Key: "$unset", Value: bson.D{{Key: "state", Value: ""}, {Key: "timeouts", Value: ""}}}}
		if _, err := p.sagas.UpdateMany(ctx, older, shrink); err != nil {
			p.log.Warn("mongodb: shrinking earlier saga writes failed; the next write retries",
				"saga", d.Saga, "correlation", d.Correlation, "error", err)
		}
	}
	return nil
}
