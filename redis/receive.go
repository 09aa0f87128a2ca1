package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/postbus/bus"
	"github.com/postbus/bus/driver"
)

// Log keys.
const (
	logEntry = "entry_id"
)

// Bounds of the pause between attempts after a failed read.
const (
	minRetryDelay = 50 * time.Millisecond
	maxRetryDelay = 2 * time.Second
	renewBatch    = 500
	ackGather     = 500 * time.Microsecond
)

// Receive reads the queue's stream in its consumer group, as a consumer of
// its own, and calls h for each message, with at most opts.Concurrency calls
// at once and Options.Prefetch more messages read ahead. Processes receiving
// the same queue compete for its messages.
//
// A message whose handler returned nil is acknowledged and deleted from the
// stream (XACK and XDEL, batched). One whose handler failed is handed back:
// added again at the end of the stream and the original acknowledged, in
// one script, so it is delivered again at once, to this or another
// consumer. While a message is in hand its claim is renewed every Lease/3;
// a message another consumer took over meanwhile (this one was cut off for
// longer than Lease) has its delivery ctx cancelled and is neither handed
// back nor retried here. Every ClaimInterval, Receive takes over messages
// idle for longer than Lease (XAUTOCLAIM): those of consumers that died.
//
// Reads resume by themselves after a connection loss. When ctx ends,
// Receive stops reading (within Options.Block), hands the messages it had
// not started back to the stream, waits for the handlers in flight, settles
// their messages, removes its consumer from the group if it holds nothing,
// and returns nil. It returns an error only when the group cannot be
// created at the start, or the client is closed.
func (t *Transport) Receive(ctx context.Context, queue string, opts bus.ReceiveOptions, h bus.DeliveryHandler) error {
	if err := t.checkOpen(); err != nil {
		return err
	}
	if err := driver.CheckReceive[errorFamily](queue, h); err != nil {
		return err
	}
	if err := t.ensureGroup(ctx, queue); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("redis: receive %s: %w", queue, err)
	}
	conc := max(opts.Concurrency, 1)
	hold := conc + t.opts.Prefetch
	r := &receiver{
		t:        t,
		queue:    queue,
		key:      t.streamKey(queue),
		group:    groupName(queue),
		consumer: consumerName(),
		h:        h,
		hctx:     context.WithoutCancel(ctx),
		stop:     ctx,
		held:     make(map[string]*delivery, hold),
	}
	r.log = t.opts.Logger.With(driver.LogQueue, queue, driver.LogConsumer, r.consumer)
	// Messages in hand are started in stream order by Concurrency workers
	// (driver.Pool); those not started when Receive stops are handed back.
	pool, err := driver.NewPool(driver.PoolOptions[*delivery]{
		Concurrency: conc,
		Prefetch:    t.opts.Prefetch,
		Handle:      r.handle,
		Unstarted:   func(d *delivery) { r.giveBack(d, "not started before Receive stopped") },
	})
	if err != nil {
		return fmt.Errorf("redis: receive %s: %w", queue, err)
	}
	r.pool = pool
	// Acknowledgements are gathered for ackGather and sent in batches.
	acks, err := driver.NewBatcher(driver.BatcherOptions[string]{
		Max: DefaultSettleBatch, Linger: ackGather, Buffer: hold, Flush: r.ack,
	})
	if err != nil {
		pool.Close()
		return fmt.Errorf("redis: receive %s: %w", queue, err)
	}
	r.acks = acks

	renewCtx, stopRenew := context.WithCancel(r.hctx)
	var renew, claim sync.WaitGroup
	renew.Go(func() { r.renewLoop(renewCtx) })
	claimCtx, stopClaim := context.WithCancel(ctx)
	defer stopClaim()
	claim.Go(func() { r.claimLoop(claimCtx) })

	readErr := r.readLoop(ctx)
	stopClaim()
	claim.Wait()
	pool.Close() // hands back what the busy workers have not started
	stopRenew()
	renew.Wait()
	acks.Close()
	r.retire()
	if readErr != nil {
		return fmt.Errorf("redis: receive %s: %w", queue, readErr)
	}
	return nil
}

// consumerName returns a consumer name unique to this Receive call: host,
// process and a random suffix.
func consumerName() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", cmpOr(host, "host"), os.Getpid(), hex.EncodeToString(b[:]))
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// delivery is one message in this consumer's hands.
type delivery struct {
	id     string
	env    *bus.Envelope
	ctx    context.Context // the delivery ctx: cancelled when the message is lost
	cancel context.CancelFunc
	lost   atomic.Bool // another consumer took the message over
}

