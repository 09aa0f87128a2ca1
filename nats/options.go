package nats

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/postbus/bus/driver"
)

// Defaults used for zero Options fields.
const (
	DefaultStream          = "POSTBUS"
	DefaultSubjectPrefix   = "postbus"
	DefaultDuplicateWindow = 2 * time.Minute
	DefaultAckWait         = 30 * time.Second
	DefaultMaxAckPending   = 10_000
	DefaultPublishTimeout  = 30 * time.Second
	DefaultPublishWindow   = 4096
	DefaultPullExpiry      = 5 * time.Second
	DefaultPrefetch        = 64
)

// Options configure a Transport. Every zero value means the documented
// default, so Options{} is a working configuration.
type Options struct {
	// Stream is the JetStream stream holding every queue and event of the
	// bus. Default DefaultStream ("POSTBUS"). Endpoints that talk to each
	// other must use the same Stream and SubjectPrefix.
	Stream string
	// SubjectPrefix starts every subject the transport uses:
	// <prefix>.q.<queue> for commands and <prefix>.e.<type> for events.
	// Default DefaultSubjectPrefix ("postbus").
	SubjectPrefix string
	// Storage is the stream's storage when Provision creates it. Default
	// jetstream.FileStorage (the zero value).
	Storage jetstream.StorageType
	// Replicas is the stream's replica count in a cluster. Default 1.
	Replicas int
	// MaxAge drops messages older than this from the stream, handled or
	// not. Default 0: kept until every consumer that wants them acked them.
	MaxAge time.Duration
	// DuplicateWindow is how long the stream remembers message IDs, to drop
	// a re-send of the same message to the same destination: a caller's
	// retry of a failed Send, the dispatcher sending a row again, a handler
	// retried on the same delivery. Retries later than this are stored
	// again. It must be at least PublishTimeout. Provision sets it on the
	// stream it creates; an existing stream keeps its own, and a shorter
	// one is logged as a warning. Default 2m (the dispatcher's backoff
	// between hand-over attempts tops out at one minute).
	DuplicateWindow time.Duration
	// AckWait is how long the server waits for an acknowledgement before it
	// redelivers a message. While a handler runs, the transport reports
	// progress every AckWait/3, so slow handlers keep their message.
	// Default 30s.
	AckWait time.Duration
	// MaxDeliver caps deliveries of one message; past it the server stops
	// redelivering. Default 0: unlimited (the bus's own retries and error
	// queue decide).
	MaxDeliver int
	// MaxAckPending bounds the unacknowledged messages of one queue across
	// all its receiving processes. Each Receive call bounds its own share
	// by ReceiveOptions.Concurrency. Default 10,000.
	MaxAckPending int
	// NakDelay delays the redelivery of a message whose handler failed.
	// Default 0: redelivered at once.
	NakDelay time.Duration
	// AckSync makes each acknowledgement wait for the server's
	// confirmation (DoubleAck). Default false: acks are sent without
	// waiting, which is faster; a lost ack only causes a redelivery.
	AckSync bool
	// PublishTimeout fails a Send or Publish that got no acknowledgement
	// from the stream in this time, even if its context has no deadline.
	// It includes waiting for a free PublishWindow slot and for a lost
	// connection to come back: a Send never publishes while the connection
	// is down. It bounds a SendBatch call as a whole. Default 30s.
	PublishTimeout time.Duration
	// PublishWindow bounds the messages of Send, Publish and SendBatch
	// calls waiting for their acknowledgement at once, across the
	// transport; further messages wait for a free slot. Default 4096.
	PublishWindow int
	// PullExpiry is how long one pull request waits on the server for
	// messages; the client expects a heartbeat every PullExpiry/2 and
	// re-issues its pulls when one is missed. Default 5s.
	PullExpiry time.Duration
	// Prefetch is how many messages each Receive pull buffers ahead of its
	// handlers (never fewer than ReceiveOptions.Concurrency). Buffered
	// messages are not reported in progress, so a message waiting longer
	// than AckWait behind slow handlers is redelivered elsewhere: lower it
	// (or raise AckWait) for slow handlers. When Receive stops, buffered
	// messages are handed back at once. Default 64.
	Prefetch int
	// Logger receives the transport's logs. Default slog.Default().
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	driver.Default(&o.Stream, DefaultStream)
	driver.Default(&o.SubjectPrefix, DefaultSubjectPrefix)
	driver.Default(&o.Replicas, 1)
	driver.Default(&o.DuplicateWindow, DefaultDuplicateWindow)
	driver.Default(&o.AckWait, DefaultAckWait)
	driver.Default(&o.MaxDeliver, -1)
	driver.Default(&o.MaxAckPending, DefaultMaxAckPending)
	driver.Default(&o.PublishTimeout, DefaultPublishTimeout)
	driver.Default(&o.PublishWindow, DefaultPublishWindow)
	driver.Default(&o.PullExpiry, DefaultPullExpiry)
	driver.Default(&o.Prefetch, DefaultPrefetch)
	o.Logger = driver.Logger(o.Logger)
	return o
}

