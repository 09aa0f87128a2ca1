package mongodb

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/postbus/bus"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// pendingGrace is how long the writer of an advance has to store and
// cancel its rows before another process does it for it: a writer that
// is alive does it within milliseconds; one past this is taken for
// stopped.
const pendingGrace = 5 * time.Second

// pendingPoll is how often a process waiting on another's pending advance
// reads the record again.
const pendingPoll = 50 * time.Millisecond

// pendingAdvance is what a committed advance still has to do: store its
// rows and cancel the rows it names. Doing it again stores nothing twice
// while the rows exist (see finishAdvance).
type pendingAdvance struct {
	Store  []pendingRow `bson:"store"`
	Cancel []string     `bson:"cancel"`
}

// pendingRow is a row to store, as in bus.OutgoingMessage.
type pendingRow struct {
	ID        string `bson:"id"`
	Kind      int32  `bson:"kind"`
	Type      string `bson:"type"`
	Envelope  []byte `bson:"envelope"`
	DueAt     int64  `bson:"due_at"`
	Transport string `bson:"transport"`
}

// DeclareRecurring inserts the record, or writes its new definition when
// rec's Fingerprint differs; a concurrent write makes it read again.
func (p *Persistence) DeclareRecurring(ctx context.Context, rec bus.RecurringRecord) (bus.RecurringRecord, bool, error) {
	for {
		cur, ok, err := p.settledRecurring(ctx, rec.Name)
		if err != nil {
			return bus.RecurringRecord{}, false, fmt.Errorf("mongodb: declare recurring %s: %w", rec.Name, err)
		}
		var d recurringDoc
		switch {
		case !ok:
			// A deletion mark keeps the generation: the next one follows it.
			d = recurringDoc{Name: rec.Name, Seq: cur.Seq + 1, Fingerprint: rec.Fingerprint, Schedule: rec.Schedule,
				Generation: cur.Generation + 1, Last: noTime, Ticks: []int64{}, Spec: rec.Spec, Due: dueNanos(rec.Due)}
		case cur.Fingerprint == rec.Fingerprint:
			return cur.record(), false, nil
		default:
			d = cur.next()
			d.Fingerprint, d.Schedule = rec.Fingerprint, rec.Schedule
			d.Spec, d.Due = rec.Spec, dueNanos(rec.Due)
			d.Generation++
		}
		if err := p.writeRecurring(ctx, &d, cur); err == nil {
			return d.record(), true, nil
		} else if !errors.Is(err, errMoved) {
			return bus.RecurringRecord{}, false, fmt.Errorf("mongodb: declare recurring %s: %w", rec.Name, err)
		}
	}
}

// LoadRecurring returns the record name.
func (p *Persistence) LoadRecurring(ctx context.Context, name string) (bus.RecurringRecord, bool, error) {
	d, ok, err := p.settledRecurring(ctx, name)
	if err != nil {
		return bus.RecurringRecord{}, false, fmt.Errorf("mongodb: load recurring %s: %w", name, err)
	}
	if !ok {
		return bus.RecurringRecord{}, false, nil
	}
	return d.record(), true, nil
}

// ListRecurring returns every record, by name: each schedule's latest
// write, unless it is a deletion mark.
func (p *Persistence) ListRecurring(ctx context.Context) ([]bus.RecurringRecord, error) {
	docs, err := p.recurringWrites(ctx, bson.D{})
	if err != nil {
		return nil, fmt.Errorf("mongodb: list recurring: %w", err)
	}
	var out []bus.RecurringRecord
	for i := range docs {
		if i > 0 && docs[i].Name == docs[i-1].Name {
			continue // an earlier write
		}
		d, ok, err := p.settledRecurring(ctx, docs[i].Name)
		if err != nil {
			return nil, fmt.Errorf("mongodb: list recurring: %w", err)
		}
		if ok {
			out = append(out, d.record())
		}
	}
	return out, nil
}

// AdvanceRecurring applies adv if the record still has adv.Generation,
// adv.Fingerprint, adv.Paused and adv.From as Last. Without multi-document transactions it goes in two
// steps: the commit point is the insert of the record's next write, which
// carries the new Last and Ticks and the advance's rows as pending; then
// the rows are stored (an ID already stored keeps its row) and the rows
// named cancelled unless leased, and the write marked done. A process
// that stops in between leaves the advance pending: the next process to
// read the record finishes it once it is pendingGrace old, and no later
// change is written before that, so the advance is all or nothing for
// every reader. Finishing twice stores a row twice only if its first copy
// was sent and deleted in between: that takes a writer that stopped
// within milliseconds of storing a row due at once.
func (p *Persistence) AdvanceRecurring(ctx context.Context, adv bus.RecurringAdvance) (bool, error) {
	cur, ok, err := p.settledRecurring(ctx, adv.Name)
	if err != nil {
		return false, fmt.Errorf("mongodb: advance recurring %s: %w", adv.Name, err)
	}
	if !ok || cur.Generation != adv.Generation || cur.Fingerprint != adv.Fingerprint || cur.Paused != adv.Paused ||
		cur.Last != toNanos(adv.From) {
		return false, nil
	}
	d := cur.next()
	d.Last, d.Ticks = toNanos(adv.Last), make([]int64, len(adv.Ticks))
	for i, t := range adv.Ticks {
		d.Ticks[i] = toNanos(t)
	}
	if !adv.Alive.IsZero() && adv.Alive.UnixNano() > d.Alive {
		d.Alive = adv.Alive.UnixNano() // the mark only moves forward
	}
	d.Due, d.Runs, d.Skipped = dueNanos(adv.Due), adv.Runs, adv.Skipped
	if len(adv.Store) > 0 || len(adv.Cancel) > 0 {
		d.Pending = &pendingAdvance{Cancel: adv.Cancel, Store: make([]pendingRow, len(adv.Store))}
		for i, m := range adv.Store {
			if m.ID == "" || m.Envelope == nil {
				return false, &ArgumentError{Method: "AdvanceRecurring", Argument: fmt.Sprintf("adv.Store[%d]", i), Reason: "has no ID or no envelope"}
			}
			d.Pending.Store[i] = pendingRow{ID: m.ID, Kind: int32(m.Kind), Type: m.Type, Envelope: m.Envelope,
				DueAt: m.DueAt.UnixNano(), Transport: m.Transport}
		}
	}
	if err := p.writeRecurring(ctx, &d, cur); errors.Is(err, errMoved) {
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("mongodb: advance recurring %s: %w", adv.Name, err)
	}
	if d.Pending != nil {
		if err := p.finishAdvance(ctx, &d); err != nil {
			return false, fmt.Errorf("mongodb: advance recurring %s: committed, to be finished by the next reader: %w", adv.Name, err)
		}
	}
	return true, nil
}

