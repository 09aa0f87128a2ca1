package mongodb

import (
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"time"

	"github.com/postbus/bus"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

var _ bus.RecurringRuntimeStore = (*Persistence)(nil)

// recurringSuffix names the schedule collection after the message collection.
const recurringSuffix = "_recurring"

// recurringIndex finds a schedule's latest write: (name, seq descending).
const recurringIndex = "postbus_recurring_name_seq"

// recurringDueIndex finds the writes that fall due: (due, name).
const recurringDueIndex = "postbus_recurring_due_name"

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
// (Deleted), with no spec and no due. Pending is the rows the advance that
// wrote this document still has to store and cancel, until Done.
//
// Runtime schedules: every write carries the record's spec and due. A
// claim (ClaimDueRecurring) finds the writes due through the (due, name)
// index and claims one by inserting the next write, due a lease ahead;
// since a schedule's earlier writes stay for a day (see trimRecurring),
// only the latest write counts, and the writer of the next one
// removes the due of the write it was made from (a claim that finds an
// earlier write with a due removes it too). The index is not partial:
// FerretDB v1 refuses partialFilterExpression. Writes without a due sit
// at its null end, which a claim's $lte on a number never reads.
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
	Alive int64 `bson:"alive,omitempty"`
	// Spec is a runtime schedule's definition (bus.RecurringRecord.Spec),
	// null for a declared one; Due when its next step is due, Unix
	// nanoseconds, absent for never; Runs and Skipped as in
	// bus.RecurringRecord. Writes of versions before them read as a
	// declared schedule never due, with no runs: no migration.
	Spec      []byte          `bson:"spec"`
	Due       *int64          `bson:"due,omitempty"`
	Runs      int64           `bson:"runs,omitempty"`
	Skipped   int64           `bson:"skipped,omitempty"`
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
	r.Spec, r.Runs, r.Skipped = d.Spec, d.Runs, d.Skipped
	if d.Due != nil {
		r.Due = time.Unix(0, *d.Due).UTC()
	}
	return r
}

