package mongodb

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/postbus/bus"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

var (
	_ bus.Persistence    = (*Persistence)(nil)
	_ bus.ScheduledStore = (*Persistence)(nil)
)

// DefaultCollection is the collection that holds scheduled messages when
// Options.Collection is empty.
const DefaultCollection = "outgoingmessages"

// claimsSuffix names the claim-ticket collection after the message collection.
const claimsSuffix = "_claims"

// Options configures a Persistence. Every zero value means the documented
// default.
type Options struct {
	// Collection holds the scheduled messages, one document per message.
	// Default: "outgoingmessages".
	Collection string
	// ClaimsCollection holds the claim tickets that make concurrent claims
	// exclusive (see the package documentation). Default: Collection + "_claims".
	ClaimsCollection string
	// Logger receives warnings about best-effort clean-up that failed.
	// Default: slog.Default().
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	o.Collection = cmp.Or(o.Collection, DefaultCollection)
	o.ClaimsCollection = cmp.Or(o.ClaimsCollection, o.Collection+claimsSuffix)
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

func (o Options) validate() error {
	for _, f := range []struct{ field, name string }{
		{"Collection", o.Collection}, {"ClaimsCollection", o.ClaimsCollection},
	} {
		switch {
		case strings.ContainsAny(f.name, "$\x00"):
			return &OptionsError{Field: f.field, Reason: fmt.Sprintf("%q contains '$' or a NUL byte", f.name)}
		case strings.HasPrefix(f.name, "system."):
			return &OptionsError{Field: f.field, Reason: fmt.Sprintf("%q is in the reserved system. namespace", f.name)}
		}
	}
	if o.Collection == o.ClaimsCollection {
		return &OptionsError{Field: "ClaimsCollection", Reason: "must differ from Collection"}
	}
	return nil
}

// Persistence is a durable scheduled-message store in a MongoDB database. It
// implements bus.Persistence and bus.ScheduledStore. It is safe for
// concurrent use, and several processes may share one collection.
type Persistence struct {
	db     *mongo.Database
	msgs   *mongo.Collection
	claims *mongo.Collection
	log    *slog.Logger
}

// New returns a Persistence storing in db, which the caller keeps owning:
// connection settings, write concern and Disconnect stay in the caller's
// hands. Use a majority write concern (the driver's default on replica sets)
// so a claim or a stored message survives a failover. New does no I/O; call
// Setup (bus.Start does) to create the indexes.
func New(db *mongo.Database, opts Options) (*Persistence, error) {
	if db == nil {
		return nil, &OptionsError{Field: "db", Reason: "is nil"}
	}
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	return &Persistence{
		db:     db,
		msgs:   db.Collection(opts.Collection),
		claims: db.Collection(opts.ClaimsCollection),
		log:    opts.Logger,
	}, nil
}

// Durable reports true: stored messages survive a restart of the process.
func (p *Persistence) Durable() bool { return true }

// Collection returns the collection holding the scheduled messages.
func (p *Persistence) Collection() *mongo.Collection { return p.msgs }

// Setup creates the indexes the store needs: (available_at, _id) on the
// message collection, which claims and NextDueOutgoing scan, and msg on the
// claim-ticket collection. Creating an index that exists is a no-op, so
// Setup is idempotent and safe to run from every process at start.
func (p *Persistence) Setup(ctx context.Context) error {
	_, err := p.msgs.Indexes().CreateOne(ctx, mongo.IndexModel{
		Keys:    bson.D{{Key: fieldAvailableAt, Value: 1}, {Key: "_id", Value: 1}},
		Options: options.Index().SetName("postbus_available_at"),
	})
	if err != nil {
		return fmt.Errorf("mongodb: setup: index on %s: %w", p.msgs.Name(), err)
	}
	_, err = p.claims.Indexes().CreateOne(ctx, mongo.IndexModel{
		Keys:    bson.D{{Key: fieldMsg, Value: 1}},
		Options: options.Index().SetName("postbus_msg"),
	})
	if err != nil {
		return fmt.Errorf("mongodb: setup: index on %s: %w", p.claims.Name(), err)
	}
	return nil
}

// Document field names.
const (
	fieldKind        = "kind"
	fieldEnvelope    = "envelope"
	fieldDueAt       = "due_at"
	fieldAvailableAt = "available_at"
	fieldLeaseUntil  = "lease_until"
	fieldFailures    = "failures"
	fieldLastError   = "last_error"
	fieldCreatedAt   = "created_at"
	fieldClaims      = "claims"
	fieldMsg         = "msg"
	fieldGen         = "gen"
	fieldUntil       = "until"
)

// message is one scheduled message as stored. DueAt is exact Unix
// nanoseconds, because BSON dates hold milliseconds only; available_at and
// lease_until are dates, compared with the server's clock.
type message struct {
	ID          string     `bson:"_id"`
	Kind        int32      `bson:"kind"`
	Envelope    []byte     `bson:"envelope"`
	DueAt       int64      `bson:"due_at"`
	AvailableAt time.Time  `bson:"available_at"`
	LeaseUntil  *time.Time `bson:"lease_until"`
	Failures    int32      `bson:"failures"`
	LastError   string     `bson:"last_error"`
	CreatedAt   time.Time  `bson:"created_at"`
	Claims      int64      `bson:"claims"`
}

func (m *message) outgoing() bus.OutgoingMessage {
	o := bus.OutgoingMessage{
		ID: m.ID, Kind: bus.Kind(m.Kind), Envelope: m.Envelope,
		DueAt: time.Unix(0, m.DueAt), Failures: int(m.Failures), LastError: m.LastError,
	}
	if m.LeaseUntil != nil {
		o.LeaseUntil = *m.LeaseUntil
	}
	return o
}

// ceilMillis rounds t up to a whole millisecond, the precision of a BSON
// date, so a row never becomes claimable before its time.
func ceilMillis(t time.Time) time.Time {
	r := t.Truncate(time.Millisecond)
	if r.Before(t) {
		r = r.Add(time.Millisecond)
	}
	return r
}
