package nats

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	natsio "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/postbus/bus"
	"github.com/postbus/bus/driver"
)

var (
	_ bus.Transport         = (*Transport)(nil)
	_ bus.TransportIdentity = (*Transport)(nil)
	_ bus.Pinger            = (*Transport)(nil)
)

// Transport carries Postbus envelopes over NATS JetStream. It is safe for
// concurrent use. Create it with New.
type Transport struct {
	nc     *natsio.Conn
	js     jetstream.JetStream
	opts   Options
	window chan struct{} // bounds publishes awaiting their ack

	mu          sync.Mutex
	streamReady bool
	queues      map[string]struct{} // queues known to have their consumer
}

// Identity names the stream and subject prefix: "nats:<stream>/<prefix>".
// Scheduled rows carry it, so a dispatcher only sends rows scheduled
// through the same stream. It leaves out the server address, which differs
// between processes that reach one cluster through different URLs; two
// separate NATS deployments whose services share one database need
// different Stream or SubjectPrefix names.
func (t *Transport) Identity() string {
	return "nats:" + t.opts.Stream + "/" + t.opts.SubjectPrefix
}

// Ping checks that the server answers a round trip (bus.Pinger, for
// Bus.Health).
func (t *Transport) Ping(ctx context.Context) error { return t.nc.FlushWithContext(ctx) }

// New returns a transport using nc, which stays the caller's: its reconnect
// settings apply, and closing it is the caller's job. New does not contact
// the server; Provision creates the stream and consumers.
//
// Connect nc with nats.ReconnectBufSize(-1): the transport never publishes
// while the connection is down, but a publish made in the instant it drops
// would otherwise sit in the client's reconnect buffer and reach the stream
// after its Send reported a failure. New logs a warning when nc has one.
func New(nc *natsio.Conn, opts Options) (*Transport, error) {
	if nc == nil {
		return nil, &OptionsError{Field: "nc", Reason: "connection must not be nil"}
	}
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if nc.Opts.AllowReconnect && nc.Opts.ReconnectBufSize >= 0 {
		opts.Logger.Warn("nats: the connection keeps a reconnect buffer: a publish that slips into it as the connection drops "+
			"is sent after the reconnect even if its Send already failed (a retry within DuplicateWindow is then dropped as a duplicate); "+
			"connect with nats.ReconnectBufSize(-1) to rule this out",
			"reconnect_buf_size", nc.Opts.ReconnectBufSize)
	}
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(opts.PublishWindow),
		jetstream.WithPublishAsyncTimeout(opts.PublishTimeout))
	if err != nil {
		return nil, fmt.Errorf("nats: jetstream: %w", err)
	}
	return &Transport{
		nc:     nc,
		js:     js,
		opts:   opts,
		window: make(chan struct{}, opts.PublishWindow),
		queues: map[string]struct{}{},
	}, nil
}

// Close releases the transport's publishing resources. Calls waiting for an
// acknowledgement fail. It does not close the connection.
func (t *Transport) Close() error {
	t.js.CleanupPublisher()
	return nil
}