// dueNanos returns t as a write's due: nil (never) for the zero time.
func dueNanos(t time.Time) *int64 {
	if t.IsZero() {
		return nil
	}
	n := t.UnixNano()
	return &n
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
	err := createIndexes(ctx, p.recurring, []mongo.IndexModel{
		{Keys: bson.D{{Key: "name", Value: 1}, {Key: "seq", Value: -1}}, Options: options.Index().SetName(recurringIndex)},
		{Keys: bson.D{{Key: "due", Value: 1}, {Key: "name", Value: 1}}, Options: options.Index().SetName(recurringDueIndex)},
	})
	if err != nil {
		return fmt.Errorf("index on %s: %w", p.recurring.Name(), err)
	}
	docs, err := p.recurringWrites(ctx, bson.D{{Key: "written_at", Value: bson.D{{Key: "$lt", Value: time.Now().Add(-completedAfter)}}}})
	if err != nil {
		return fmt.Errorf("old writes in %s: %w", p.recurring.Name(), err)
	}
	var old []string
	var latest recurringDoc
	for i, d := range docs {
		if i == 0 || d.Name != docs[i-1].Name {
			if latest, _, err = p.latestRecurring(ctx, d.Name); err != nil {
				return fmt.Errorf("old writes in %s: %w", p.recurring.Name(), err)
			}
		}
		if d.Name == latest.Name && d.Seq < latest.Seq {
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

// writeRecurring inserts d as the next write of its schedule after prev,
// the write it was made from, or returns errMoved when another writer
// stored that write first. Then prev is no schedule's latest: its due is
// removed, so that claims do not find it (best effort; a claim that finds
// it removes it too).
func (p *Persistence) writeRecurring(ctx context.Context, d *recurringDoc, prev recurringDoc) error {
	d.ID = recurringDocID(d.Name, d.Seq)
	d.WrittenAt = time.Now()
	if _, err := p.recurring.InsertOne(ctx, d); err != nil {
		if isDuplicateWrite(err) {
			return errMoved
		}
		return err
	}
	if prev.Due != nil && prev.Seq == d.Seq-1 {
		p.dropDue(ctx, recurringDocID(prev.Name, prev.Seq))
	}
	if d.Seq%recurringTrimEvery == 0 {
		p.trimRecurring(ctx, d.Name, d.Seq)
	}
	return nil
}

// A schedule's writer trims its earlier writes as it goes, so that a
// schedule that runs for long (a runtime one writes twice per tick) does
// not pile up writes until the next Setup: every recurringTrimEvery
// writes, it reads the recurringTrimBatch oldest and removes those a day
// old, as Setup does. That removes as many writes as were made since,
// once the schedule is a day old.
const (
	recurringTrimEvery = 256
	recurringTrimBatch = 2 * recurringTrimEvery
)

// trimRecurring removes the writes of the schedule name before seq (its
// latest, just written) that are a day old, up to recurringTrimBatch of
// the oldest (best effort).
func (p *Persistence) trimRecurring(ctx context.Context, name string, seq int64) {
	cur, err := p.recurring.Find(ctx, bson.D{{Key: "name", Value: name}, {Key: "seq", Value: bson.D{{Key: "$lt", Value: seq}}}},
		options.Find().SetSort(bson.D{{Key: "seq", Value: 1}}).SetLimit(recurringTrimBatch).
			SetProjection(bson.D{{Key: "_id", Value: 1}, {Key: "written_at", Value: 1}}))
	var docs []recurringDoc
	if err == nil {
		err = cur.All(ctx, &docs)
	}
	var old []string
	cutoff := time.Now().Add(-completedAfter)
	for _, d := range docs {
		if d.WrittenAt.Before(cutoff) {
			old = append(old, d.ID)
		}
	}
	if err == nil && len(old) > 0 {
		_, err = p.recurring.DeleteMany(ctx, bson.D{idIn(old)})
	}
	if err != nil {
		p.log.WarnContext(ctx, "mongodb: removing earlier recurring writes failed; Setup removes them", "error", err, "recurring", name)
	}
}

// dropDue removes the due of the write id, which is no schedule's latest
// (so no other writer changes it but another dropDue and the marking of
// its advance done, which nobody reads once it is not the latest).
func (p *Persistence) dropDue(ctx context.Context, id string) {
	_, err := p.recurring.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "due", Value: bson.D{{Key: "$exists", Value: true}}}},
		bson.D{{Key: "$unset", Value: bson.D{{Key: "due", Value: ""}}}})
	if err != nil {
		p.log.WarnContext(ctx, "mongodb: removing the due of an earlier recurring write failed; a claim retries",
			"error", err, "write", id)
	}
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

// claimRounds bounds the finds of one ClaimDueRecurring call.
const claimRounds = 4

// ClaimDueRecurring returns up to limit runtime records whose Due is set
// and not after now, earliest Due first (then by name), and moves their
// Due to now plus lease.
//
// It finds the writes with a spec and a due not after now, by (due,
// name), through the index on (due, name), so on MongoDB its cost grows
// with the writes due, not with the records stored (FerretDB v1 evaluates
// range filters over the whole collection). A write found is claimed if
// it is still its schedule's latest, by inserting the next write with the
// same state and the new due: the insert is the compare-and-set, so of
// racing claimers (or a claimer and a step, a pause, a new definition)
// one wins and the others skip the record. A write found that is no
// longer the latest (its writer did not live to remove its due) has its
// due removed; a record whose latest write has an advance pending younger
// than pendingGrace is being stepped, and is skipped rather than waited
// for.
func (p *Persistence) ClaimDueRecurring(ctx context.Context, now time.Time, limit int, lease time.Duration) ([]bus.RecurringRecord, error) {
	if limit <= 0 {
		return nil, nil
	}
	if lease <= 0 {
		return nil, &ArgumentError{Method: "ClaimDueRecurring", Argument: "lease", Reason: "is not positive"}
	}
	until := now.Add(lease).UnixNano()
	filter := bson.D{
		{Key: "due", Value: bson.D{{Key: "$lte", Value: now.UnixNano()}}},
		{Key: "spec", Value: bson.D{{Key: "$type", Value: "binData"}}},
	}
	var out []bus.RecurringRecord
	for range claimRounds {
		want := limit - len(out)
		cur, err := p.recurring.Find(ctx, filter, options.Find().
			SetSort(bson.D{{Key: "due", Value: 1}, {Key: "name", Value: 1}}).SetLimit(int64(want)))
		if err != nil {
			return out, fmt.Errorf("mongodb: claim due recurring: %w", err)
		}
		var cands []recurringDoc
		if err := cur.All(ctx, &cands); err != nil {
			return out, fmt.Errorf("mongodb: claim due recurring: %w", err)
		}
		for _, c := range cands {
			rec, ok, err := p.claimRecurring(ctx, c, until)
			if err != nil {
				return out, fmt.Errorf("mongodb: claim due recurring %s: %w", c.Name, err)
			}
			if ok {
				out = append(out, rec)
			}
		}
		if len(cands) < want || len(out) == limit {
			break // none due left, or enough
		}
	}
	return out, nil
}

// claimRecurring claims the record of the write c, found due, if c is
// still its latest: it writes the record again with due until, and
// returns the record as it was.
func (p *Persistence) claimRecurring(ctx context.Context, c recurringDoc, until int64) (bus.RecurringRecord, bool, error) {
	cur, ok, young, err := p.currentRecurring(ctx, c.Name)
	switch {
	case err != nil:
		return bus.RecurringRecord{}, false, err
	case cur.Seq != c.Seq:
		p.dropDue(ctx, c.ID) // an earlier write
		return bus.RecurringRecord{}, false, nil
	case !ok || young || cur.Spec == nil || cur.Due == nil || *cur.Due != *c.Due:
		return bus.RecurringRecord{}, false, nil
	}
	d := cur.next()
	d.Due = &until
	if err := p.writeRecurring(ctx, &d, cur); errors.Is(err, errMoved) {
		return bus.RecurringRecord{}, false, nil
	} else if err != nil {
		return bus.RecurringRecord{}, false, err
	}
	return cur.record(), true, nil
}

// pageSkip bounds the earlier writes of one name that ListRecurringPage
// reads through before it seeks the next name.
const pageSkip = 32

// ListRecurringPage returns up to limit records whose names start with
// prefix and sort after after, by name: each name's latest write, unless
// it is a deletion mark. It reads the writes of those names by (name, seq
// descending), through that index, and skips each name's earlier writes;
// past pageSkip of them it seeks the next name with a new find. So it
// reads about the page, not every record: on MongoDB at most pageSkip+1
// writes and one find per name; on FerretDB, which sorts in its own
// process, one pass over the collection per find.
func (p *Persistence) ListRecurringPage(ctx context.Context, prefix, after string, limit int) ([]bus.RecurringRecord, error) {
	var out []bus.RecurringRecord
	for len(out) < limit {
		more, err := p.listPageRun(ctx, prefix, &after, limit, &out)
		if err != nil {
			return nil, fmt.Errorf("mongodb: list recurring page: %w", err)
		}
		if !more {
			break
		}
	}
	return out, nil
}

// listPageRun reads one cursor over the writes of the names with prefix
// after *after and appends each name's record to *out, moving *after on,
// until the page is full or the cursor ends, or, reporting more, until a
// name has more than pageSkip earlier writes.
func (p *Persistence) listPageRun(ctx context.Context, prefix string, after *string, limit int, out *[]bus.RecurringRecord) (more bool, err error) {
	bound := bson.E{Key: "$gt", Value: *after}
	if prefix > *after {
		bound = bson.E{Key: "$gte", Value: prefix} // every name with the prefix is after after
	}
	cur, err := p.recurring.Find(ctx,
		bson.D{{Key: "name", Value: bson.D{bound, {Key: "$regex", Value: "^" + regexp.QuoteMeta(prefix)}}}},
		options.Find().SetSort(bson.D{{Key: "name", Value: 1}, {Key: "seq", Value: -1}}))
	if err != nil {
		return false, err
	}
	defer func() { _ = cur.Close(ctx) }()
	skipped := 0
	for cur.Next(ctx) {
		var d recurringDoc
		if err := cur.Decode(&d); err != nil {
			return false, err
		}
		if d.Name == *after { // an earlier write of the name just listed
			if skipped++; skipped > pageSkip {
				return true, nil
			}
			continue
		}
		*after, skipped = d.Name, 0
		if d.Pending != nil && !d.Done {
			var ok bool
			if d, ok, err = p.settledRecurring(ctx, d.Name); err != nil {
				return false, err
			} else if !ok {
				continue
			}
		}
		if !d.Deleted {
			*out = append(*out, d.record())
		}
		if len(*out) == limit {
			return false, nil
		}
	}
	return false, cur.Err()
}
