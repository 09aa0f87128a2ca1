package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/postbus/bus"
	"github.com/postbus/bus/driver"
)

// Log keys.
const (
	logTopic     = "topic"
	logPartition = "partition"
)

const (
	// redeliverDelay is the pause before a message whose handler returned
	// an error is handled again in place (the core returns an error only
	// when it could neither retry the message through the store nor move
	// it to the error queue, and has already waited a backoff of its own).
	redeliverDelay = 100 * time.Millisecond
	// fetchErrorPause is the pause after a poll that returned only errors.
	fetchErrorPause = 500 * time.Millisecond
	// finalCommitTimeout bounds the commit Receive makes as it stops.
	finalCommitTimeout = 10 * time.Second
)

// Receive joins the queue's consumer group (one group per queue; every
// process receiving the queue is a member) and consumes the queue's topic
// and the event topics the queue subscribes to, calling h for each record
// with at most opts.Concurrency calls at once.
//
// Ordering and concurrency: records of one partition with the same key
// (Envelope.OrderingKey) are handled one after another in offset order;
// records with different keys, and records without a key, are handled
// concurrently, even within one partition.
//
// Acknowledgement: a record is settled when h returns nil. Offsets are
// committed every Options.CommitInterval, only up to the first record of
// the partition that is not settled, so a crash redelivers what was not
// settled and nothing past it. Kafka cannot redeliver one record, and the
// core concludes a failed message itself (its delayed retries through the
// store, or the error queue); h returns an error only when that was not
// possible (the store and the error topic unreachable): the record is then
// handled again in place after a pause, holding back its key and the
// partition's commits, but not the partition's other keys.
//
// Rebalance: when a partition is revoked or lost, the contexts of its
// handlers are cancelled, Receive waits up to Options.RevokeWait for them,
// commits what was settled (not on loss) and lets the partition go; its
// records not yet handled go to the new owner.
//
// When ctx ends, Receive stops fetching, drops the records it had not
// started, waits for the handlers in flight, commits, leaves the group and
// returns nil. It returns an error only when it cannot consume at all.
func (t *Transport) Receive(ctx context.Context, queue string, opts bus.ReceiveOptions, h bus.DeliveryHandler) error {
	if err := checkName("queue", queue); err != nil {
		return err
	}
	if h == nil {
		return &NameError{What: "handler", Name: queue, Reason: "must not be nil"}
	}
	if err := t.checkOpen(); err != nil {
		return err
	}
	queueTopic := t.queueTopic(queue)
	if err := t.ensureTopics(ctx, queueTopic); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("kafka: receive %s: %w", queue, err)
	}
	events, err := t.eventTopicsOf(ctx, queue)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("kafka: receive %s: %w", queue, err)
	}
	conc := max(opts.Concurrency, 1)
	r := &receiver{
		t:        t,
		h:        h,
		base:     context.WithoutCancel(ctx),
		log:      t.opts.Logger.With(driver.LogQueue, queue),
		stopping: make(chan struct{}),
		parts:    map[topicPartition]*partition{},
	}
	// The pool holds at most Prefetch records fetched and not settled; a
	// record of a key starts once the one before it was handled.
	pool, err := driver.NewPool(driver.PoolOptions[*entry]{
		Concurrency: conc,
		Prefetch:    max(t.opts.Prefetch, conc) - conc,
		Handle:      r.handle,
		Unstarted:   func(*entry) {}, // dropped: the next owner of the partition reads it
		Key:         func(e *entry) (string, bool) { return e.key, e.key != "" },
	})
	if err != nil {
		return fmt.Errorf("kafka: receive %s: %w", queue, err)
	}
	r.pool = pool
	// A fetch waits at most 500 ms for records (Kafka's Java default;
	// franz-go's is 5 s), which bounds the delay of a record whose arrival
	// did not wake a waiting fetch.
	copts := append([]kgo.Opt{kgo.SeedBrokers(t.seeds...), kgo.FetchMaxWait(500 * time.Millisecond)}, t.opts.ClientOptions...)
	copts = append(copts, t.opts.ConsumerOptions...)
	copts = append(copts,
		kgo.ConsumerGroup(t.groupName(queue)),
		kgo.ConsumeTopics(append([]string{queueTopic}, events...)...),
		kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsRevoked(r.revoked),
		kgo.OnPartitionsLost(r.lost),
	)
	cl, err := kgo.NewClient(copts...)
	if err != nil {
		pool.Close()
		return fmt.Errorf("kafka: receive %s: %w", queue, err)
	}
	r.cl = cl
	commitCtx, stopCommits := context.WithCancel(context.Background())
	var commits sync.WaitGroup
	commits.Go(func() { r.commitLoop(commitCtx) })
	r.poll(ctx)
	close(r.stopping)
	pool.Close()
	stopCommits()
	commits.Wait()
	fctx, cancel := context.WithTimeout(context.Background(), finalCommitTimeout)
	r.commit(fctx, nil)
	cancel()
	cl.Close()
	r.mu.Lock()
	for _, p := range r.parts {
		p.cancel()
	}
	r.mu.Unlock()
	return nil
}