// Provision creates the stream if it does not exist, the durable consumer of
// top.Queue filtering the queue's subject, one durable consumer per type in
// top.Events filtering the type's subject on behalf of top.Queue, and a
// consumer for each of top.Queues (kept as it is if it exists). It is
// idempotent; an existing stream is used as it is, so operators may tune its
// limits. Provision never deletes: a subscription an endpoint dropped keeps
// its consumer until an operator deletes it.
func (t *Transport) Provision(ctx context.Context, top bus.Topology) error {
	if err := driver.CheckTopology[errorFamily](top); err != nil {
		return err
	}
	if err := t.ensureStream(ctx); err != nil {
		return err
	}
	if top.Queue != "" {
		cfg := t.consumerConfig(top.Queue, consumerName(top.Queue), t.queueSubject(top.Queue))
		if _, err := t.js.CreateOrUpdateConsumer(ctx, t.opts.Stream, cfg); err != nil {
			return fmt.Errorf("nats: provision consumer %s: %w", cfg.Durable, err)
		}
		t.markQueue(top.Queue)
		for _, typ := range top.Events {
			cfg := t.consumerConfig(top.Queue, eventConsumerName(top.Queue, typ), t.eventSubject(typ))
			cfg.Description += " event " + typ
			if _, err := t.js.CreateOrUpdateConsumer(ctx, t.opts.Stream, cfg); err != nil {
				return fmt.Errorf("nats: provision consumer %s: %w", cfg.Durable, err)
			}
		}
	}
	for _, q := range top.Queues {
		if err := t.ensureQueue(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

// Send publishes env to queue and returns once the stream stored it. If no
// consumer exists for queue yet, Send creates one that filters the queue's
// subject, so the message is kept until the queue's endpoint receives it.
func (t *Transport) Send(ctx context.Context, queue string, env *bus.Envelope) error {
	return t.SendBatch(ctx, []bus.Outbound{{Queue: queue, Envelope: env}})[0]
}

// Publish publishes env on the subject of env.Type; every consumer filtering
// that subject gets a copy. With no subscriber the stream drops the event.
func (t *Transport) Publish(ctx context.Context, env *bus.Envelope) error {
	return t.SendBatch(ctx, []bus.Outbound{{Publish: true, Envelope: env}})[0]
}

// ensureStream creates the stream once per transport.
func (t *Transport) ensureStream(ctx context.Context) error {
	t.mu.Lock()
	ready := t.streamReady
	t.mu.Unlock()
	if ready {
		return nil
	}
	s, err := t.js.Stream(ctx, t.opts.Stream)
	if err == nil {
		t.checkDuplicateWindow(s.CachedInfo().Config.Duplicates)
	}
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		_, err = t.js.CreateStream(ctx, t.streamConfig())
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			_, err = t.js.Stream(ctx, t.opts.Stream) // created meanwhile elsewhere
		}
	}
	if err != nil {
		return fmt.Errorf("nats: provision stream %s: %w", t.opts.Stream, err)
	}
	t.mu.Lock()
	t.streamReady = true
	t.mu.Unlock()
	return nil
}

// checkDuplicateWindow warns when an existing stream forgets message IDs
// sooner than Options.DuplicateWindow, which the de-duplication of retried
// sends relies on.
func (t *Transport) checkDuplicateWindow(window time.Duration) {
	if window < t.opts.DuplicateWindow {
		t.opts.Logger.Warn("nats: the stream's duplicate window is shorter than Options.DuplicateWindow; "+
			"a send retried after it may be stored twice",
			"stream", t.opts.Stream, "duplicate_window", window, "want", t.opts.DuplicateWindow)
	}
}

func (t *Transport) streamConfig() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        t.opts.Stream,
		Description: "Postbus queues and events",
		Subjects:    []string{t.opts.SubjectPrefix + ".q.*", t.opts.SubjectPrefix + ".e.*"},
		Retention:   jetstream.InterestPolicy,
		Storage:     t.opts.Storage,
		Replicas:    t.opts.Replicas,
		MaxAge:      t.opts.MaxAge,
		Duplicates:  t.opts.DuplicateWindow,
		MaxMsgs:     -1,
		MaxBytes:    -1,
		Discard:     jetstream.DiscardOld,
	}
}

func (t *Transport) consumerConfig(queue, name, subject string) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Name:          name,
		Durable:       name,
		Description:   "Postbus queue " + queue,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       t.opts.AckWait,
		MaxDeliver:    t.opts.MaxDeliver,
		MaxAckPending: t.opts.MaxAckPending,
		FilterSubject: subject,
	}
}

func (t *Transport) markQueue(queue string) {
	t.mu.Lock()
	t.queues[queue] = struct{}{}
	t.mu.Unlock()
}

// ensureQueue makes sure queue's consumer exists, creating it with the
// queue's subject only when missing (an existing one, with its event
// subscriptions, is left alone). Successful checks are remembered.
func (t *Transport) ensureQueue(ctx context.Context, queue string) error {
	t.mu.Lock()
	_, known := t.queues[queue]
	t.mu.Unlock()
	if known {
		return nil
	}
	if err := t.ensureStream(ctx); err != nil {
		return err
	}
	cfg := t.consumerConfig(queue, consumerName(queue), t.queueSubject(queue))
	_, err := t.js.Consumer(ctx, t.opts.Stream, cfg.Durable)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		_, err = t.js.CreateConsumer(ctx, t.opts.Stream, cfg)
		if errors.Is(err, jetstream.ErrConsumerExists) {
			err = nil // created meanwhile
		}
	}
	if err != nil {
		return fmt.Errorf("nats: provision consumer %s: %w", cfg.Durable, err)
	}
	t.markQueue(queue)
	return nil
}
