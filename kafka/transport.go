package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/postbus/bus"
)

var (
	_ bus.Transport         = (*Transport)(nil)
	_ bus.TransportIdentity = (*Transport)(nil)
	_ bus.Pinger            = (*Transport)(nil)
)

// defaultMaxBatchBytes is the largest record batch the producer sends,
// Kafka's default message.max.bytes; raise both (the topic's
// max.message.bytes through Options.TopicConfigs, the producer's through
// kgo.ProducerBatchMaxBytes in Options.ClientOptions) for larger messages.
const defaultMaxBatchBytes = 1_048_588

// Transport carries Postbus envelopes over Kafka. It is safe for concurrent
// use. Create it with New and release it with Close.
type Transport struct {
	seeds []string
	opts  Options
	cl    *kgo.Client // producer and admin requests
	adm   *kadm.Client

	mu     sync.Mutex
	closed bool
	topics map[string]struct{}            // topics known to exist
	subs   map[string]map[string]struct{} // queue -> event types provisioned here
}

// New returns a transport for the cluster reached through seeds (host:port
// addresses of one or more brokers). It owns its franz-go clients: one for
// producing and administration, created here, and one per Receive call.
// New does not contact the cluster; Provision creates the topics.
func New(seeds []string, opts Options) (*Transport, error) {
	if len(seeds) == 0 || slices.Contains(seeds, "") {
		return nil, &OptionsError{Field: "seeds", Reason: "at least one broker address is needed, and none may be empty"}
	}
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	t := &Transport{
		seeds:  slices.Clone(seeds),
		opts:   opts,
		topics: map[string]struct{}{},
		subs:   map[string]map[string]struct{}{},
	}
	cl, err := kgo.NewClient(t.clientOpts(
		kgo.RecordDeliveryTimeout(opts.PublishTimeout),
		kgo.ProducerLinger(0),
		kgo.RecordPartitioner(newPartitioner()),
		// The brokers' default message.max.bytes (1 MiB and 12 bytes):
		// kgo's own default is about 46 KiB lower.
		kgo.ProducerBatchMaxBytes(defaultMaxBatchBytes),
	)...)
	if err != nil {
		return nil, &OptionsError{Field: "ClientOptions", Reason: err.Error()}
	}
	t.cl, t.adm = cl, kadm.NewClient(cl)
	return t, nil
}

// clientOpts returns the options of a new client: the seeds, extra, then
// Options.ClientOptions.
func (t *Transport) clientOpts(extra ...kgo.Opt) []kgo.Opt {
	o := append([]kgo.Opt{kgo.SeedBrokers(t.seeds...)}, extra...)
	return append(o, t.opts.ClientOptions...)
}

// Identity names the topic prefix: "kafka:<prefix>". Scheduled rows carry
// it, so a dispatcher only sends rows scheduled through the same prefix. It
// leaves out the broker addresses, which differ between processes that
// reach one cluster through different listeners; two separate Kafka
// clusters whose services share one database need different TopicPrefix
// values.
func (t *Transport) Identity() string { return "kafka:" + t.opts.TopicPrefix }

// Ping checks that a broker of the cluster answers (bus.Pinger, for
// Bus.Health).
func (t *Transport) Ping(ctx context.Context) error { return t.cl.Ping(ctx) }

// Close flushes nothing and closes the producing client: calls waiting for
// an acknowledgement fail. Receive calls in progress keep their own
// clients until their ctx ends. Close is idempotent; ctx is unused but
// kept for symmetry with the other drivers.
func (t *Transport) Close(_ context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.closed {
		t.closed = true
		t.cl.Close()
	}
	return nil
}

func (t *Transport) checkOpen() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return ErrClosed
	}
	return nil
}

