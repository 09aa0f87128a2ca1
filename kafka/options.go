package kafka

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
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
	o.TopicPrefix = cmp.Or(o.TopicPrefix, DefaultTopicPrefix)
	o.Partitions = cmp.Or(o.Partitions, DefaultPartitions)
	o.ReplicationFactor = cmp.Or(o.ReplicationFactor, DefaultReplicationFactor)
	o.CommitInterval = cmp.Or(o.CommitInterval, DefaultCommitInterval)
	o.PublishTimeout = cmp.Or(o.PublishTimeout, DefaultPublishTimeout)
	o.RevokeWait = cmp.Or(o.RevokeWait, DefaultRevokeWait)
	o.Prefetch = cmp.Or(o.Prefetch, DefaultPrefetch)
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

func (o Options) validate() error {
	switch {
	case !validPrefix(o.TopicPrefix):
		return &OptionsError{Field: "TopicPrefix", Reason: fmt.Sprintf("%q may hold only ASCII letters, digits, '.', '_' and '-', and at most 100 of them", o.TopicPrefix)}
	case o.Partitions < 1:
		return &OptionsError{Field: "Partitions", Reason: "must be positive"}
	case o.ReplicationFactor < 1:
		return &OptionsError{Field: "ReplicationFactor", Reason: "must be positive"}
	case o.CommitInterval < 0:
		return &OptionsError{Field: "CommitInterval", Reason: "must not be negative"}
	case o.PublishTimeout < 0:
		return &OptionsError{Field: "PublishTimeout", Reason: "must not be negative"}
	case o.RevokeWait < 0:
		return &OptionsError{Field: "RevokeWait", Reason: "must not be negative"}
	case o.Prefetch < 0:
		return &OptionsError{Field: "Prefetch", Reason: "must not be negative"}
	}
	return nil
}

func validPrefix(s string) bool {
	if s == "" || len(s) > 100 || strings.HasPrefix(s, "__") {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isPlain(s[i]) && s[i] != '.' && s[i] != '_' {
			return false
		}
	}
	return true
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

// OptionsError reports an invalid Options field or constructor argument.
type OptionsError struct {
	Field  string // the Options field, e.g. "Partitions"
	Reason string
}

// Error describes the failure.
func (e *OptionsError) Error() string {
	return fmt.Sprintf("kafka: invalid options: %s: %s", e.Field, e.Reason)
}

// Unwrap returns ErrInvalidOptions.
func (e *OptionsError) Unwrap() error { return ErrInvalidOptions }

// NameError reports a queue or message type name the transport cannot use,
// such as an empty one.
type NameError struct {
	What   string // "queue", "event type" or "handler"
	Name   string
	Reason string
}

// Error describes the failure.
func (e *NameError) Error() string {
	return fmt.Sprintf("kafka: invalid %s %q: %s", e.What, e.Name, e.Reason)
}

// Unwrap returns ErrInvalidName.
func (e *NameError) Unwrap() error { return ErrInvalidName }

func checkName(what, name string) error {
	if name == "" {
		return &NameError{What: what, Name: name, Reason: "must not be empty"}
	}
	return nil
}
