package postgres

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Reconnection backoff of WatchDue.
const (
	watchMinBackoff = 100 * time.Millisecond
	watchMaxBackoff = 5 * time.Second
)

// WatchDue holds one pooled connection with LISTEN on Channel and calls wake
// with the earliest due time of every batch any process stores, until ctx
// ends; then it releases the connection and returns nil. When the
// connection fails it logs a warning, reconnects with backoff (100 ms
// doubling to 5 s) and, once listening again, calls wake with the current
// time, because notifications sent in between were lost. wake is called
// from this goroutine and should not block.
//
// With Options.DisableNotify, WatchDue holds no connection and returns nil
// when ctx ends: dispatchers rely on polling.
func (p *Persistence) WatchDue(ctx context.Context, wake func(due time.Time)) error {
	if p.opts.DisableNotify {
		<-ctx.Done()
		return nil
	}
	backoff := watchMinBackoff
	for attempt := 0; ; attempt++ {
		listening, err := p.listen(ctx, wake, attempt > 0)
		if ctx.Err() != nil {
			return nil
		}
		if listening {
			backoff = watchMinBackoff
		}
		p.log.Warn("postgres: LISTEN connection lost; reconnecting",
			"channel", p.names.channel, "backoff", backoff, "error", err)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		backoff = min(2*backoff, watchMaxBackoff)
	}
}

// listen runs one LISTEN session until ctx ends or the connection fails. It
// reports whether LISTEN succeeded, so the caller can reset its backoff.
func (p *Persistence) listen(ctx context.Context, wake func(time.Time), resumed bool) (bool, error) {
	conn, err := p.pool.Acquire(ctx)
	if err != nil {
		return false, fmt.Errorf("postgres: watch due: %w", err)
	}
	defer p.releaseListener(conn)
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{p.names.channel}.Sanitize()); err != nil {
		return false, fmt.Errorf("postgres: watch due: listen: %w", err)
	}
	if resumed {
		wake(time.Now())
	}
	for {
		n, err := conn.Conn().WaitForNotification(ctx)
		if err != nil {
			return true, fmt.Errorf("postgres: watch due: %w", err)
		}
		if n.Channel != p.names.channel {
			continue
		}
		us, err := strconv.ParseInt(n.Payload, 10, 64)
		if err != nil {
			wake(time.Now()) // not ours, but a wake-up costs one claim
			continue
		}
		wake(time.UnixMicro(us))
	}
}

// releaseListener returns a listening connection to the pool without its
// LISTEN registration, or closes it when that cannot be done cleanly.
func (p *Persistence) releaseListener(conn *pgxpool.Conn) {
	defer conn.Release()
	c := conn.Conn()
	if c.IsClosed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := c.Exec(ctx, "UNLISTEN *"); err != nil {
		_ = c.Close(ctx) // the pool discards closed connections
	}
}