type receiver struct {
	t        *Transport
	queue    string
	key      string
	group    string
	consumer string
	h        bus.DeliveryHandler
	hctx     context.Context // outlives Receive's ctx: settling
	stop     context.Context // Receive's ctx
	log      *slog.Logger

	pool *driver.Pool[*delivery] // one slot per message in hand (Concurrency + Prefetch)
	acks *driver.Batcher[string] // entry IDs to acknowledge

	mu   sync.Mutex
	held map[string]*delivery
}

// readLoop reads new messages until ctx ends. It returns an error only
// when the client was closed.
func (r *receiver) readLoop(ctx context.Context) error {
	delay := minRetryDelay
	for ctx.Err() == nil {
		n := r.pool.Acquire(ctx, r.pool.Capacity())
		if n == 0 {
			return nil
		}
		// The read runs on a ctx that outlives Receive's: a read cut short
		// by the client after the server handed out messages would leave
		// them in this consumer's hands until their lease ran out.
		res, err := r.t.rdb.XReadGroup(r.hctx, &goredis.XReadGroupArgs{
			Group: r.group, Consumer: r.consumer, Streams: []string{r.key, ">"},
			Count: int64(n), Block: r.t.opts.Block,
		}).Result()
		if errors.Is(err, goredis.Nil) {
			r.pool.Release(n)
			continue
		}
		if err != nil {
			r.pool.Release(n)
			if errors.Is(err, goredis.ErrClosed) {
				return err
			}
			r.log.Warn("redis: read failed; retrying", driver.LogError, err, "retry_in", delay)
			if isNoGroup(err) {
				_ = r.t.ensureGroup(r.hctx, r.queue)
			}
			if !driver.Sleep(ctx, delay) {
				return nil
			}
			delay = min(delay*2, maxRetryDelay)
			continue
		}
		delay = minRetryDelay
		got := 0
		for _, s := range res {
			for _, m := range s.Messages {
				if got == n { // never more than asked; kept in hand by the lease
					r.log.Warn("redis: read returned more messages than asked", logEntry, m.ID)
					continue
				}
				got++
				r.dispatch(m)
			}
		}
		r.pool.Release(n - got)
	}
	return nil
}

// claimLoop takes over messages idle for longer than the lease, every
// ClaimInterval, until ctx ends.
func (r *receiver) claimLoop(ctx context.Context) {
	for {
		r.claimIdle(ctx)
		if !driver.Sleep(ctx, r.t.opts.ClaimInterval) {
			return
		}
	}
}

func (r *receiver) claimIdle(ctx context.Context) {
	start := "0-0"
	for ctx.Err() == nil {
		n := r.pool.Acquire(ctx, r.t.opts.ClaimBatch)
		if n == 0 {
			return
		}
		msgs, next, err := r.t.rdb.XAutoClaim(r.hctx, &goredis.XAutoClaimArgs{
			Stream: r.key, Group: r.group, Consumer: r.consumer,
			MinIdle: r.t.opts.Lease, Start: start, Count: int64(n),
		}).Result()
		if err != nil {
			r.pool.Release(n)
			if !errors.Is(err, goredis.Nil) {
				r.log.Warn("redis: taking over idle messages failed", driver.LogError, err)
			}
			return
		}
		got := 0
		for _, m := range msgs {
			if got == n {
				continue
			}
			got++
			r.log.Info("redis: took over a message idle for longer than the lease", logEntry, m.ID)
			r.dispatch(m)
		}
		r.pool.Release(n - got)
		if next == "0-0" || next == "" {
			return
		}
		start = next
	}
}

// dispatch queues m, which holds one slot, for the workers. Messages
// are started in the order they were read: a consumer with Concurrency 1
// handles its stream in order.
func (r *receiver) dispatch(m goredis.XMessage) {
	r.mu.Lock()
	if _, dup := r.held[m.ID]; dup { // taken over from ourselves
		r.mu.Unlock()
		r.pool.Release(1)
		return
	}
	dctx, cancel := context.WithCancel(r.hctx)
	d := &delivery{id: m.ID, env: decode(m), ctx: dctx, cancel: cancel}
	r.held[m.ID] = d
	r.mu.Unlock()
	r.pool.Put(d)
}

// handle runs the handler on one message in hand and settles it. Once
// Receive is stopping, a message not started yet is handed back instead.
func (r *receiver) handle(d *delivery) {
	if r.stop.Err() != nil {
		r.giveBack(d, "not started before Receive stopped")
		return
	}
	defer r.forget(d)
	defer d.cancel()
	if err := r.h(d.ctx, d.env); err != nil {
		if d.lost.Load() {
			return // another consumer has it
		}
		r.requeue(d, "handler failed")
		return
	}
	r.acks.Add(d.id)
}

// giveBack hands an unstarted message back to the stream.
func (r *receiver) giveBack(d *delivery, why string) {
	defer r.forget(d)
	defer d.cancel()
	r.requeue(d, why)
}

func (r *receiver) forget(d *delivery) {
	r.mu.Lock()
	delete(r.held, d.id)
	r.mu.Unlock()
}

