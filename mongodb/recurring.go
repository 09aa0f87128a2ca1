package mongodb

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/postbus/bus"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

var _ bus.RecurringStore = (*Persistence)(nil)

// recurringSuffix names the schedule collection after the message collection.
const recurringSuffix = "_recurring"

// recurringIndex finds a schedule's latest write: (name, seq descending).
const recurringIndex = "postbus_recurring_name_seq"

// noTime stands for the zero time.Time in a record's times, which are
// exact Unix nanoseconds (BSON dates hold milliseconds only): the zero
// time has no Unix nanoseconds, and 0 is the epoch.
const noTime = math.MinInt64

func toNanos(t time.Time) int64 {
	if t.IsZero() {
		return noTime
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time {
	if n == noTime {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// recurringDoc is one write of a schedule's record. Like a saga instance
// (see saga.go), every change inserts a new document, _id
// "<len(name)>:<name>:<seq>", with the next seq: the insert of an existing
// _id is refused atomically on MongoDB and FerretDB alike, so of two
// writers that read the same latest write only one stores the next. That
// insert is the compare-and-set of every change. A deletion writes a mark
// (Deleted). Pending is the rows the advance that wrote this document
// still has to store and cancel, until Done.
type recurringDoc struct {
	ID          string  `bson:"_id"`
	Name        string  `bson:"name"`
	Seq         int64   `bson:"seq"`
	Fingerprint string  `bson:"fingerprint"`
	Schedule    string  `bson:"schedule"`
	Generation  int64   `bson:"generation"`
	Paused      bool    `bson:"paused"`
	Last        int64   `bson:"last"`
	Ticks       []int64 `bson:"ticks"`
	// Alive is the liveness mark (bus.RecurringRecord.Alive) in Unix
	// nanoseconds; absent (0) before the first step, and in the writes of
	// versions before it, which therefore need no migration.
	Alive     int64           `bson:"alive,omitempty"`
	Deleted   bool            `bson:"deleted,omitempty"`
	Pending   *pendingAdvance `bson:"pending,omitempty"`
	Done      bool            `bson:"done,omitempty"`
	WrittenAt time.Time       `bson:"written_at"`
}

func recurringDocID(name string, seq int64) string {
	return strconv.Itoa(len(name)) + ":" + name + ":" + strconv.FormatInt(seq, 10)
}

func (d *recurringDoc) record() bus.RecurringRecord {
	r := bus.RecurringRecord{
		Name: d.Name, Fingerprint: d.Fingerprint, Schedule: d.Schedule, Generation: d.Generation,
		Paused: d.Paused, Last: fromNanos(d.Last),
	}
	for _, n := range d.Ticks {
		r.Ticks = append(r.Ticks, fromNanos(n))
	}
	if d.Alive != 0 {
		r.Alive = time.Unix(0, d.Alive).UTC()
	}
	return r
}

// next returns the document of the next write: this one's state, with
// no pending advance.
func (d recurringDoc) next() recurringDoc {
	d.Seq++
	d.Pending, d.Done = nil, false
	return d
}

// errMoved says another writer stored the next write first.
var errMoved = errors.New("mongodb: recurring record moved on")

// RecurringCollection returns the collection holding the schedule records.
func (p *Persistence) RecurringCollection() *mongo.Collection { return p.recurring }

// setupRecurring creates the record index and removes the writes that
// are no schedule's latest once they are a day old (a writer that read one
// of them that long ago could store its seq again, but no step lasts a
// day). A deleted schedule's mark is its latest write and stays: it keeps
// the name's generation and seq.
func (p *Persistence) setupRecurring(ctx context.Context) error {
	_, err := p.recurring.Indexes().CreateOne(ctx, mongo.IndexModel{
		Keys:    bson.D{{Key: "name", Value: 1}, {Key: "seq", Value: -1}},
		Options: options.Index().SetName(recurringIndex),
	})
	if err != nil {
		return fmt.Errorf("index on %s: %w", p.recurring.Name(), err)
	}
	docs, err := p.recurringWrites(ctx, bson.D{{Key: "written_at", Value: bson.D{{Key: "$lt", Value: time.Now().Add(-completedAfter)}}}})
	if err != nil {
		return fmt.Errorf("old writes in %s: %w", p.recurring.Name(), err)
	}
	var old []string
	for _, d := range docs {
		latest, ok, err := p.latestRecurring(ctx, d.Name)
		if err != nil {
			return fmt.Errorf("old writes in %s: %w", p.recurring.Name(), err)
		}
		if ok && latest.Seq != d.Seq {
			old = append(old, d.ID)
		}
	}
	if len(old) > 0 {
		if _, err := p.recurring.DeleteMany(ctx, bson.D{idIn(old)}); err != nil {
			return fmt.Errorf("old writes in %s: %w", p.recurring.Name(), err)
		}
	}
	return nil
}

// recurringWrites returns the writes filter matches, by name and seq.
func (p *Persistence) recurringWrites(ctx context.Context, filter bson.D) ([]recurringDoc, error) {
	cur, err := p.recurring.Find(ctx, filter, options.Find().SetSort(bson.D{{Key: "name", Value: 1}, {Key: "seq", Value: -1}}))
	if err != nil {
		return nil, err
	}
	var docs []recurringDoc
	err = cur.All(ctx, &docs)
	return docs, err
}

// latestRecurring returns the latest write of the schedule name, and false
// when there is none.
func (p *Persistence) latestRecurring(ctx context.Context, name string) (recurringDoc, bool, error) {
	var d recurringDoc
	err := p.recurring.FindOne(ctx, bson.D{{Key: "name", Value: name}}, options.FindOne().SetSort(bson.D{{Key: "seq", Value: -1}})).Decode(&d)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return recurringDoc{}, false, nil
	}
	if err != nil {
		return recurringDoc{}, false, err
	}
	return d, true, nil
}

// writeRecurring inserts d as the next write of its schedule, or returns
// errMoved when another writer stored that write first.
func (p *Persistence) writeRecurring(ctx context.Context, d *recurringDoc) error {
	d.ID = recurringDocID(d.Name, d.Seq)
	d.WrittenAt = time.Now()
	if _, err := p.recurring.InsertOne(ctx, d); err != nil {
		if isDuplicateWrite(err) {
			return errMoved
		}
		return err
	}
	return nil
}

// currentRecurring returns the schedule's latest write, after finishing
// the advance it left pending (see finishAdvance), and false when there is
// none or it is a deletion mark; young says the pending advance was too
// recent to finish for its writer.
func (p *Persistence) currentRecurring(ctx context.Context, name string) (d recurringDoc, ok, young bool, err error) {
	d, ok, err = p.latestRecurring(ctx, name)
	if err != nil || !ok {
		return d, false, false, err
	}
	if d.Pending != nil && !d.Done {
		if time.Since(d.WrittenAt) < pendingGrace {
			young = true
		} else if err := p.finishAdvance(ctx, &d); err != nil {
			return d, false, false, err
		}
	}
	return d, !d.Deleted, young, nil
}

// isDuplicateWrite reports whether err is a duplicate-key write error.
func isDuplicateWrite(err error) bool {
	var we mongo.WriteException
	return errors.As(err, &we) && we.WriteConcernError == nil && len(we.WriteErrors) > 0 && isDuplicateKey(we.WriteErrors[0])
}
