package postgres

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"
)

// Liveness of the consumers.
//
// While a Transport receives, it holds a session-level advisory lock on a
// random 62-bit owner key, on one connection of its own that it takes out
// of the pool. Every row it claims records that key in lease_owner. The
// server releases a session lock the moment the session ends, and a
// killed process's sessions end as soon as the kernel closes its sockets,
// so "the owner's lock is no longer held" means "the process that claimed
// this row is gone". Each Receive looks about once a second
// (ownerCheckInterval) for the rows of its queue still leased
// (available_at > now()) whose owner is not its own and whose owner's
// lock nobody holds (pg_locks), and makes them available at once.
//
// A frozen process (SIGSTOP, a long GC pause) or one cut off from the
// server by the network keeps its session, hence its lock, as far as the
// server knows: its rows wait out their lease as before. When the lock
// connection fails while the process lives (a terminated backend, an
// unanswered ping for a whole Lease), the rows claimed under that key are
// free for others, so every delivery claimed under it is cancelled with
// ErrLeaseLost, and a new connection takes a new key.

// ownerCheckInterval is how often the lock connection is pinged and how
// often a Receive looks for the rows of vanished owners.
const ownerCheckInterval = time.Second

// ownerReadyWait bounds how long a Receive waits for the lock before its
// first claim (the pool may have no connection to give at once).
const ownerReadyWait = 5 * time.Second

// owner holds a Transport's liveness lock while at least one Receive runs.
type owner struct {
	t         *Transport
	mu        sync.Mutex
	key       int64 // the key whose lock is held; 0 when none is
	receivers map[*receiver]struct{}
	cancel    context.CancelFunc
	done      chan struct{}
	ready     chan struct{} // closed once the first lock attempt ended
}

func newOwner(t *Transport) *owner {
	return &owner{t: t, receivers: map[*receiver]struct{}{}}
}

// current returns the owner key to record on claimed rows, 0 when no lock
// is held (the rows then rely on their lease alone).
func (o *owner) current() int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.key
}

// join registers r and starts holding the lock if r is the first
// receiver; it waits (within ctx, and at most ownerReadyWait) until the
// first attempt to take the lock ended, so the first claims already carry
// the key; claims made without one rely on their lease. leave undoes it
// and releases the lock after the last receiver.
func (o *owner) join(ctx context.Context, r *receiver) (leave func()) {
	if o.t.opts.DisableOwnerLock {
		return func() {}
	}
	o.mu.Lock()
	o.receivers[r] = struct{}{}
	if len(o.receivers) == 1 {
		rctx, cancel := context.WithCancel(context.Background())
		o.cancel, o.done, o.ready = cancel, make(chan struct{}), make(chan struct{})
		go o.run(rctx, o.done, o.ready)
	}
	ready := o.ready
	o.mu.Unlock()
	wait := time.NewTimer(ownerReadyWait)
	select {
	case <-ready:
	case <-ctx.Done():
	case <-wait.C:
	}
	wait.Stop()
	return func() {
		o.mu.Lock()
		delete(o.receivers, r)
		var cancel context.CancelFunc
		var done chan struct{}
		if len(o.receivers) == 0 {
			cancel, done = o.cancel, o.done
			o.cancel, o.done = nil, nil
		}
		o.mu.Unlock()
		if cancel != nil {
			cancel()
			<-done
		}
	}
}

func (o *owner) run(ctx context.Context, done, ready chan struct{}) {
	defer close(done)
	first := true
	backoff := watchMinBackoff
	for {
		held, err := o.session(ctx, func() {
			if first {
				first = false
				close(ready)
			}
		})
		if first {
			first = false
			close(ready)
		}
		if ctx.Err() != nil {
			return
		}
		if held {
			backoff = watchMinBackoff
		}
		o.t.log.Warn("postgres: transport liveness connection lost; deliveries claimed under it are cancelled, reconnecting",
			slog.Duration("backoff", backoff), slog.Any("error", err))
		timer := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		backoff = min(2*backoff, watchMaxBackoff)
	}
}

// session takes a connection out of the pool, locks a new owner key on it
// and pings it every ownerCheckInterval until ctx ends or it fails. It
// reports whether it held the lock. When it held it and did not end with
// ctx, the deliveries claimed under the key are cancelled.
func (o *owner) session(ctx context.Context, locked func()) (bool, error) {
	pc, err := o.t.pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	conn := pc.Hijack() // the lock lives as long as this session
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	var key int64
	for key == 0 {
		k := rand.Int64N(1<<62) + 1
		var ok bool
		if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, k).Scan(&ok); err != nil {
			return false, err
		}
		if ok {
			key = k
		}
	}
	o.mu.Lock()
	o.key = key
	o.mu.Unlock()
	locked()
	err = o.hold(ctx, conn.Ping)
	o.mu.Lock()
	o.key = 0
	receivers := make([]*receiver, 0, len(o.receivers))
	for r := range o.receivers {
		receivers = append(receivers, r)
	}
	o.mu.Unlock()
	if ctx.Err() == nil {
		for _, r := range receivers {
			r.ownerLost(key)
		}
	}
	return true, err
}

// hold pings every ownerCheckInterval until ctx ends or a ping fails or
// goes unanswered for a whole lease.
func (o *owner) hold(ctx context.Context, ping func(context.Context) error) error {
	tick := time.NewTicker(ownerCheckInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		pctx, cancel := context.WithTimeout(ctx, o.t.opts.Lease)
		err := ping(pctx)
		cancel()
		if err != nil {
			return err
		}
	}
}