func (o Options) validate() error {
	return driver.Invalid[errorFamily](driver.First(
		driver.Check(validStreamName(o.Stream), "Stream", fmt.Sprintf("%q is not a valid stream name", o.Stream)),
		driver.Check(validSubjectPrefix(o.SubjectPrefix), "SubjectPrefix", fmt.Sprintf("%q is not a literal subject", o.SubjectPrefix)),
		driver.Between("Replicas", o.Replicas, 1, 5),
		driver.NotNegative("MaxAge", o.MaxAge),
		driver.NotNegative("DuplicateWindow", o.DuplicateWindow),
		driver.Check(o.DuplicateWindow >= o.PublishTimeout, "DuplicateWindow", "must not be shorter than PublishTimeout, within which a Send whose outcome a connection loss hid is sent again"),
		driver.Check(o.MaxAge <= 0 || o.DuplicateWindow <= o.MaxAge, "DuplicateWindow", "must not exceed MaxAge"),
		driver.AtLeast("AckWait", o.AckWait, time.Second),
		driver.Check(o.MaxDeliver >= -1, "MaxDeliver", "must be positive, or -1 for unlimited"),
		driver.Check(o.MaxAckPending >= -1, "MaxAckPending", "must be positive, or -1 for unlimited"),
		driver.NotNegative("NakDelay", o.NakDelay),
		driver.NotNegative("PublishTimeout", o.PublishTimeout),
		driver.NotNegative("PublishWindow", o.PublishWindow),
		driver.NotNegative("Prefetch", o.Prefetch),
		driver.AtLeast("PullExpiry", o.PullExpiry, time.Second),
	))
}

// Sentinel errors; the typed errors below wrap them.
var (
	// ErrInvalidOptions is wrapped by every *OptionsError.
	ErrInvalidOptions = errors.New("nats: invalid options")
	// ErrInvalidName is wrapped by every *NameError.
	ErrInvalidName = errors.New("nats: invalid name")
	// ErrNoAck is returned by Send and Publish when the stream did not
	// acknowledge the message.
	ErrNoAck = errors.New("nats: no acknowledgement from the stream")
)

// errorFamily makes the kit's typed errors NATS's.
type errorFamily struct{}

func (errorFamily) Sentinels() driver.Sentinels {
	return driver.Sentinels{Transport: "nats", InvalidOptions: ErrInvalidOptions, InvalidName: ErrInvalidName}
}

// OptionsError reports an invalid Options field or New argument: Field
// names it ("AckWait"), Reason says why. It matches ErrInvalidOptions.
type OptionsError = driver.OptionsError[errorFamily]

// NameError reports a queue or message type name the transport cannot use,
// such as an empty one: What is "queue", "event type" or "handler". It
// matches ErrInvalidName.
type NameError = driver.NameError[errorFamily]

func checkName(what, name string) error { return driver.NonEmpty[errorFamily](what, name) }
