package kafka

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/postbus/bus/driver"
)

// Defaults used for zero Options fields.
const (
	DefaultTopicPrefix       = "postbus"
	DefaultPartitions        = 8
	DefaultReplicationFactor = 1
	DefaultCommitInterval    = 500 * time.Millisecond
	DefaultPublishTimeout    = 30 * time.Second
	DefaultRevokeWait        = 10 * time.Second
	DefaultPrefetch          = 256
)

// Options configure a Transport. Every zero value means the documented
// default, so Options{} is a working configuration against a broker that
// needs neither TLS nor SASL.
type Options struct {
	// TopicPrefix starts every topic and consumer group name the transport
	// uses: <prefix>.q.<queue> for a queue, <prefix>.e.<type> for an event
	// type, and the group <prefix>.g.<queue>. Endpoints that talk to each
	// other must use the same prefix. Default DefaultTopicPrefix ("postbus").
	TopicPrefix string
	// Partitions is the partition count of the topics Provision creates.
	// Partitions bound how many processes of one endpoint share its work;
	// within a process, messages of different keys run concurrently even
	// on one partition. Existing topics keep theirs. Default 8.
	Partitions int
	// ReplicationFactor of the topics Provision creates. Default 1; use 3
	// on a production cluster.
	ReplicationFactor int
	// TopicConfigs are extra topic configurations for the topics Provision
	// creates, such as "retention.ms" or "min.insync.replicas". Default none:
	// the broker's defaults apply.
	TopicConfigs map[string]string
	// CommitInterval is how often each Receive commits the offsets of the
	// messages it settled. A crash loses at most this much progress: those
	// messages are delivered again. Default 500ms.
	CommitInterval time.Duration
	// PublishTimeout fails a Send or Publish the brokers did not
	// acknowledge in this time, even if its context has no deadline.
	// Default 30s.
	PublishTimeout time.Duration
	// RevokeWait bounds how long a partition revocation waits for the
	// handlers of that partition, whose contexts it cancelled, to return
	// before it commits what was settled and gives the partition up.
	// Default 10s.
	RevokeWait time.Duration
	// Prefetch bounds the records each Receive holds that were fetched but
	// not settled (never fewer than ReceiveOptions.Concurrency). Default 256.
	Prefetch int
	// ClientOptions are passed to every franz-go client the transport
	// creates (the producer, the admin client and each consumer), after the
	// transport's own: TLS (kgo.DialTLSConfig), SASL (kgo.SASL), a client ID,
	// logging or hooks. Default none.
	ClientOptions []kgo.Opt
	// ConsumerOptions are passed to the consumer clients only, after
	// ClientOptions: group timings (kgo.SessionTimeout,
	// kgo.HeartbeatInterval, kgo.RebalanceTimeout), fetch sizes, a rack.
	// Options that would change the transport's commit model (auto commit,
	// the consumed topics, the group) are overridden. Default none.
	ConsumerOptions []kgo.Opt
	// Logger receives the transport's logs. Default slog.Default().
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	driver.Default(&o.TopicPrefix, DefaultTopicPrefix)
	driver.Default(&o.Partitions, DefaultPartitions)
	driver.Default(&o.ReplicationFactor, DefaultReplicationFactor)
	driver.Default(&o.CommitInterval, DefaultCommitInterval)
	driver.Default(&o.PublishTimeout, DefaultPublishTimeout)
	driver.Default(&o.RevokeWait, DefaultRevokeWait)
	driver.Default(&o.Prefetch, DefaultPrefetch)
	o.Logger = driver.Logger(o.Logger)
	return o
}

func (o Options) validate() error {
	p := driver.First(
		driver.Check(validPrefix(o.TopicPrefix), "TopicPrefix", fmt.Sprintf("%q may hold only ASCII letters, digits, '.', '_' and '-', and at most 100 of them", o.TopicPrefix)),
		driver.Positive("Partitions", o.Partitions),
		driver.Positive("ReplicationFactor", o.ReplicationFactor),
		driver.NotNegative("CommitInterval", o.CommitInterval),
		driver.NotNegative("PublishTimeout", o.PublishTimeout),
		driver.NotNegative("RevokeWait", o.RevokeWait),
		driver.NotNegative("Prefetch", o.Prefetch),
	)
	return driver.Invalid[errorFamily](p)
}

func validPrefix(s string) bool {
	return s != "" && len(s) <= 100 && !strings.HasPrefix(s, "__") &&
		driver.Valid(s, func(c byte) bool { return driver.TokenByte(c) || c == '.' || c == '_' })
}

// Sentinel errors; the typed errors below wrap them.
var (
	// ErrInvalidOptions is wrapped by every *OptionsError.
	ErrInvalidOptions = errors.New("kafka: invalid options")
	// ErrInvalidName is wrapped by every *NameError.
	ErrInvalidName = errors.New("kafka: invalid name")
	// ErrClosed is returned by calls on a closed Transport.
	ErrClosed = errors.New("kafka: transport closed")
)

// errorFamily makes the kit's typed errors Kafka's.
type errorFamily struct{}

func (errorFamily) Sentinels() driver.Sentinels {
	return driver.Sentinels{Transport: "kafka", InvalidOptions: ErrInvalidOptions, InvalidName: ErrInvalidName}
}

// OptionsError reports an invalid Options field or constructor argument:
// Field names it ("Partitions"), Reason says why. It matches
// ErrInvalidOptions.
type OptionsError = driver.OptionsError[errorFamily]

// NameError reports a queue or message type name the transport cannot use,
// such as an empty one: What is "queue", "event type" or "handler". It
// matches ErrInvalidName.
type NameError = driver.NameError[errorFamily]

func checkName(what, name string) error { return driver.NonEmpty[errorFamily](what, name) }
