package redis

import (
	"context"
	"sync"

	goredis "github.com/redis/go-redis/v9"
)

// maxBatch bounds the commands one pipeline carries.
const maxBatch = 256

// leaderRounds bounds the pipelines a Send call runs for others.
const leaderRounds = 4

// batcher pipelines the XADDs of concurrent Send calls: while one pipeline
// is on the wire, the calls that arrive queue up and go together in the
// next, so many senders share round trips instead of each waiting for its
// own. The call that finds no pipeline running sends the queue itself (no
// goroutine hand-off on the way), for at most leaderRounds pipelines; a
// goroutine takes over what is still queued after that.
type batcher struct {
	rdb goredis.UniversalClient

	mu      sync.Mutex
	queue   []*addCall
	running bool
}

type addCall struct {
	ctx  context.Context
	args *goredis.XAddArgs
	err  error
	done chan struct{}
}

// add runs one XADD in the next pipeline and waits for its outcome or the
// end of ctx. A call whose ctx ended while it waited may still be stored.
func (b *batcher) add(ctx context.Context, args *goredis.XAddArgs) error {
	c := &addCall{ctx: ctx, args: args, done: make(chan struct{})}
	b.mu.Lock()
	b.queue = append(b.queue, c)
	lead := !b.running
	b.running = true
	b.mu.Unlock()
	if lead && !b.run(leaderRounds) {
		go b.run(0)
	}
	select {
	case <-c.done:
		return c.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run sends queued calls until the queue is empty (true) or it ran rounds
// pipelines (false; 0: no bound). The caller holds the running flag.
func (b *batcher) run(rounds int) bool {
	var spare []*addCall
	for i := 0; ; i++ {
		b.mu.Lock()
		calls := b.queue
		if len(calls) == 0 {
			b.running = false
			b.mu.Unlock()
			return true
		}
		if rounds > 0 && i == rounds {
			b.mu.Unlock()
			return false
		}
		if len(calls) > maxBatch {
			b.queue = append(spare[:0], calls[maxBatch:]...)
			calls = calls[:maxBatch]
		} else {
			b.queue = spare[:0]
		}
		b.mu.Unlock()
		b.flush(calls)
		spare = calls[:0]
	}
}

func (b *batcher) flush(calls []*addCall) {
	live := calls[:0:0]
	for _, c := range calls {
		if err := c.ctx.Err(); err != nil {
			c.err = err
			close(c.done)
			continue
		}
		live = append(live, c)
	}
	if len(live) == 1 { // no pipeline for a lone call
		c := live[0]
		c.err = b.rdb.XAdd(c.ctx, c.args).Err()
		close(c.done)
		return
	}
	if len(live) == 0 {
		return
	}
	cmds := make([]*goredis.StringCmd, len(live))
	// The pipeline runs on a ctx of its own: one caller giving up must not
	// fail the others. The client's own timeouts bound it.
	ctx := context.WithoutCancel(live[0].ctx)
	_, _ = b.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, c := range live {
			cmds[i] = p.XAdd(ctx, c.args)
		}
		return nil
	})
	for i, c := range live {
		c.err = cmds[i].Err()
		close(c.done)
	}
}
