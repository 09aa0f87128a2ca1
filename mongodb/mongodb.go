package mongodb

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/postbus/bus"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

var (
	_ bus.Persistence    = (*Persistence)(nil)
	_ bus.ScheduledStore = (*Persistence)(nil)
	_ bus.ClockedStore   = (*Persistence)(nil)
	_ bus.AheadClaimer   = (*Persistence)(nil)
	_ bus.SagaStore      = (*Persistence)(nil)
	_ bus.Pinger         = (*Persistence)(nil)
)

// DefaultCollection is the collection that holds scheduled messages when
// Options.Collection is empty.
const DefaultCollection = "outgoingmessages"

// claimsSuffix names the claim-ticket collection after the message collection.
const claimsSuffix = "_claims"

// claimIndex is the name of the index that serves claims and
// NextDueOutgoing: (transport, available_at, due_at, _id). available_at
// holds milliseconds; due_at, in nanoseconds, keeps rows due within one
// millisecond (the rows of one ordering key) in due order.
const claimIndex = "postbus_transport_available_due"

// oldClaimIndex is the claim index of earlier versions, without due_at;
// Setup drops it once claimIndex exists.
const oldClaimIndex = "postbus_transport_available_at"

// Options configures a Persistence. Every zero value means the documented
// default.
type Options struct {
	// Collection holds the scheduled messages, one document per message.
	// Default: "outgoingmessages".
	Collection string
	// ClaimsCollection holds the short-lived claim tickets that make
	// concurrent claims exclusive on servers whose conditional updates are
	// not atomic (see the package documentation, "Claims").
	// Default: Collection + "_claims".
	ClaimsCollection string
	// SagaCollection holds the saga instances (bus.SagaStore; see the
	// package documentation, "Sagas"). Default: Collection + "_sagas".
	SagaCollection string
	// FailedCollection holds the messages of the error queue
	// (bus.FailedStore). Default: Collection + "_failed".
	FailedCollection string
	// RecurringCollection holds the records of recurring schedules
	// (bus.RecurringStore; see the package documentation, "Recurring
	// schedules"). Default: Collection + "_recurring".
	RecurringCollection string
	// Logger receives warnings about best-effort clean-up that failed.
	// Default: slog.Default().
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	o.Collection = cmp.Or(o.Collection, DefaultCollection)
	o.ClaimsCollection = cmp.Or(o.ClaimsCollection, o.Collection+claimsSuffix)
	o.SagaCollection = cmp.Or(o.SagaCollection, o.Collection+sagasSuffix)
	o.FailedCollection = cmp.Or(o.FailedCollection, o.Collection+failedSuffix)
	o.RecurringCollection = cmp.Or(o.RecurringCollection, o.Collection+recurringSuffix)
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

func (o Options) validate() error {
	for _, f := range []struct{ field, name string }{
		{"Collection", o.Collection}, {"ClaimsCollection", o.ClaimsCollection}, {"SagaCollection", o.SagaCollection},
		{"FailedCollection", o.FailedCollection}, {"RecurringCollection", o.RecurringCollection},
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
	if o.SagaCollection == o.Collection || o.SagaCollection == o.ClaimsCollection {
		return &OptionsError{Field: "SagaCollection", Reason: "must differ from Collection and ClaimsCollection"}
	}
	switch o.FailedCollection {
	case o.Collection, o.ClaimsCollection, o.SagaCollection:
		return &OptionsError{Field: "FailedCollection", Reason: "must differ from Collection, ClaimsCollection and SagaCollection"}
	}
	switch o.RecurringCollection {
	case o.Collection, o.ClaimsCollection, o.SagaCollection, o.FailedCollection:
		return &OptionsError{Field: "RecurringCollection", Reason: "must differ from the other collections"}
	}
	return nil
}

// Persistence is a durable scheduled-message store in a MongoDB database. It
// implements bus.Persistence, bus.ScheduledStore, bus.ClockedStore,
// bus.SagaStore and bus.RecurringStore. It is safe for concurrent use,
// and several processes may share one collection.
type Persistence struct {
	db      *mongo.Database
	msgs    *mongo.Collection
	tickets *mongo.Collection
	sagas   *mongo.Collection
	failed  *mongo.Collection
	// recurring holds the schedule records (recurring.go).
	recurring *mongo.Collection
	log       *slog.Logger

	// afterFind, when set (by tests), runs in each claim round between
	// finding the candidates and claiming them.
	afterFind func(ctx context.Context)
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
		db:        db,
		msgs:      db.Collection(opts.Collection),
		tickets:   db.Collection(opts.ClaimsCollection),
		sagas:     db.Collection(opts.SagaCollection),
		failed:    db.Collection(opts.FailedCollection),
		recurring: db.Collection(opts.RecurringCollection),
		log:       opts.Logger,
	}, nil
}

// Durable reports true: stored messages survive a restart of the process.
func (p *Persistence) Durable() bool { return true }

// Ping checks that the deployment answers (bus.Pinger, for Bus.Health),
// with the client's read preference.
func (p *Persistence) Ping(ctx context.Context) error { return p.db.Client().Ping(ctx, nil) }

// Collection returns the collection holding the scheduled messages.
func (p *Persistence) Collection() *mongo.Collection { return p.msgs }

// Setup creates the index that claims and NextDueOutgoing scan,
// (transport, available_at, _id) on the message collection, and the two
// that operators' listings and the due-time histogram read, (due_at, _id)
// and (message_type, due_at, _id), and the indexes of the failed-message
// collection (see FailedCollection); it removes
// claim tickets left by claimers that crashed more than a day ago, and
// creates the saga collection's index and removes the marks of saga
// instances completed more than a day ago (see "Sagas"), and the staged
// occurrences of recurring schedules that a crashed process left more
// than a day ago (see "Recurring schedules").
// Documents stored by earlier versions need no migration: a missing
// transport or token reads as empty. Creating an index that exists is a
// no-op, so Setup is idempotent and safe to run from every process at start.
//
// An error that says the server cannot be reached for now (no server
// selected within the client's timeout, refused or lost connection, a
// server shutting down or stepping down) matches bus.ErrStoreUnavailable,
// and bus.Start retries Setup until Config.StartTimeout; an error about
// what was asked (authentication failed, not authorized, an index that
// conflicts with an existing one) does not, and fails Start at once.
func (p *Persistence) Setup(ctx context.Context) error {
	return unavailable(p.setup(ctx))
}

func (p *Persistence) setup(ctx context.Context) error {
	_, err := p.msgs.Indexes().CreateOne(ctx, mongo.IndexModel{
		Keys: bson.D{
			{Key: fieldTransport, Value: 1}, {Key: fieldAvailableAt, Value: 1}, {Key: fieldDueAt, Value: 1}, {Key: "_id", Value: 1},
		},
		Options: options.Index().SetName(claimIndex),
	})
	if err != nil {
		return fmt.Errorf("mongodb: setup: index on %s: %w", p.msgs.Name(), err)
	}
	if err := dropIndexIfPresent(ctx, p.msgs, oldClaimIndex); err != nil {
		return fmt.Errorf("mongodb: setup: %w", err)
	}
	if err := p.setupBrowse(ctx); err != nil {
		return fmt.Errorf("mongodb: setup: %w", err)
	}
	if err := p.setupFailed(ctx); err != nil {
		return fmt.Errorf("mongodb: setup: %w", err)
	}
	if err := p.removeAbandonedTickets(ctx); err != nil {
		return fmt.Errorf("mongodb: setup: %w", err)
	}
	if err := p.setupSagas(ctx); err != nil {
		return fmt.Errorf("mongodb: setup: %w", err)
	}
	if err := p.setupRecurring(ctx); err != nil {
		return fmt.Errorf("mongodb: setup: %w", err)
	}
	return nil
}

// dropIndexIfPresent drops the index name of c when c has it.
func dropIndexIfPresent(ctx context.Context, c *mongo.Collection, name string) error {
	cur, err := c.Indexes().List(ctx)
	if err != nil {
		return fmt.Errorf("list indexes of %s: %w", c.Name(), err)
	}
	var idx []struct {
		Name string `bson:"name"`
	}
	if err := cur.All(ctx, &idx); err != nil {
		return fmt.Errorf("list indexes of %s: %w", c.Name(), err)
	}
	for _, ix := range idx {
		if ix.Name == name {
			if err := c.Indexes().DropOne(ctx, name); err != nil {
				return fmt.Errorf("drop index %s of %s: %w", name, c.Name(), err)
			}
		}
	}
	return nil
}
