package redis

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"

	goredis "github.com/redis/go-redis/v9"

	"github.com/postbus/bus"
	"github.com/postbus/bus/driver"
)

var (
	_ bus.Transport         = (*Transport)(nil)
	_ bus.TransportIdentity = (*Transport)(nil)
	_ bus.Pinger            = (*Transport)(nil)
)

// Transport carries Postbus envelopes over Redis Streams. It is safe for
// concurrent use. Create it with New.
type Transport struct {
	rdb    goredis.UniversalClient
	opts   Options
	sends  *batcher
	closed atomic.Bool
}

// New returns a transport using client, which stays the caller's: its pool,
// timeouts and retry settings apply, and closing it is the caller's job. New
// does not contact the server; Provision creates the consumer groups.
func New(client goredis.UniversalClient, opts Options) (*Transport, error) {
	if client == nil {
		return nil, &OptionsError{Field: "client", Reason: "must not be nil"}
	}
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	return &Transport{rdb: client, opts: opts, sends: &batcher{rdb: client}}, nil
}

// Identity names the key prefix: "redis:<prefix>". Scheduled rows carry it,
// so a dispatcher only sends rows scheduled through the same prefix. It
// leaves out the server address, which differs between processes that reach
// one server through different addresses; two separate Redis deployments
// whose services share one database need different Prefix values.
func (t *Transport) Identity() string { return "redis:" + t.opts.Prefix }

// Ping checks that the server answers a PING (bus.Pinger, for Bus.Health).
func (t *Transport) Ping(ctx context.Context) error { return t.rdb.Ping(ctx).Err() }

// Close marks the transport closed: later Send, Publish, Provision and
// Receive calls fail with ErrClosed. Receive calls already running are
// stopped by their own ctx. It does not close the client.
func (t *Transport) Close(context.Context) error {
	t.closed.Store(true)
	return nil
}

func (t *Transport) checkOpen() error {
	if t.closed.Load() {
		return ErrClosed
	}
	return nil
}

// streamKey is the key of the stream of queue.
func (t *Transport) streamKey(queue string) string { return t.streamPrefix() + queue }

func (t *Transport) streamPrefix() string { return t.opts.Prefix + ":q:" }

// subscribersKey is the key of the set of queues subscribed to typ.
func (t *Transport) subscribersKey(typ string) string { return t.opts.Prefix + ":sub:" + typ }

// groupName is the consumer group of queue's endpoint on its stream.
func groupName(queue string) string { return queue }

// Provision creates the stream and consumer group of top.Queue and of each
// of top.Queues (an existing group is kept as it is), and adds top.Queue to
// the subscriber set of each type in top.Events. It is idempotent and never
// removes: a subscription an endpoint dropped stays until an operator
// removes the queue from the set.
func (t *Transport) Provision(ctx context.Context, top bus.Topology) error {
	if err := t.checkOpen(); err != nil {
		return err
	}
	if err := driver.CheckTopology[errorFamily](top); err != nil {
		return err
	}
	queues := top.Queues
	if top.Queue != "" {
		queues = append([]string{top.Queue}, queues...)
	}
	for _, q := range queues {
		if err := t.ensureGroup(ctx, q); err != nil {
			return err
		}
	}
	for _, typ := range top.Events {
		if err := t.rdb.SAdd(ctx, t.subscribersKey(typ), top.Queue).Err(); err != nil {
			return fmt.Errorf("redis: subscribe %s to %s: %w", top.Queue, typ, err)
		}
	}
	return nil
}

// ensureGroup creates queue's stream and group. The group starts at the
// beginning of the stream, so messages sent before it existed are kept.
func (t *Transport) ensureGroup(ctx context.Context, queue string) error {
	err := t.rdb.XGroupCreateMkStream(ctx, t.streamKey(queue), groupName(queue), "0").Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("redis: provision %s: %w", queue, err)
	}
	return nil
}

// Send adds env to the stream of queue (XADD) and returns once Redis
// stored it. Concurrent calls share pipelines. A queue nobody provisioned yet gets its stream; its group,
// created later, starts at the beginning, so the message is kept.
func (t *Transport) Send(ctx context.Context, queue string, env *bus.Envelope) error {
	if err := t.checkOpen(); err != nil {
		return err
	}
	if err := checkName("queue", queue); err != nil {
		return err
	}
	if env == nil {
		return &NameError{What: "envelope", Name: queue, Reason: "must not be nil"}
	}
	args := &goredis.XAddArgs{
		Stream: t.streamKey(queue),
		Values: []any{fieldEnvelope, bus.MarshalEnvelope(env)},
	}
	if t.opts.MaxLen > 0 {
		args.MaxLen, args.Approx = t.opts.MaxLen, true
	}
	if err := t.sends.add(ctx, args); err != nil {
		return fmt.Errorf("redis: send %s to %s: %w", env.ID, queue, err)
	}
	return nil
}

// Publish adds env to the stream of every queue subscribed to env.Type, in
// one script, so a failure leaves no subscriber with a copy. With no
// subscriber the event goes nowhere.
func (t *Transport) Publish(ctx context.Context, env *bus.Envelope) error {
	if err := t.checkOpen(); err != nil {
		return err
	}
	if env == nil {
		return &NameError{What: "envelope", Reason: "must not be nil"}
	}
	if err := checkName("event type", env.Type); err != nil {
		return err
	}
	err := publishScript.Run(ctx, t.rdb, []string{t.subscribersKey(env.Type)},
		t.streamPrefix(), bus.MarshalEnvelope(env), t.opts.MaxLen).Err()
	if err != nil {
		return fmt.Errorf("redis: publish %s (%s): %w", env.ID, env.Type, err)
	}
	return nil
}