// finishAdvance stores the rows of d's pending advance, cancels those it
// names unless leased, and marks d done.
func (p *Persistence) finishAdvance(ctx context.Context, d *recurringDoc) error {
	if rows := d.Pending.Store; len(rows) > 0 {
		msgs := make([]bus.OutgoingMessage, len(rows))
		for i, r := range rows {
			msgs[i] = bus.OutgoingMessage{ID: r.ID, Kind: bus.Kind(r.Kind), Type: r.Type, Envelope: r.Envelope,
				DueAt: time.Unix(0, r.DueAt), Transport: r.Transport}
		}
		if err := p.StoreOutgoing(ctx, msgs); err != nil {
			return err
		}
	}
	for _, id := range d.Pending.Cancel {
		if _, err := p.CancelOutgoing(ctx, id); err != nil {
			return err
		}
	}
	if _, err := p.recurring.UpdateOne(ctx, bson.D{{Key: "_id", Value: d.ID}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "done", Value: true}}}}); err != nil {
		return fmt.Errorf("mark the advance done: %w", err)
	}
	d.Done = true
	return nil
}

// settledRecurring returns the schedule's latest write with no advance
// pending: it waits for the writer of a recent one to finish it, and
// finishes an older one itself. It returns false when there is no record
// (with the deletion mark's seq, if any, in the document).
func (p *Persistence) settledRecurring(ctx context.Context, name string) (recurringDoc, bool, error) {
	for {
		d, ok, young, err := p.currentRecurring(ctx, name)
		if err != nil || !young {
			return d, ok, err
		}
		t := time.NewTimer(pendingPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return recurringDoc{}, false, ctx.Err()
		case <-t.C:
		}
	}
}

// SetRecurringPaused writes the record with Paused set and Due at;
// resuming also moves Last to at when it is earlier.
func (p *Persistence) SetRecurringPaused(ctx context.Context, name string, paused bool, at time.Time) (bool, error) {
	for {
		cur, ok, err := p.settledRecurring(ctx, name)
		if err != nil {
			return false, fmt.Errorf("mongodb: pause recurring %s: %w", name, err)
		}
		if !ok {
			return false, nil
		}
		d := cur.next()
		d.Paused, d.Due = paused, dueNanos(at)
		if !paused {
			d.Last = max(d.Last, toNanos(at))
		}
		if d.Paused == cur.Paused && d.Last == cur.Last && sameDue(d.Due, cur.Due) {
			return true, nil
		}
		if err := p.writeRecurring(ctx, &d, cur); err == nil {
			return true, nil
		} else if !errors.Is(err, errMoved) {
			return false, fmt.Errorf("mongodb: pause recurring %s: %w", name, err)
		}
	}
}

// DeleteRecurring cancels the rows named that no claim holds, then writes
// the record's deletion mark, which keeps its generation (and stays: the
// name's generations are never reused).
func (p *Persistence) DeleteRecurring(ctx context.Context, name string, cancel []string) (bool, error) {
	for {
		cur, ok, err := p.settledRecurring(ctx, name)
		if err != nil {
			return false, fmt.Errorf("mongodb: delete recurring %s: %w", name, err)
		}
		if !ok {
			return false, nil
		}
		for _, id := range cancel {
			if _, err := p.CancelOutgoing(ctx, id); err != nil {
				return false, fmt.Errorf("mongodb: delete recurring %s: %w", name, err)
			}
		}
		// The mark has no spec and no due: no claim finds it.
		mark := recurringDoc{Name: name, Seq: cur.Seq + 1, Generation: cur.Generation, Deleted: true, Last: noTime, Ticks: []int64{}}
		if err := p.writeRecurring(ctx, &mark, cur); err == nil {
			return true, nil
		} else if !errors.Is(err, errMoved) {
			return false, fmt.Errorf("mongodb: delete recurring %s: %w", name, err)
		}
	}
}

// sameDue reports whether two writes' dues are equal (nil: never).
func sameDue(a, b *int64) bool { return a == nil && b == nil || a != nil && b != nil && *a == *b }
