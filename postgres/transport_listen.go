package postgres

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// listener shares one LISTEN connection among a Transport's Receive calls.
// It runs while at least one Receive is subscribed and wakes the receivers
// of the queue a notification names. After a lost connection it wakes every
// receiver once it listens again, since notifications sent in between were
// lost.
type listener struct {
	t      *Transport
	mu     sync.Mutex
	subs   map[string]map[chan struct{}]struct{}
	count  int
	cancel context.CancelFunc
	done   chan struct{}
}

// subscribe registers a wake-up channel for queue and starts listening if
// this is the first subscriber; unsubscribe undoes it and stops listening
// after the last.
func (l *listener) subscribe(queue string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	l.mu.Lock()
	if l.subs[queue] == nil {
		l.subs[queue] = map[chan struct{}]struct{}{}
	}
	l.subs[queue][ch] = struct{}{}
	l.count++
	if l.count == 1 {
		ctx, cancel := context.WithCancel(context.Background())
		l.cancel, l.done = cancel, make(chan struct{})
		go l.run(ctx, l.done)
	}
	l.mu.Unlock()
	return ch, func() {
		l.mu.Lock()
		delete(l.subs[queue], ch)
		if len(l.subs[queue]) == 0 {
			delete(l.subs, queue)
		}
		l.count--
		var cancel context.CancelFunc
		var done chan struct{}
		if l.count == 0 {
			cancel, done = l.cancel, l.done
			l.cancel, l.done = nil, nil
		}
		l.mu.Unlock()
		if cancel != nil {
			cancel()
			<-done
		}
	}
}

// wake signals the receivers of queue, or of every queue when queue is "".
func (l *listener) wake(queue string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for q, chans := range l.subs {
		if queue != "" && q != queue {
			continue
		}
		for ch := range chans {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
}

func (l *listener) run(ctx context.Context, done chan struct{}) {
	defer close(done)
	backoff := watchMinBackoff
	for attempt := 0; ; attempt++ {
		listening, err := l.session(ctx, attempt > 0)
		if ctx.Err() != nil {
			return
		}
		if listening {
			backoff = watchMinBackoff
		}
		l.t.log.Warn("postgres: transport LISTEN connection lost; reconnecting",
			slog.String("channel", l.t.names.channel), slog.Duration("backoff", backoff), slog.Any("error", err))
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

// session holds one LISTEN connection until ctx ends or it fails, and
// reports whether LISTEN succeeded.
func (l *listener) session(ctx context.Context, resumed bool) (bool, error) {
	conn, err := l.t.pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	defer releaseListening(conn.Conn(), conn.Release)
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{l.t.names.channel}.Sanitize()); err != nil {
		return false, err
	}
	if resumed {
		l.wake("")
	}
	for {
		n, err := conn.Conn().WaitForNotification(ctx)
		if err != nil {
			return true, err
		}
		if n.Channel == l.t.names.channel {
			l.wake(n.Payload)
		}
	}
}

// releaseListening returns a connection to the pool without its LISTEN
// registration, or closes it when that cannot be done cleanly.
func releaseListening(c *pgx.Conn, release func()) {
	defer release()
	if c.IsClosed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := c.Exec(ctx, "UNLISTEN *"); err != nil {
		_ = c.Close(ctx)
	}
}