// Provision creates the topic of top.Queue, one topic per type in
// top.Events and one for each of top.Queues, with Options.Partitions,
// ReplicationFactor and TopicConfigs; existing topics are kept as they
// are. For each event type it records the subscription of top.Queue's
// consumer group: when the group has no offsets on the type's topic yet,
// Provision commits the topic's end offsets for it, so the endpoint
// receives the events published from now on and not the topic's history.
// It is idempotent.
func (t *Transport) Provision(ctx context.Context, top bus.Topology) error {
	if err := t.checkOpen(); err != nil {
		return err
	}
	if top.Queue == "" && len(top.Events) > 0 {
		return &NameError{What: "queue", Reason: "events need a queue to be delivered to"}
	}
	var topics, eventTopics []string
	if top.Queue != "" {
		topics = append(topics, t.queueTopic(top.Queue))
	}
	for _, q := range top.Queues {
		if err := checkName("queue", q); err != nil {
			return err
		}
		topics = append(topics, t.queueTopic(q))
	}
	for _, typ := range top.Events {
		if err := checkName("event type", typ); err != nil {
			return err
		}
		eventTopics = append(eventTopics, t.eventTopic(typ))
	}
	if err := t.ensureTopics(ctx, append(topics, eventTopics...)...); err != nil {
		return err
	}
	if len(eventTopics) == 0 {
		return nil
	}
	t.mu.Lock()
	if t.subs[top.Queue] == nil {
		t.subs[top.Queue] = map[string]struct{}{}
	}
	for _, typ := range top.Events {
		t.subs[top.Queue][typ] = struct{}{}
	}
	t.mu.Unlock()
	return t.markSubscriptions(ctx, t.groupName(top.Queue), eventTopics)
}

// markSubscriptions commits the end offsets of the topics on which group
// has no offsets. A group with members may refuse the commit; the new
// subscription is then read from the topic's start when the group first
// consumes it, and a warning says so.
func (t *Transport) markSubscriptions(ctx context.Context, group string, topics []string) error {
	committed, err := t.adm.FetchOffsetsForTopics(ctx, group, topics...)
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		return fmt.Errorf("kafka: provision: offsets of group %s: %w", group, err)
	}
	var fresh []string
	for _, topic := range topics {
		has := false
		committed.Each(func(o kadm.OffsetResponse) {
			if o.Topic == topic && o.Err == nil && o.At >= 0 {
				has = true
			}
		})
		if !has {
			fresh = append(fresh, topic)
		}
	}
	if len(fresh) == 0 {
		return nil
	}
	ends, err := t.adm.ListEndOffsets(ctx, fresh...)
	if err != nil {
		return fmt.Errorf("kafka: provision: end offsets: %w", err)
	}
	if err := ends.Error(); err != nil {
		return fmt.Errorf("kafka: provision: end offsets: %w", err)
	}
	resp, err := t.adm.CommitOffsets(ctx, group, ends.Offsets())
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.opts.Logger.Warn("kafka: could not record the start of a new event subscription; "+
			"the group reads the event topic from its start",
			"group", group, "topics", fresh, "error", err)
	}
	return nil
}

// ensureTopics creates the topics not yet known to exist.
func (t *Transport) ensureTopics(ctx context.Context, topics ...string) error {
	t.mu.Lock()
	var missing []string
	for _, topic := range topics {
		if _, ok := t.topics[topic]; !ok && !slices.Contains(missing, topic) {
			missing = append(missing, topic)
		}
	}
	t.mu.Unlock()
	if len(missing) == 0 {
		return nil
	}
	configs := make(map[string]*string, len(t.opts.TopicConfigs))
	for k, v := range t.opts.TopicConfigs {
		configs[k] = &v
	}
	resp, err := t.adm.CreateTopics(ctx, int32(t.opts.Partitions), int16(t.opts.ReplicationFactor), configs, missing...)
	if err != nil {
		return fmt.Errorf("kafka: create topics: %w", err)
	}
	var errs []error
	for _, topic := range missing {
		r, ok := resp[topic]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("topic %s: no answer", topic))
		case r.Err != nil && !errors.Is(r.Err, kerr.TopicAlreadyExists):
			errs = append(errs, fmt.Errorf("topic %s: %w", topic, r.Err))
		default:
			t.mu.Lock()
			t.topics[topic] = struct{}{}
			t.mu.Unlock()
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("kafka: create topics: %w", errors.Join(errs...))
	}
	return nil
}

