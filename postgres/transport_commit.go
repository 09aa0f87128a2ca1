package postgres

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/postbus/bus/backend/sqlstore"
)

// Group commit of sends.
//
// Every Send and Publish outside a caller's transaction waits for its row
// to be committed with a WAL flush, and a flush costs the same for one row
// as for hundreds. So concurrent sends share transactions: a call that
// finds fewer than maxCommitsInFlight commits running starts one at once
// with its row (a lone send is one round trip); the rows of the calls that
// arrive while they all run wait in a queue, and as soon as a commit ends
// its goroutine takes the whole queue (up to MaxSendBatch rows) into the
// next one, with no timer, so under load a group is what arrived during
// one commit. Each group is one statement: one transaction, one commit.
//
// Each caller is released when its row is committed, with the error of
// its own row: when the database refuses a group because of one row's
// data, the rows are committed one by one so that only the bad row's
// caller fails. Then, with the callers already released, the goroutine
// notifies each queue the group inserted into, once. A caller whose
// context ends returns at once; a row still queued is dropped, a row
// already in a commit may still be committed (as a broker may still
// deliver a message whose confirmation was not awaited). Close waits for
// the queued and committing rows.

// maxCommitsInFlight is how many group commits run at once. More than one
// keeps a sender that arrives during a commit from waiting for it before
// its own begins, and lets PostgreSQL flush the WAL of concurrent commits
// together. With 8 senders on the shared test machine 4 measured best
// (docs/benchmarks-log.md, "Group commit"); 1, the classic group commit with
// the notification inside the transaction, measured lowest, since
// PostgreSQL serializes notifying commits with their WAL flush.
const maxCommitsInFlight = 4

// pendingSend is one Send or Publish waiting for its commit.
type pendingSend struct {
	row  sendRow
	ctx  context.Context
	done chan error // buffered; receives the row's outcome exactly once
}

// committer groups concurrent sends into shared commits. Its goroutines
// run only while there are rows to commit.
type committer struct {
	// commit commits rows and returns one error per row, and work to run
	// once their callers are released (nil: none).
	commit  func(ctx context.Context, rows []sendRow) ([]error, func())
	maxRows int

	life   context.Context // ends when Close gives up on waiting rows
	cancel context.CancelFunc

	mu      sync.Mutex
	queue   []*pendingSend
	running int           // commit goroutines
	closing bool          // Close was called: no new rows
	drained chan struct{} // closed when closing and running reaches 0
}

func newCommitter(maxRows int, commit func(context.Context, []sendRow) ([]error, func())) *committer {
	life, cancel := context.WithCancel(context.Background())
	return &committer{commit: commit, maxRows: maxRows, life: life, cancel: cancel}
}

// send commits row, grouped with concurrent ones, and returns its outcome.
func (c *committer) send(ctx context.Context, row sendRow) error {
	p := &pendingSend{row: row, ctx: ctx, done: make(chan error, 1)}
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return ErrTransportClosed
	}
	c.queue = append(c.queue, p)
	if c.running < maxCommitsInFlight {
		c.running++
		group := c.takeLocked()
		go c.run(group)
	}
	c.mu.Unlock()
	select {
	case err := <-p.done:
		return err
	case <-ctx.Done():
	}
	c.mu.Lock()
	if i := slices.Index(c.queue, p); i >= 0 {
		c.queue = slices.Delete(c.queue, i, i+1)
		c.mu.Unlock()
		return ctx.Err() // never handed to the database
	}
	c.mu.Unlock()
	select {
	case err := <-p.done:
		return err
	default:
		return fmt.Errorf("%w: the message may still be committed", ctx.Err())
	}
}

// takeLocked removes from the queue and returns the calls of the next
// group: in order, at least one, and no more than maxRows.
func (c *committer) takeLocked() []*pendingSend {
	n := min(len(c.queue), max(c.maxRows, 1))
	group := slices.Clone(c.queue[:n])
	c.queue = slices.Delete(c.queue, 0, n)
	return group
}

// run commits group, then the groups that queued meanwhile, until the
// queue is empty.
func (c *committer) run(group []*pendingSend) {
	for {
		rows := make([]sendRow, len(group))
		for i, p := range group {
			rows[i] = p.row
		}
		ctx, stop := c.groupContext(group)
		errs, then := c.commit(ctx, rows)
		stop()
		for i, p := range group {
			p.done <- errs[i]
		}
		if then != nil {
			then()
		}
		c.mu.Lock()
		if len(c.queue) == 0 {
			c.running--
			if c.running == 0 && c.drained != nil {
				close(c.drained)
				c.drained = nil
			}
			c.mu.Unlock()
			return
		}
		group = c.takeLocked()
		c.mu.Unlock()
	}
}

// groupContext returns the context of group's commit: it ends when every
// caller of the group has stopped waiting (nobody would learn the
// outcome) or when Close gives up, never because one caller left.
func (c *committer) groupContext(group []*pendingSend) (context.Context, context.CancelFunc) {
	ctxs := make([]context.Context, len(group))
	for i, p := range group {
		ctxs[i] = p.ctx
	}
	return sqlstore.AllDone(c.life, ctxs)
}

// close refuses new rows and waits until the queued and committing ones
// are settled. When ctx ends first, the commits in flight are cancelled,
// the rows still queued fail, and close returns ctx's error once every
// caller has its outcome.
func (c *committer) close(ctx context.Context) error {
	c.mu.Lock()
	c.closing = true
	if c.running == 0 {
		c.mu.Unlock()
		c.cancel()
		return nil
	}
	if c.drained == nil {
		c.drained = make(chan struct{})
	}
	drained := c.drained
	c.mu.Unlock()
	select {
	case <-drained:
		c.cancel()
		return nil
	case <-ctx.Done():
	}
	c.cancel()
	<-drained // the cancelled commits return promptly; the queue fails fast
	return ctx.Err()
}