type topicPartition struct {
	topic     string
	partition int32
}

// receiver is one Receive call.
type receiver struct {
	t        *Transport
	h        bus.DeliveryHandler
	cl       *kgo.Client
	base     context.Context // Receive's ctx without its cancellation
	log      *slog.Logger
	pool     *driver.Pool[*entry]
	stopping chan struct{} // closed when Receive stops: unstarted records are dropped

	mu     sync.Mutex
	parts  map[topicPartition]*partition
	nextID uint64 // numbers the partitions held, so a partition held again has keys of its own
}

// partition tracks the records of one assigned partition.
type partition struct {
	tp        topicPartition
	ctx       context.Context // handlers' parent; cancelled on revocation
	cancel    context.CancelFunc
	order     driver.Ordered[*kgo.Record] // unsettled records in offset order (a settled prefix is popped)
	id        uint64                      // this holding of the partition
	mark      kgo.EpochOffset             // next offset to commit; Offset -1: nothing settled yet
	committed int64                       // last committed offset
	inflight  sync.WaitGroup              // records being handled
	removed   bool
}

type entry struct {
	p   *partition
	rec *kgo.Record
	pos *driver.Position[*kgo.Record] // its place in the partition's order
	key string                        // the pool's key: the partition's id and the record key; "" without a key
}

// poll fetches records until ctx ends, for the room the pool has: at most
// Prefetch records held and not settled.
func (r *receiver) poll(ctx context.Context) {
	for {
		n := r.pool.Acquire(ctx, r.pool.Capacity())
		if n == 0 {
			return
		}
		fetches := r.cl.PollRecords(ctx, n)
		if fetches.IsClientClosed() {
			r.pool.Release(n)
			r.cl.AllowRebalance()
			return
		}
		failed := false
		fetches.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.Canceled) {
				failed = true
				r.log.Warn("kafka: fetch", logTopic, topic, logPartition, p, driver.LogError, err)
			}
		})
		put := 0
		if ctx.Err() == nil {
			fetches.EachRecord(func(rec *kgo.Record) { // at most n
				r.add(rec)
				put++
			})
		}
		r.pool.Release(n - put)
		r.cl.AllowRebalance()
		if failed && fetches.NumRecords() == 0 {
			sleep(ctx, fetchErrorPause) // an error the client reports at once again
		}
	}
}

// add puts one fetched record into the pool, which starts it once no
// record with the same key of the same partition is before it.
func (r *receiver) add(rec *kgo.Record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	tp := topicPartition{rec.Topic, rec.Partition}
	p := r.parts[tp]
	if p == nil {
		ctx, cancel := context.WithCancel(r.base)
		r.nextID++
		p = &partition{tp: tp, ctx: ctx, cancel: cancel, id: r.nextID,
			mark: kgo.EpochOffset{Epoch: -1, Offset: -1}, committed: -1}
		r.parts[tp] = p
	}
	e := &entry{p: p, rec: rec, pos: p.order.Add(rec)}
	if len(rec.Key) > 0 {
		e.key = strconv.FormatUint(p.id, 10) + "/" + string(rec.Key)
	}
	r.pool.Put(e)
}