// Send produces env to the topic of queue and returns once the brokers
// acknowledged it (all in-sync replicas, idempotent producer). If the
// topic does not exist yet, Send creates it, so the message is kept until
// the queue's endpoint receives it. env.OrderingKey is the record key.
func (t *Transport) Send(ctx context.Context, queue string, env *bus.Envelope) error {
	if err := checkName("queue", queue); err != nil {
		return err
	}
	if err := t.checkOpen(); err != nil {
		return err
	}
	topic := t.queueTopic(queue)
	if err := t.ensureTopics(ctx, topic); err != nil {
		return err
	}
	return t.produce(ctx, encodeRecord(topic, env))
}

// Publish produces env to the topic of env.Type, which every endpoint
// subscribed to the type consumes with its own group. When no endpoint
// ever subscribed, the topic does not exist and the event goes nowhere:
// Publish then returns nil. Each such Publish asks the cluster whether the
// topic exists meanwhile.
func (t *Transport) Publish(ctx context.Context, env *bus.Envelope) error {
	if err := checkName("event type", env.Type); err != nil {
		return err
	}
	if err := t.checkOpen(); err != nil {
		return err
	}
	topic := t.eventTopic(env.Type)
	ok, err := t.topicExists(ctx, topic)
	if err != nil || !ok {
		return err
	}
	return t.produce(ctx, encodeRecord(topic, env))
}

func (t *Transport) topicExists(ctx context.Context, topic string) (bool, error) {
	t.mu.Lock()
	_, known := t.topics[topic]
	t.mu.Unlock()
	if known {
		return true, nil
	}
	details, err := t.adm.ListTopics(ctx, topic)
	if err != nil {
		return false, fmt.Errorf("kafka: look up topic %s: %w", topic, err)
	}
	d, ok := details[topic]
	if !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
		return false, nil
	}
	if d.Err != nil {
		return false, fmt.Errorf("kafka: look up topic %s: %w", topic, d.Err)
	}
	t.mu.Lock()
	t.topics[topic] = struct{}{}
	t.mu.Unlock()
	return true, nil
}

func (t *Transport) produce(ctx context.Context, r *kgo.Record) error {
	if err := t.cl.ProduceSync(ctx, r).FirstErr(); err != nil {
		err = fmt.Errorf("kafka: produce to %s: %w", r.Topic, err)
		if tooLarge(err) {
			return bus.Permanent(err) // sending it again cannot help
		}
		return err
	}
	return nil
}

// tooLarge reports whether err is a record refused for its size, by the
// producer (over ProducerBatchMaxBytes) or by a broker (over the topic's
// max.message.bytes).
func tooLarge(err error) bool {
	return errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge)
}

// eventTypesOf returns the event topics queue's group consumes: those
// Provision subscribed here, and those the group has offsets on (recorded
// by a Provision in any process).
func (t *Transport) eventTopicsOf(ctx context.Context, queue string) ([]string, error) {
	set := map[string]struct{}{}
	t.mu.Lock()
	for typ := range t.subs[queue] {
		set[t.eventTopic(typ)] = struct{}{}
	}
	t.mu.Unlock()
	committed, err := t.adm.FetchOffsets(ctx, t.groupName(queue))
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		return nil, fmt.Errorf("offsets of group %s: %w", t.groupName(queue), err)
	}
	prefix := t.opts.TopicPrefix + ".e."
	committed.Each(func(o kadm.OffsetResponse) {
		if strings.HasPrefix(o.Topic, prefix) {
			set[o.Topic] = struct{}{}
		}
	})
	out := make([]string, 0, len(set))
	for topic := range set {
		out = append(out, topic)
	}
	slices.Sort(out)
	return out, nil
}