// decode rebuilds the envelope of a stream entry. An entry it cannot read
// still yields an envelope: the raw bytes, the entry ID as the message ID,
// and bus.HeaderDecodeError saying what was wrong. An entry without the
// envelope field keeps its fields as headers, so the error queue shows
// what arrived.
func decode(m goredis.XMessage) *bus.Envelope {
	raw, ok := m.Values[fieldEnvelope].(string)
	if !ok {
		env := &bus.Envelope{ID: m.ID, Headers: make(map[string]string, len(m.Values)+1)}
		for k, v := range m.Values {
			if k != fieldRequeues {
				env.Headers[k] = fmt.Sprint(v)
			}
		}
		env.SetHeader(bus.HeaderDecodeError, "redis: stream entry without an envelope field "+fieldEnvelope)
		return env
	}
	env, err := bus.UnmarshalEnvelope([]byte(raw))
	if err != nil {
		return &bus.Envelope{ID: m.ID, Body: []byte(raw), Headers: map[string]string{bus.HeaderDecodeError: "redis: " + err.Error()}}
	}
	return env
}

// requeue hands d back to the stream, if this consumer still owns it.
func (r *receiver) requeue(d *delivery, why string) {
	ctx, cancel := context.WithTimeout(r.hctx, defaultShutdownWait)
	defer cancel()
	err := requeueScript.Run(ctx, r.t.rdb, []string{r.key}, r.group, r.consumer, r.t.opts.MaxLen, d.id).Err()
	if err != nil {
		r.log.Warn("redis: handing a message back failed; it is taken over after the lease", "reason", why,
			driver.LogMessageID, d.env.ID, logEntry, d.id, driver.LogError, err)
	}
}

// ack acknowledges and deletes handled messages. A failed try (a
// connection cut) is tried again, with backoff, for two thirds of a lease:
// a message is renewed every Lease/3 while it is in hand, and no other
// consumer takes it over before it was idle for Lease. Without the retry a
// lost XACK would have another consumer handle the message again. A late
// try for a message another consumer took over meanwhile changes nothing
// that matters: that consumer has the message already.
func (r *receiver) ack(ids []string) {
	until := time.Now().Add(r.t.opts.Lease * 2 / 3)
	err := driver.Retry(r.hctx, until, minRetryDelay, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, defaultShutdownWait)
		defer cancel()
		_, err := r.t.rdb.TxPipelined(ctx, func(p goredis.Pipeliner) error {
			p.XAck(ctx, r.key, r.group, ids...)
			p.XDel(ctx, r.key, ids...)
			return nil
		})
		return err
	})
	if err != nil {
		r.log.Warn("redis: acknowledging handled messages failed; they are delivered again after the lease",
			"count", len(ids), driver.LogError, err)
	}
}

// renewLoop renews the claim on every message in hand every Lease/3 until
// ctx ends, and cancels the delivery of those another consumer took over.
func (r *receiver) renewLoop(ctx context.Context) {
	for driver.Sleep(ctx, r.t.opts.Lease/3) {
		r.mu.Lock()
		ids := make([]string, 0, len(r.held))
		for id, d := range r.held {
			if !d.lost.Load() {
				ids = append(ids, id)
			}
		}
		r.mu.Unlock()
		for len(ids) > 0 {
			chunk := ids[:min(len(ids), renewBatch)]
			ids = ids[len(chunk):]
			args := make([]any, 0, 2+len(chunk))
			args = append(args, r.group, r.consumer)
			for _, id := range chunk {
				args = append(args, id)
			}
			lost, err := renewScript.Run(ctx, r.t.rdb, []string{r.key}, args...).StringSlice()
			if err != nil {
				if ctx.Err() == nil {
					r.log.Warn("redis: renewing the claim on messages in hand failed", driver.LogError, err)
				}
				continue
			}
			r.markLost(lost)
		}
	}
}

func (r *receiver) markLost(ids []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range ids {
		if d, ok := r.held[id]; ok && !d.lost.Swap(true) {
			r.log.Warn("redis: another consumer took over a message in hand; its handling is cancelled",
				driver.LogMessageID, d.env.ID, logEntry, id)
			d.cancel()
		}
	}
}

// retire removes this consumer from the group when it holds no message.
func (r *receiver) retire() {
	ctx, cancel := context.WithTimeout(r.hctx, defaultShutdownWait)
	defer cancel()
	if err := retireScript.Run(ctx, r.t.rdb, []string{r.key}, r.group, r.consumer).Err(); err != nil && !isNoGroup(err) {
		r.log.Debug("redis: removing the consumer from its group", driver.LogError, err)
	}
}

func isNoGroup(err error) bool {
	return err != nil && strings.Contains(err.Error(), "NOGROUP")
}
