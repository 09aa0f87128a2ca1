package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/postbus/bus"
	"github.com/postbus/bus/driver"
)

// Log keys.
const (
	logQueue     = "queue"
	logTopic     = "topic"
	logPartition = "partition"
	logError     = "error"
	logMsgID     = "message_id"
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
		log:      t.opts.Logger.With(logQueue, queue),
		wake:     make(chan struct{}, 1),
		prefetch: max(t.opts.Prefetch, conc),
		room:     make(chan struct{}, 1),
		stopping: make(chan struct{}),
		parts:    map[topicPartition]*partition{},
	}
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
		return fmt.Errorf("kafka: receive %s: %w", queue, err)
	}
	r.cl = cl
	commitCtx, stopCommits := context.WithCancel(context.Background())
	var commits sync.WaitGroup
	commits.Go(func() { r.commitLoop(commitCtx) })
	for range conc {
		r.wg.Go(r.work)
	}
	r.poll(ctx)
	close(r.stopping)
	r.wg.Wait()
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
	wake     chan struct{} // signalled when a record becomes ready
	prefetch int
	room     chan struct{} // signalled when a record is settled
	stopping chan struct{} // closed when Receive stops: unstarted records are dropped
	wg       sync.WaitGroup

	mu       sync.Mutex
	parts    map[topicPartition]*partition
	ready    []ready // records whose turn has come, in that order
	buffered int     // records held and not settled
}

type ready struct {
	p *partition
	e *entry
}

// partition tracks the records of one assigned partition.
type partition struct {
	tp        topicPartition
	ctx       context.Context // handlers' parent; cancelled on revocation
	cancel    context.CancelFunc
	order     driver.Ordered[*kgo.Record] // unsettled records in offset order (a settled prefix is popped)
	keys      map[string][]*entry         // per key, records waiting behind the one running
	mark      kgo.EpochOffset             // next offset to commit; Offset -1: nothing settled yet
	committed int64                       // last committed offset
	inflight  sync.WaitGroup              // records being handled
	removed   bool
}

type entry struct {
	rec *kgo.Record
	pos *driver.Position[*kgo.Record] // its place in the partition's order
}

// poll fetches records until ctx ends, keeping at most prefetch unsettled.
func (r *receiver) poll(ctx context.Context) {
	for ctx.Err() == nil {
		r.mu.Lock()
		n := r.prefetch - r.buffered
		r.mu.Unlock()
		if n <= 0 {
			select {
			case <-r.room:
			case <-ctx.Done():
			}
			continue
		}
		fetches := r.cl.PollRecords(ctx, n)
		if fetches.IsClientClosed() {
			r.cl.AllowRebalance()
			return
		}
		failed := false
		fetches.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.Canceled) {
				failed = true
				r.log.Warn("kafka: fetch", logTopic, topic, logPartition, p, logError, err)
			}
		})
		if ctx.Err() == nil {
			fetches.EachRecord(r.add)
		}
		r.cl.AllowRebalance()
		if failed && fetches.NumRecords() == 0 {
			sleep(ctx, fetchErrorPause) // an error the client reports at once again
		}
	}
}

// add takes one fetched record: it starts at once unless a record with the
// same key of the same partition is waiting or running.
func (r *receiver) add(rec *kgo.Record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	tp := topicPartition{rec.Topic, rec.Partition}
	p := r.parts[tp]
	if p == nil {
		ctx, cancel := context.WithCancel(r.base)
		p = &partition{tp: tp, ctx: ctx, cancel: cancel, keys: map[string][]*entry{},
			mark: kgo.EpochOffset{Epoch: -1, Offset: -1}, committed: -1}
		r.parts[tp] = p
	}
	e := &entry{rec: rec, pos: p.order.Add(rec)}
	r.buffered++
	if len(rec.Key) == 0 {
		r.startLocked(p, e)
		return
	}
	k := string(rec.Key)
	p.keys[k] = append(p.keys[k], e)
	if len(p.keys[k]) == 1 {
		r.startLocked(p, e)
	}
}

// startLocked queues e for the workers, which take records in the order
// they became ready.
func (r *receiver) startLocked(p *partition, e *entry) {
	r.ready = append(r.ready, ready{p, e})
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// work is one of the Concurrency workers: it handles ready records until
// Receive stops.
func (r *receiver) work() {
	for {
		select {
		case <-r.stopping:
			return
		default:
		}
		p, e := r.next()
		if e == nil {
			select {
			case <-r.wake:
			case <-r.stopping:
				return
			}
			continue
		}
		r.run(p, e)
		p.inflight.Done()
	}
}

// next takes the first ready record of a partition still held, and passes
// the wake-up on when more are ready.
func (r *receiver) next() (*partition, *entry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for len(r.ready) > 0 {
		x := r.ready[0]
		r.ready[0] = ready{}
		r.ready = r.ready[1:]
		if x.p.ctx.Err() != nil || x.p.removed {
			continue
		}
		x.p.inflight.Add(1)
		if len(r.ready) > 0 {
			select {
			case r.wake <- struct{}{}:
			default:
			}
		}
		return x.p, x.e
	}
	return nil, nil
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
		r.log.Warn("kafka: message not concluded; handling it again", logMsgID, env.ID,
			logTopic, p.tp.topic, logPartition, p.tp.partition, logError, err)
		t := time.NewTimer(redeliverDelay)
		select {
		case <-t.C:
		case <-p.ctx.Done():
		case <-r.stopping:
		}
		t.Stop()
	}
}

// settle marks e handled, advances the partition's commit mark over the
// settled prefix and starts the next record of e's key.
func (r *receiver) settle(p *partition, e *entry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p.removed {
		return
	}
	r.buffered--
	select {
	case r.room <- struct{}{}:
	default:
	}
	if rec, advanced := p.order.Settle(e.pos); advanced {
		p.mark = kgo.EpochOffset{Epoch: rec.LeaderEpoch, Offset: rec.Offset + 1}
	}
	if len(e.rec.Key) == 0 {
		return
	}
	k := string(e.rec.Key)
	q := p.keys[k][1:]
	if len(q) == 0 {
		delete(p.keys, k)
		return
	}
	p.keys[k] = q
	if p.ctx.Err() == nil {
		r.startLocked(p, q[0])
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
			r.log.Warn("kafka: offset commit failed; settled messages may be delivered again", logError, cerr)
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
	waitAll(parts, r.t.opts.RevokeWait)
	if commit {
		cctx, cancel := context.WithTimeout(ctx, finalCommitTimeout)
		r.commit(cctx, parts)
		cancel()
	}
	r.mu.Lock()
	for _, p := range parts {
		r.buffered -= len(p.order.Unsettled())
		p.removed = true
		delete(r.parts, p.tp)
	}
	r.mu.Unlock()
	select {
	case r.room <- struct{}{}:
	default:
	}
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
