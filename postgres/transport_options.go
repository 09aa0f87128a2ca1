package postgres

import (
	"log/slog"
	"time"

	"github.com/postbus/bus/driver"
)

// Defaults for the zero values of TransportOptions.
const (
	DefaultTransportSchema = "public"
	DefaultTablePrefix     = "postbus"
	DefaultLease           = 30 * time.Second
	DefaultPollInterval    = time.Second
	DefaultMaxMessageSize  = 16 << 20
	DefaultMaxSendBatch    = 500
)

// Table name suffixes of the transport: <prefix>_messages holds every
// queue's messages, <prefix>_subscriptions the event subscriptions.
const (
	messagesSuffix = "_messages"
	subsSuffix     = "_subscriptions"
	queueIdxSuffix = "_messages_claim_idx"
)

// TransportOptions configures a Transport. Every zero value means the
// documented default.
type TransportOptions struct {
	// Schema holds the transport's tables. Default "public". Provision
	// creates it if missing.
	Schema string
	// TablePrefix names the tables: <prefix>_messages (every queue's
	// messages, a queue column tells them apart) and <prefix>_subscriptions
	// (which queue receives which event type). Default "postbus". Schema
	// and TablePrefix must be plain identifiers (letters, digits and
	// underscores, not starting with a digit); they are always quoted.
	TablePrefix string
	// Lease is how long a received message stays invisible to other
	// consumers. While its handler runs the lease is extended every
	// Lease/3; when an extension finds that another consumer took the
	// message, the delivery's ctx is cancelled. A consumer that is frozen
	// or cut off from the server leaves its messages to others once their
	// lease lapses; one whose process died, within about a second (see
	// DisableOwnerLock). Default 30 s.
	Lease time.Duration
	// PollInterval is how often an idle Receive looks for messages when no
	// notification woke it (notifications lost on a dropped LISTEN
	// connection, DisableNotify). Default 1 s.
	PollInterval time.Duration
	// DisableNotify turns LISTEN/NOTIFY off: sends issue no pg_notify and
	// Receive relies on PollInterval. Set it behind PgBouncer in
	// transaction pooling mode, where LISTEN does not work. Default false.
	DisableNotify bool
	// DisableOwnerLock turns off the liveness lock: while it receives, a
	// Transport holds a session-level advisory lock on a connection of its
	// own, taken out of the pool, and records the lock's key on the rows it
	// claims, so that other consumers take the rows of a process that died
	// within about a second instead of after their lease. Set it behind
	// PgBouncer in transaction pooling mode, where a session lock does not
	// follow the client; rows then wait out their lease. Default false.
	DisableOwnerLock bool
	// MaxMessageSize is the largest envelope body Send and Publish accept;
	// a larger one is an *OversizeError and nothing is stored. PostgreSQL
	// takes up to 1 GiB in a bytea, but every message is read whole into
	// memory. Default 16 MiB.
	MaxMessageSize int
	// MaxSendBatch caps how many concurrent sends are grouped into one
	// INSERT. Default 500.
	MaxSendBatch int
	// Logger receives warnings (a lost LISTEN connection, a failed
	// acknowledgement). Default slog.Default().
	Logger *slog.Logger
}

func (o TransportOptions) withDefaults() TransportOptions {
	driver.Default(&o.Schema, DefaultTransportSchema)
	driver.Default(&o.TablePrefix, DefaultTablePrefix)
	driver.Default(&o.Lease, DefaultLease)
	driver.Default(&o.PollInterval, DefaultPollInterval)
	driver.Default(&o.MaxMessageSize, DefaultMaxMessageSize)
	driver.Default(&o.MaxSendBatch, DefaultMaxSendBatch)
	o.Logger = driver.Logger(o.Logger)
	return o
}

func (o TransportOptions) validate() error {
	if err := checkName("Schema", o.Schema, maxIdentifierLen); err != nil {
		return err
	}
	if err := checkName("TablePrefix", o.TablePrefix, maxIdentifierLen-len(queueIdxSuffix)); err != nil {
		return err
	}
	p := driver.First(
		driver.AtLeast("Lease", o.Lease, 100*time.Millisecond),
		driver.NotNegative("PollInterval", o.PollInterval),
		driver.NotNegative("MaxMessageSize", o.MaxMessageSize),
		driver.NotNegative("MaxSendBatch", o.MaxSendBatch),
	)
	return driver.Invalid[errorFamily](p)
}