// handle runs one record on a pool worker, unless its partition was
// revoked or Receive is stopping.
func (r *receiver) handle(e *entry) {
	p := e.p
	r.mu.Lock()
	if p.ctx.Err() != nil || p.removed || isClosed(r.stopping) {
		r.mu.Unlock()
		return
	}
	p.inflight.Add(1)
	r.mu.Unlock()
	defer p.inflight.Done()
	r.run(p, e)
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// run handles one record. An error the handler returns on a live
// partition hands the record to it again after a pause; a revoked
// partition or a stopping Receive leave it unsettled.
func (r *receiver) run(p *partition, e *entry) {
	for {
		env := decodeRecord(e.rec)
		err := r.h(p.ctx, env)
		if err == nil {
			r.settle(p, e)
			return
		}
		select {
		case <-p.ctx.Done():
			return
		case <-r.stopping:
			return
		default:
		}
		r.log.Warn("kafka: message not concluded; handling it again", driver.LogMessageID, env.ID,
			logTopic, p.tp.topic, logPartition, p.tp.partition, driver.LogError, err)
		t := time.NewTimer(redeliverDelay)
		select {
		case <-t.C:
		case <-p.ctx.Done():
		case <-r.stopping:
		}
		t.Stop()
	}
}

// settle marks e handled and advances the partition's commit mark over
// the settled prefix. The next record of e's key starts when run returns.
func (r *receiver) settle(p *partition, e *entry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p.removed {
		return
	}
	if rec, advanced := p.order.Settle(e.pos); advanced {
		p.mark = kgo.EpochOffset{Epoch: rec.LeaderEpoch, Offset: rec.Offset + 1}
	}
}

// commitLoop commits the settled marks every CommitInterval until ctx ends.
func (r *receiver) commitLoop(ctx context.Context) {
	tick := time.NewTicker(r.t.opts.CommitInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			r.commit(ctx, nil)
		}
	}
}

// commit commits the marks that moved, of the partitions in only (all
// when only is nil).
func (r *receiver) commit(ctx context.Context, only []*partition) {
	offsets := map[string]map[int32]kgo.EpochOffset{}
	var parts []*partition
	r.mu.Lock()
	if only == nil {
		for _, p := range r.parts {
			only = append(only, p)
		}
	}
	for _, p := range only {
		if p.removed || p.mark.Offset <= p.committed {
			continue
		}
		if offsets[p.tp.topic] == nil {
			offsets[p.tp.topic] = map[int32]kgo.EpochOffset{}
		}
		offsets[p.tp.topic][p.tp.partition] = p.mark
		parts = append(parts, p)
	}
	r.mu.Unlock()
	if len(parts) == 0 {
		return
	}
	var cerr error
	r.cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		cerr = err
		if err != nil || resp == nil {
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if perr := kerrOf(p.ErrorCode); perr != nil && cerr == nil {
					cerr = perr
				}
			}
		}
	})
	if cerr != nil {
		if ctx.Err() == nil {
			r.log.Warn("kafka: offset commit failed; settled messages may be delivered again", driver.LogError, cerr)
		}
		return
	}
	r.mu.Lock()
	for _, p := range parts {
		if o := offsets[p.tp.topic][p.tp.partition].Offset; o > p.committed {
			p.committed = o
		}
	}
	r.mu.Unlock()
}

// revoked is called by the client when partitions are taken away in a
// rebalance (and for every partition when the client leaves the group):
// the handlers of those partitions see their ctx cancelled, and what was
// settled is committed before they go.
func (r *receiver) revoked(ctx context.Context, _ *kgo.Client, lost map[string][]int32) {
	r.release(ctx, lost, true)
}

// lost is called when the group membership is lost: nothing can be
// committed any more.
func (r *receiver) lost(ctx context.Context, _ *kgo.Client, lost map[string][]int32) {
	r.release(ctx, lost, false)
}

func (r *receiver) release(ctx context.Context, tps map[string][]int32, commit bool) {
	var parts []*partition
	r.mu.Lock()
	for topic, ps := range tps {
		for _, n := range ps {
			if p := r.parts[topicPartition{topic, n}]; p != nil && !p.removed {
				p.cancel()
				parts = append(parts, p)
			}
		}
	}
	r.mu.Unlock()
	if len(parts) == 0 {
		return
	}
	// Their records not started never start.
	r.pool.Drop(func(e *entry) bool { return slices.Contains(parts, e.p) })
	waitAll(parts, r.t.opts.RevokeWait)
	if commit {
		cctx, cancel := context.WithTimeout(ctx, finalCommitTimeout)
		r.commit(cctx, parts)
		cancel()
	}
	r.mu.Lock()
	for _, p := range parts {
		p.removed = true
		delete(r.parts, p.tp)
	}
	r.mu.Unlock()
}

// waitAll waits for the handlers of parts, at most d.
func waitAll(parts []*partition, d time.Duration) {
	done := make(chan struct{})
	go func() {
		for _, p := range parts {
			p.inflight.Wait()
		}
		close(done)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// sleep waits for d or the end of ctx.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
