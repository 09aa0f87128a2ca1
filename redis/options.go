package redis

import (
	"errors"
	"log/slog"
	"time"

	"github.com/postbus/bus/driver"
)

// Defaults used for zero Options fields.
const (
	DefaultPrefix       = "postbus"
	DefaultLease        = 30 * time.Second
	DefaultBlock        = time.Second
	DefaultClaimBatch   = 100
	DefaultSettleBatch  = 256
	DefaultPrefetch     = 64
	minLease            = time.Second
	minBlock            = 10 * time.Millisecond
	defaultShutdownWait = 10 * time.Second
)

// Options configure a Transport. Every zero value means the documented
// default, so Options{} is a working configuration.
type Options struct {
	// Prefix starts every key the transport uses: <prefix>:q:<queue> for
	// the stream of a queue and <prefix>:sub:<type> for the set of queues
	// subscribed to an event type. Endpoints that talk to each other must
	// use the same Prefix. On Redis Cluster, wrap it in a hash tag
	// ("{postbus}") so all of a bus's keys live in one slot: Publish adds
	// an event to every subscriber's stream in one script. Default
	// DefaultPrefix ("postbus").
	Prefix string
	// Lease is how long a message read by one consumer stays its own
	// without a sign of life. While the message is in hand (handled or
	// waiting for a handler) the consumer renews its claim every Lease/3;
	// a message idle for longer than Lease (its consumer died or lost its
	// connection) is taken over by another consumer of the queue with
	// XAUTOCLAIM. Default 30s; at least 1s.
	Lease time.Duration
	// ClaimInterval is how often each Receive looks for messages idle for
	// longer than Lease. Default Lease/2.
	ClaimInterval time.Duration
	// ClaimBatch bounds the messages one XAUTOCLAIM takes over. Default 100.
	ClaimBatch int
	// Block is how long one XREADGROUP waits on the server for new
	// messages. It also bounds how long Receive takes to notice that its
	// ctx ended. Default 1s.
	Block time.Duration
	// Prefetch is how many messages each Receive reads ahead of its
	// handlers, on top of ReceiveOptions.Concurrency. Messages read ahead
	// are this consumer's (their claim is renewed) and are handed back to
	// the stream when Receive stops. Default 64; -1 reads no more than
	// there are free handlers.
	Prefetch int
	// MaxLen caps each stream at about this many entries (XADD MAXLEN ~).
	// Acknowledged entries are deleted at once, so a stream only holds the
	// messages not yet handled; a cap therefore drops the oldest messages
	// nobody handled yet, pending ones included. Use it only as a guard
	// against unbounded memory when losing a backlog is acceptable.
	// Default 0: no cap.
	MaxLen int64
	// Logger receives the transport's logs. Default slog.Default().
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	driver.Default(&o.Prefix, DefaultPrefix)
	driver.Default(&o.Lease, DefaultLease)
	driver.Default(&o.ClaimInterval, o.Lease/2)
	driver.Default(&o.ClaimBatch, DefaultClaimBatch)
	driver.Default(&o.Block, DefaultBlock)
	switch o.Prefetch {
	case 0:
		o.Prefetch = DefaultPrefetch
	case -1:
		o.Prefetch = 0
	}
	o.Logger = driver.Logger(o.Logger)
	return o
}

func (o Options) validate() error {
	p := driver.First(
		driver.AtLeast("Lease", o.Lease, minLease),
		driver.NotNegative("ClaimInterval", o.ClaimInterval),
		driver.NotNegative("ClaimBatch", o.ClaimBatch),
		driver.AtLeast("Block", o.Block, minBlock),
		driver.NotNegative("Prefetch", o.Prefetch),
		driver.NotNegative("MaxLen", o.MaxLen),
	)
	return driver.Invalid[errorFamily](p)
}

// Sentinel errors; the typed errors below wrap them.
var (
	// ErrInvalidOptions is wrapped by every *OptionsError.
	ErrInvalidOptions = errors.New("redis: invalid options")
	// ErrInvalidName is wrapped by every *NameError.
	ErrInvalidName = errors.New("redis: invalid name")
	// ErrClosed is returned by calls on a closed Transport.
	ErrClosed = errors.New("redis: transport closed")
)

// errorFamily makes the kit's typed errors Redis's.
type errorFamily struct{}

func (errorFamily) Sentinels() driver.Sentinels {
	return driver.Sentinels{Transport: "redis", InvalidOptions: ErrInvalidOptions, InvalidName: ErrInvalidName}
}

// OptionsError reports an invalid Options field or New argument: Field
// names it ("Lease"), Reason says why. It matches ErrInvalidOptions.
type OptionsError = driver.OptionsError[errorFamily]

// NameError reports a queue or message type name the transport cannot use,
// such as an empty one: What is "queue", "event type", "handler" or
// "envelope". It matches ErrInvalidName.
type NameError = driver.NameError[errorFamily]

func checkName(what, name string) error { return driver.NonEmpty[errorFamily](what, name) }
